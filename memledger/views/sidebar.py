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
from memledger.specs.loop import LOOP_PROFILES, LOOPS
from memledger.specs.loop_implied import implied
from memledger.specs.parallel import SCHEDULES
from memledger.specs.train import OPTIMIZERS, RECIPES
from memledger.views import safe_text
from memledger.views.gpu_widget import gpu_choice
from memledger.views.model_codec import PREFIX, decode_model, encode_model
from memledger.views.options import DEGREE_KEYS, valid_values
from memledger.views.state import CONFIG_KEYS, INT_LIMITS, PageParam, to_specs
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
    "dp_replicate": "HSDP: copies of the ZeRO/FSDP shard group; states shard over dp·cp/R ranks "
                    "and each copy holds the same shards (R must divide dp). torchtitan "
                    "data_parallel_replicate_degree, accelerate dp_replicate_size, FSDP1 "
                    "HYBRID_SHARD, Megatron --num-distributed-optimizer-instances. No effect at "
                    "ZeRO-0.",
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
                 "every ⌈√L⌉-th layer's input (Chen et al. 2016). torchtitan's: *op* (per-"
                 "operator save list: every other matmul, attention outputs, reduce-scatter / "
                 "all-to-all outputs), *interval* (every k-th block fully checkpointed), "
                 "*memory-budget* (torch.compile's partitioner at a budget; needs compile). "
                 "See docs/torchtitan.md.",
    "recompute_every": "k for every-k (0 = ⌈√L⌉) and for interval (every k-th block fully "
                       "checkpointed, k ≥ 1).",
    "budget": "memory-budget: torchtitan memory_budget × 100 — 0 = the activations of full "
              "checkpointing, 100 = the compiler's default saved set.",
    "dropout": "Megatron's --hidden-dropout × 100 (Megatron-LM's own default is 10; Llama-style "
               "recipes set 0): above 0 the megatron profile keeps a bool mask after attention, "
               "after the MLP and after the embedding — h bytes per token each.",
    "reshard": "FSDP2 reshard_after_forward (ZeRO-3): *default* reshards after forward unless "
               "PP is on (torchtitan); *never* keeps each unit's unsharded copy from forward to "
               "backward, beside its shard.",
    "compile": "torch.compile the model (torchtitan [compile]): the partitioner recomputes the "
               "fused pointwise outputs (norms, SwiGLU) instead of saving them.",
    "loss_parallel": "torchtitan loss parallel (with tp > 1): the logits stay vocab-sharded; "
                     "off gathers them to full V on every tp rank.",
    "graphs": "torchtitan 0.3 runs each step under a CUDA graph unless "
              "training.disable_cuda_graphs: its gradients are zeroed, not freed, so they are "
              "alive all step. *auto*: where 0.3 runs it (the torchtitan loop, no PP, no EP).",
    "inbwd": "Each parameter's optimizer step runs from its gradient hook inside the backward "
             "and frees that gradient (torchtitan 0.2 early_step_in_backward, torchtune "
             "optimizer_in_bwd): no gradient accumulates and the end-of-step update holds "
             "nothing. One micro-batch, no PP or EP; FSDP2 or a single data-parallel rank.",
    "offload": "Static rows in host memory, the step on the CPU. *optimizer*: ZeRO-Offload "
               "(master and states). *params* (ZeRO-3): FSDP's CPU offload (torchtitan "
               "enable_cpu_offload, accelerate fsdp_offload_params) — parameter, gradient and "
               "optimizer shards; the GPU keeps the copies each gather and reduce-scatter makes.",
    "loop": "Which framework runs the step, and so when memory is alive: *auto* follows the "
            "profile (hf → plain PyTorch, megatron/paper → Megatron); a named loop sets the "
            "profile of the model code it trains (hf for torchtitan, pytorch, hf-trainer, "
            "deepspeed). "
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
                 disabled=len(opts) < 2, on_change=_loop_profile if key == "loop" else None)


def _loop_profile() -> None:
    """Callback of the loop picker: a named loop brings the profile of the model code it trains
    (specs.loop.LOOP_PROFILES, as the CLI's --profile auto) and, for torchtitan, the ZeRO stage
    and precision it runs with at these degrees (specs.loop_implied); all stay changeable."""
    ss = st.session_state
    loop = ss.get(W + "loop")
    profile = LOOP_PROFILES.get(loop)
    if profile is not None:
        ss[W + "profile"] = profile
    tp, pp, cp, replicas = (int(ss.get(W + k) or 1) for k in ("tp", "pp", "cp", "dp_replicate"))
    dp = max(1, int(ss.get(W + "world") or 1) // (tp * pp * cp))
    for key, (value, _src) in implied(loop, dp=dp, cp=cp, tp=tp, pp=pp,
                                      dp_replicate=replicas).items():
        if key in ("zero", "precision"):  # the sidebar's own widgets; the runtime follows the loop
            ss[W + key] = value


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


def _import_training() -> None:
    """Callback of the training-config button: a framework's file → the whole sidebar (and so
    the URL). A bad file leaves every setting as it was and says why."""
    from memledger.views.config_io import MAX_BYTES, import_config
    from memledger.views.sync import CFG
    ss = st.session_state
    ss["_ml_train_error"], ss["_ml_train_rows"] = "", []
    upload = ss.get("train_file")
    data = upload.getvalue()[:MAX_BYTES + 1] if upload is not None else \
        ss.get("train_text", "").encode()
    name = safe_text.plain(upload.name, 80) if upload is not None else "pasted"
    try:
        new, rows = import_config(ss[CFG], data, name)
    except (SpecError, ValueError, KeyError, TypeError) as e:
        ss["_ml_train_error"] = f"Could not import this training config: {e}"
        return
    ss[CFG] = new  # the file's layout, not the new model's start layout
    for k in CONFIG_KEYS:
        ss[W + k] = getattr(new, k)
    ss["_ml_train_rows"] = rows


def _training_import_widgets() -> None:
    st.file_uploader("Launch script or config", type=["sh", "yaml", "yml", "toml", "json", "txt"],
                     key="train_file", help="Megatron-LM script or YAML, torchtitan TOML, "
                                            "DeepSpeed JSON, TrainingArguments, accelerate or "
                                            "LLaMA-Factory YAML (docs/configs.md)")
    st.text_area("…or paste it", key="train_text", height=100)
    st.button("Use this training config", on_click=_import_training, key="train_go")
    if st.session_state.get("_ml_train_error"):
        st.error(safe_text.md(st.session_state["_ml_train_error"], 600))
    rows = st.session_state.get("_ml_train_rows")
    if rows:
        st.caption("What was read, the framework defaults used, what was ignored and what "
                   "memledger does not model:")
        st.dataframe([{k: safe_text.plain(str(v), 120) for k, v in r.items()} for r in rows],
                     hide_index=True, key="train_rows")


IMPORT_OPEN, MORE_OPEN = "import_open", "more_open"  # the lazy expanders' keys
TRAIN_OPEN = "train_import_open"


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
    st.file_uploader("config.json", type=["json"], key="import_file", max_upload_size=2)
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
    box = lazy_expander("Import a training config", TRAIN_OPEN, icon=":material/terminal:")
    if box is not None:
        with box:
            _training_import_widgets()
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
    _hsdp(res)
    st.select_slider("ZeRO stage", (0, 1, 2, 3), key=W + "zero", help=HELP["zero"],
                     format_func=lambda z: f"ZeRO-{z}")
    sp = valid_values(res.model, cfg, "sp")
    st.toggle("Sequence parallel", key=W + "sp", help=HELP["sp"], disabled=len(sp) < 2)
    _choice("schedule", "Pipeline schedule", res)
    _choice("layout", "Layer layout", res)


def _hsdp(res: Resolved) -> None:
    """The HSDP replica count (divisors of dp the core accepts) and, above 1, what it means
    for this configuration: the size of the group ZeRO shards over, or that ZeRO-0 ignores it."""
    opts = valid_values(res.model, res.cfg, "dp_replicate")
    st.select_slider("HSDP: shard-group replicas", opts, key=W + "dp_replicate",
                     help=HELP["dp_replicate"], disabled=len(opts) < 2)
    if res.cfg.dp_replicate > 1:
        st.caption(_hsdp_caption(res))


def _hsdp_caption(res: Resolved) -> str:
    """The shard group in numbers, from the core's ParallelSpec (dense_dp = dp·cp/R)."""
    par, _ = to_specs(res.cfg, res.model)
    r = par.dp_replicate
    if par.zero == 0:
        return f"HSDP {r} replicas: no effect at ZeRO-0 (every rank holds the whole states)"
    return (f"ZeRO-{par.zero} shards over dp·cp/R = {par.dp}·{par.cp}/{r} = {par.dense_dp} "
            f"ranks; {r} copies of that group")


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
    keys = [k for k in MORE_KEYS if with_recompute or k not in TRAIN_ONLY]
    box = lazy_expander("More: " + ", ".join(MORE_LABELS[k].lower() for k in keys),
                        MORE_OPEN, icon=":material/tune:")
    if box is not None:
        with box:
            for k in keys:
                fmt = ((lambda v: "on" if v else "off") if k in BOOL_MORE
                       else OFFLOAD_LABELS.get if k == "offload" else str)
                _choice(k, MORE_LABELS[k], res, fmt)


BOOL_MORE = ("compile", "loss_parallel", "inbwd")  # shown as on / off
MORE_KEYS = ("loop", "profile", "attention", "recompute_every", "budget", "reshard", "compile",
             "loss_parallel", "dropout", "offload", "inbwd", "graphs")
MORE_LABELS = {"loop": "Training loop", "profile": "Activation profile",
               "attention": "Attention kernel", "recompute_every": "Recompute k",
               "budget": "Memory budget %", "reshard": "FSDP2 reshard after forward",
               "compile": "torch.compile", "loss_parallel": "Loss parallel",
               "dropout": "Hidden dropout %", "offload": "Offload to CPU",
               "inbwd": "Optimizer step in backward", "graphs": "CUDA-graph step (torchtitan 0.3)"}
OFFLOAD_LABELS = {"none": "none", "optimizer": "optimizer (ZeRO-Offload)",
                  "params": "params + grads + optimizer (FSDP)"}
# not on the planner's workload section: its search varies recompute and runs its own loop
TRAIN_ONLY = ("loop", "recompute_every", "budget", "reshard", "compile", "loss_parallel", "dropout",
              "offload", "inbwd", "graphs")


FT_KEYS = ("ft", "lora_r", "lora_alpha", "lora_targets", "lora_dropout", "lora_dtype", "base",
           "freeze")
FT_HELP = {
    "ft": "*full*: every parameter trains. *lora*: the base is frozen, rank-r adapters train "
          "(Hu et al. 2021). *qlora*: LoRA on a base quantised to NF4 / int8 / fp8 (Dettmers et "
          "al. 2023). *freeze*: the named modules or layer ranges do not train.",
    "lora_targets": "Comma separated: attention, mlp, all-linear (peft's), experts, router, or "
                    "module names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                    "down_proj, linear_qkv, ...).",
    "lora_dtype": "The adapters' storage dtype: peft upcasts bf16/fp16 adapters to fp32 "
                  "(autocast_adapter_dtype=True).",
    "base": "Storage of the frozen base: auto = nf4 for qlora (block 64, double quantisation), "
            "else bf16.",
    "freeze": "Comma separated modules (embeddings, head, norms, attention, mlp, q_proj, ...) "
              "or layer ranges (layers:0-15) that do not train.",
}


def _finetune_section(res: Resolved) -> None:
    cfg = res.cfg
    _ft_choice("ft", "Fine-tuning", res)
    if cfg.ft in ("lora", "qlora"):
        c1, c2 = st.columns(2)
        with c1:
            st.number_input("LoRA rank r", *INT_LIMITS["lora_r"], key=W + "lora_r")
        with c2:
            st.number_input("LoRA alpha", *INT_LIMITS["lora_alpha"], key=W + "lora_alpha")
        st.text_input("LoRA targets", key=W + "lora_targets", help=FT_HELP["lora_targets"])
        st.number_input("LoRA dropout (%)", *INT_LIMITS["lora_dropout"], key=W + "lora_dropout")
        _ft_choice("lora_dtype", "Adapter dtype", res)
        _ft_choice("base", "Base weights", res)
    if cfg.ft in ("freeze", "lora", "qlora"):
        st.text_input("Frozen modules / layers", key=W + "freeze", help=FT_HELP["freeze"])
    for note in res.notes:  # a fine-tuning setting the core refused, moved back (options.repair)
        if note.split(" ", 1)[0] in FT_KEYS:
            st.error(safe_text.md(note, 600))


def _ft_choice(key: str, label: str, res: Resolved) -> None:
    opts = valid_values(res.model, res.cfg, key)
    st.selectbox(label, opts, key=W + key, help=FT_HELP.get(key), disabled=len(opts) < 2)


SECTIONS = {"model": ("Model & GPUs", _model_section),
            "parallel": ("Parallelism", _parallel_section),
            "train": ("Training", _train_section),
            "workload": ("Workload", _workload_section),
            "finetune": ("Fine-tuning", _finetune_section)}


ALL_SECTIONS = ("model", "parallel", "train", "finetune")


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
