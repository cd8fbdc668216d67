"""The shared sidebar: model, GPU, parallelism and training settings (Streamlit glue).

Every page calls `sidebar(page)`. Widgets only offer what `options.valid_values` allows, so a
slider never lands on a configuration the core rejects; their values flow back through
`sync.resolve` on the next run and out to the URL through `sync.write_url`. A page calls
`resolve` first and `draw` last (or `sidebar` for both at once).
"""
from __future__ import annotations

import streamlit as st

from memledger import safe_json
from memledger.errors import SpecError
from memledger.presets import MODELS
from memledger.specs.loop import LOOPS
from memledger.specs.parallel import SCHEDULES
from memledger.specs.train import OPTIMIZERS, RECIPES
from memledger.views import safe_text
from memledger.views.gpu_widget import gpu_choice
from memledger.views.model_codec import PREFIX, decode_model, encode_model
from memledger.views.options import DEGREE_KEYS, valid_values
from memledger.views.state import INT_LIMITS, PageParam
from memledger.views.sync import Resolved, W, resolve

MAX_CONFIG_BYTES = 1_000_000

DEGREE_LABELS = {"tp": "TP: tensor parallel", "pp": "PP: pipeline stages",
                 "vpp": "VPP: virtual stages per rank", "ep": "EP: expert parallel",
                 "etp": "ETP: expert tensor parallel", "cp": "CP: context parallel"}
HELP = {
    "model": "A preset (dimensions from the model's Hugging Face config.json) or an imported "
             "config. The link carries an imported model with it.",
    "gpu": "Sets the capacity line and the fits/over verdict.",
    "world": "Total GPUs. Data parallel dp = world / (tp·pp·cp).",
    "tp": "Tensor parallel: each layer's matrices are split across tp GPUs (Megatron). "
          "Must divide the attention heads and FFN size.",
    "pp": "Pipeline parallel: the layers are cut into pp stages, one per GPU. Early stages hold "
          "more micro-batches in flight: the staircase.",
    "vpp": "Virtual pipeline stages (interleaved 1F1B): each GPU holds vpp smaller chunks. "
           "Only the interleaved schedule uses it.",
    "ep": "Expert parallel: the routed experts are spread over ep GPUs (MoE models only).",
    "etp": "Expert tensor parallel: each expert's matrices split over etp GPUs (MoE only).",
    "cp": "Context parallel: each sequence is split over cp GPUs (ring attention).",
    "zero": "ZeRO / distributed optimizer: 1 shards optimizer states over the data-parallel "
            "group, 2 also gradients, 3 also weights.",
    "sp": "Sequence parallel: with tp > 1, norms and dropout work on seq/tp tokens, so their "
          "activations are split tp ways. Megatron-Core requires it for MoE with tp > 1.",
    "schedule": "\n".join(f"- **{k}**: {v}" for k, v in SCHEDULES.items()),
    "layout": "How layers are spread over pipeline stages. *balanced*: as even as possible, the "
              "remainder to the middle stages (the first and last carry embedding and head). "
              "*even*: pp·vpp must divide the layers.",
    "mb": "Micro-batch size: sequences per forward/backward pass.",
    "seq": "Sequence length in tokens.",
    "m": "Micro-batches per optimizer step (gradient accumulation); caps how many are in flight.",
    "precision": "\n".join(f"- **{k}**: {r.description}" for k, r in RECIPES.items()),
    "optimizer": "\n".join(f"- **{k}**: {o.description}" for k, o in OPTIMIZERS.items()),
    "profile": "Which tensors a layer saves for backward: *megatron* (Megatron-Core + Transformer "
               "Engine, flash attention), *paper* (Korthikanti et al. 2022), *hf* (Hugging Face "
               "modules, traced).",
    "attention": "flash: no s×s matrix is kept. eager: the attention probabilities are kept "
                 "(needs the paper or hf profile).",
    "recompute": "Activation recomputation: *selective* re-runs attention core, norms and "
                 "activation functions; *full* keeps only each layer's input; *every-k* keeps "
                 "every ⌈√L⌉-th layer's input (Chen et al. 2016).",
    "loop": "Which framework runs the step, and so when memory is alive: *auto* follows the "
            "profile (hf → plain PyTorch, megatron/paper → Megatron). "
            + " ".join(f"*{k}*: {v.grad_lifetime} gradients, {v.optimizer_impl} optimizer, MTP "
                       f"{v.mtp}." for k, v in LOOPS.items()),
}


def _model_name(key: str) -> str:
    if key in MODELS:
        return MODELS[key].name
    try:
        return f"{safe_text.plain(decode_model(key).name, 80)} (imported)"
    except SpecError:
        return "imported model"


def _choice(key: str, label: str, res: Resolved, fmt=str) -> None:
    opts = valid_values(res.model, res.cfg, key)
    st.selectbox(label, opts, key=W + key, format_func=fmt, help=HELP[key],
                 disabled=len(opts) < 2)


def _import_config() -> None:
    """Callback of the import button: an HF config.json → a ModelSpec carried in the URL."""
    ss = st.session_state
    ss["_ml_import_error"] = ""
    upload = ss.get("import_file")
    if upload is not None:
        text = upload.getvalue()[:MAX_CONFIG_BYTES + 1]
    else:
        text = ss.get("import_text", "").encode()
    try:
        if len(text) > MAX_CONFIG_BYTES:
            raise ValueError(f"config is larger than {MAX_CONFIG_BYTES:,} bytes")
        config = safe_json.loads(text or b"null", "config", MAX_CONFIG_BYTES)  # depth-bounded
        if not isinstance(config, dict):
            raise ValueError("expected a JSON object (the contents of config.json)")
        from memledger.model.hf_config import from_hf_config  # lands with the importer branch
        ss[W + "model"] = encode_model(from_hf_config(config))
    except ImportError:
        ss["_ml_import_error"] = ("Importing needs memledger.model.hf_config, which this build does "
                                  "not include yet; pick a preset instead.")
    except (SpecError, ValueError, KeyError, TypeError) as e:
        ss["_ml_import_error"] = f"Could not import this config: {e}"


def _load_hub() -> None:
    """Callback of the Hub button: a model id → its config.json → a ModelSpec in the URL."""
    ss = st.session_state
    ss["_ml_import_error"] = ""
    try:
        from memledger.model.hub import hub_model
        ss[W + "model"] = encode_model(hub_model(ss.get("hub_id", "")))
    except SpecError as e:
        ss["_ml_import_error"] = f"Could not load this model: {e}"


IMPORT_OPEN, MORE_OPEN = "import_open", "more_open"  # the lazy expanders' keys


def lazy_expander(label: str, key: str, **kw):
    """An expander whose body is built only while it is open (None when closed): Streamlit
    builds and sends a closed expander's body on every run, and each element it holds costs
    the browser a re-render on every slider move (docs/drag-preview.md, "A faster release")."""
    box = st.expander(label, key=key, on_change="rerun", **kw)
    return box if box.open else None


def _import_widgets() -> None:
    st.text_input("Hub id", key="hub_id", placeholder="meta-llama/Llama-3.1-8B",
                  help="Read from memledger's shipped catalog, this server's Hugging Face "
                       "cache, or the Hub.")
    st.button("Load from the Hub", on_click=_load_hub, key="hub_go")
    st.file_uploader("config.json", type=["json"], key="import_file")
    st.text_area("…or paste it", key="import_text", height=100)
    st.button("Use this config", on_click=_import_config, key="import_go")
    if st.session_state.get("_ml_import_error"):
        st.error(safe_text.md(st.session_state["_ml_import_error"], 600))


def _model_section(res: Resolved) -> None:
    cfg = res.cfg
    options = list(MODELS) + ([cfg.model] if cfg.model.startswith(PREFIX) else [])
    st.selectbox("Model", options, key=W + "model", format_func=_model_name, help=HELP["model"])
    box = lazy_expander("Import a Hugging Face model", IMPORT_OPEN, icon=":material/upload_file:")
    if box is not None:
        with box:
            _import_widgets()
    gpu_choice(cfg.gpu, HELP["gpu"])
    lo, hi = INT_LIMITS["world"]
    st.number_input("World size (GPUs)", lo, hi, key=W + "world", step=8, help=HELP["world"])


def _parallel_section(res: Resolved) -> None:
    cfg = res.cfg
    for k in DEGREE_KEYS:
        opts = valid_values(res.model, cfg, k)
        st.select_slider(DEGREE_LABELS[k], opts, key=W + k, help=HELP[k], disabled=len(opts) < 2)
    st.caption(f"**DP: data parallel = {cfg.dp}** = world / (tp·pp·cp) = "
               f"{cfg.world} / ({cfg.tp}·{cfg.pp}·{cfg.cp})")
    st.select_slider("ZeRO stage", (0, 1, 2, 3), key=W + "zero", help=HELP["zero"],
                     format_func=lambda z: f"ZeRO-{z}")
    sp = valid_values(res.model, cfg, "sp")
    st.toggle("Sequence parallel", key=W + "sp", help=HELP["sp"], disabled=len(sp) < 2)
    _choice("schedule", "Pipeline schedule", res)
    _choice("layout", "Layer layout", res)


def _train_section(res: Resolved) -> None:
    c1, c2 = st.columns(2)
    with c1:
        st.number_input("Micro-batch", *INT_LIMITS["mb"], key=W + "mb", help=HELP["mb"])
    with c2:
        st.number_input("Micro-batches / step", *INT_LIMITS["m"], key=W + "m", help=HELP["m"])
    _workload_section(res, with_recompute=True)


def _workload_section(res: Resolved, with_recompute: bool = False) -> None:
    """What a search keeps fixed while it varies the layout, micro-batch and recompute (the
    planner): sequence length, precision, optimizer, activation profile, attention kernel.
    The training section adds the recompute choice in the same place."""
    st.number_input("Sequence length (tokens)", *INT_LIMITS["seq"], key=W + "seq", step=1024,
                    help=HELP["seq"])
    _choice("precision", "Precision recipe", res)
    _choice("optimizer", "Optimizer", res)
    if with_recompute:
        _choice("recompute", "Recompute", res)
    # rarely changed: built only while open (a closed widget keeps its value: sync reads the
    # configuration, not the widget)
    box = lazy_expander("More: " + ", ".join(MORE_LABELS[k].lower() for k in MORE_KEYS
                                             if with_recompute or k != "loop"),
                        MORE_OPEN, icon=":material/tune:")
    if box is not None:
        with box:
            for k in MORE_KEYS:
                if with_recompute or k != "loop":
                    _choice(k, MORE_LABELS[k], res)


MORE_KEYS = ("loop", "profile", "attention")
MORE_LABELS = {"loop": "Training loop", "profile": "Activation profile",
               "attention": "Attention kernel"}


SECTIONS = {"model": ("Model & GPUs", _model_section),
            "parallel": ("Parallelism", _parallel_section),
            "train": ("Training", _train_section),
            "workload": ("Workload", _workload_section)}


ALL_SECTIONS = ("model", "parallel", "train")


def draw(res: Resolved, sections: tuple[str, ...] = ALL_SECTIONS) -> None:
    """Draw the shared settings in the sidebar. Pages call it after their main content, so the
    chart reaches the browser before the thirty-odd widgets do."""
    with st.sidebar:
        for s in sections:
            title, section = SECTIONS[s]
            st.subheader(title)
            section(res)


def sidebar(page_name: str, specs: tuple[PageParam, ...] = (),
            sections: tuple[str, ...] = ALL_SECTIONS) -> Resolved:
    """Resolve this run's configuration and draw the shared settings (in one call)."""
    res = resolve(page_name, specs)
    draw(res, sections)
    return res
