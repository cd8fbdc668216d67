"""Dashboard state: URL query parameters <-> one validated configuration (docs/design.md §11).

The URL is the state. Every setting is a query parameter named as in `KEYS`; a setting at its
default is left out of the URL. Parsing never raises: a value that does not parse (unknown
preset, `tp=banana`, numbers out of range) becomes a `ParamIssue` naming the parameter and
falls back to the default. Whether a *combination* is valid (tp dividing the heads, ...) is the
core's question, answered in `memledger.views.options`. `to_specs` turns a configuration into
the core's specs. Pure: no Streamlit.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace

from memledger.errors import SpecError
from memledger.ledger.pipeline.schedules import balanced_layout
from memledger.presets import GPUS, MODELS, gpu, model
from memledger.presets.defaults import DEFAULTS as D
from memledger.presets.gpus import CUSTOM as CUSTOM_GPU
from memledger.presets.gpus import canonical_custom
from memledger.presets.layouts import LAYOUT_KEYS, start_layout
from memledger.specs import OPTIMIZERS, RECIPES, SCHEDULES, ModelSpec, ParallelSpec, TrainSpec
from memledger.specs.finetune import (BASE_WEIGHTS, FREEZE_ONLY, LORA_DTYPES, MODES, MODULES,
                                      TARGET_SETS, FinetuneSpec, parse_range)
from memledger.specs.hardware import Hardware
from memledger.specs.runtime import CUDA_GRAPHS, LOOP_CHOICES, RESHARD_AFTER_FORWARD, RuntimeSpec
from memledger.specs.train import ATTENTION_IMPLS, PROFILES, RECOMPUTE
from memledger.views.model_codec import PREFIX as SPEC_PREFIX
from memledger.views.model_codec import decode_model

# The share-link keys, in URL order (the planner builds links with the same names).
KEYS = ("model", "gpu", "world", "tp", "pp", "vpp", "ep", "etp", "cp", "dp", "dp_replicate",
        "zero", "sp", "schedule", "layout", "mb", "seq", "m", "precision", "optimizer", "profile",
        "attention", "recompute", "loop", "recompute_every", "budget", "reshard", "compile",
        "loss_parallel", "ft", "lora_r", "lora_alpha", "lora_targets", "lora_dropout", "lora_dtype",
        "base", "freeze", "dropout", "offload", "inbwd", "graphs")
PARALLEL_KEYS = ("tp", "pp", "vpp", "ep", "etp", "cp")
MAX_VALUE_CHARS = 4096  # a model spec link is ~0.5 kB; anything longer is not ours


@dataclass(frozen=True)
class Config:
    """Every dashboard setting, as the URL spells it (dp is derived: world / (tp·pp·cp)).
    Defaults: memledger.presets.defaults, shared with the CLI."""

    model: str = D["model"]  # a preset name or "spec:<encoded ModelSpec>"
    gpu: str = D["gpu"]
    world: int = D["world"]
    tp: int = D["tp"]
    pp: int = D["pp"]
    vpp: int = D["vpp"]
    ep: int = D["ep"]
    etp: int = D["etp"]
    cp: int = D["cp"]
    # HSDP: copies of the ZeRO / FSDP shard group (ParallelSpec.dp_replicate); divides dp. At 1
    # it stays out of the link, so links made before HSDP existed open unchanged
    dp_replicate: int = 1
    zero: int = D["zero"]
    sp: bool = D["sp"]
    schedule: str = D["schedule"]
    layout: str = D["layout"]  # "balanced", "even" (pp·vpp must divide the layers) or "4,8,8,..."
    mb: int = D["micro_batch"]
    seq: int = D["seq"]
    m: int = D["micro_batches"]
    precision: str = D["precision"]
    optimizer: str = D["optimizer"]
    profile: str = D["profile"]
    attention: str = D["attention"]
    recompute: str = D["recompute"]
    loop: str = "auto"  # training-loop preset (specs/loop.py); auto follows the profile
    # fine-tuning (specs/finetune.py); at their defaults they stay out of the link, so links
    # made before fine-tuning existed open the same (full) configuration
    ft: str = "full"
    lora_r: int = 8
    lora_alpha: int = 8
    lora_targets: str = "q_proj,v_proj"  # comma separated names (specs/finetune.py)
    lora_dropout: int = 0  # percent
    lora_dtype: str = "fp32"
    base: str = "auto"  # base_weights; auto = nf4 for qlora, else bf16
    freeze: str = ""  # comma separated modules or layers:A-B
    # torchtitan / FSDP2 (docs/torchtitan.md); links made before they existed open at defaults
    recompute_every: int = 0  # every-k / interval k
    budget: int = 50  # memory-budget: TrainSpec.recompute_budget_pct
    reshard: str = "default"  # RuntimeSpec.fsdp_reshard_after_forward
    compile: bool = False  # RuntimeSpec.torch_compile
    loss_parallel: bool = True  # RuntimeSpec.loss_parallel
    dropout: int = 0  # TrainSpec.hidden_dropout_pct (Megatron --hidden-dropout × 100)
    offload: str = "none"  # static rows on the host: OFFLOADS (RuntimeSpec optimizer / param)
    inbwd: bool = False  # RuntimeSpec.optimizer_in_backward
    graphs: str = "auto"  # RuntimeSpec.cuda_graphs (torchtitan 0.3's CUDA-graph step)

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp * self.cp)


DEFAULT = Config()
CONFIG_KEYS = tuple(f.name for f in fields(Config))

# Integer settings: (smallest, largest) accepted from a URL. The upper bounds only keep a
# hand-edited link from asking for absurd arrays of ranks; the core decides the rest.
INT_LIMITS: dict[str, tuple[int, int]] = {
    "world": (1, 262_144), "tp": (1, 1024), "pp": (1, 1024), "vpp": (1, 64), "ep": (1, 4096),
    "etp": (1, 1024), "cp": (1, 1024), "dp": (1, 262_144), "dp_replicate": (1, 262_144),
    "zero": (0, 3), "mb": (1, 1024), "seq": (1, 4_194_304), "m": (1, 65_536),
    "recompute_every": (0, 1024), "budget": (0, 100),
    "lora_r": (1, 204_800), "lora_alpha": (1, 1_000_000), "lora_dropout": (0, 99),
    "dropout": (0, 99),
}
# none; optimizer = ZeRO-Offload (master + states, the step on the CPU); params = FSDP's CPU
# offload (ZeRO-3: parameter, gradient and optimizer shards; specs.runtime param_offload)
OFFLOADS = ("none", "optimizer", "params")


def offload_flags(offload: str) -> dict[str, bool]:
    """The RuntimeSpec flags an offload setting means."""
    return {"optimizer_offload": offload != "none", "param_offload": offload == "params"}


def offload_setting(flags: Mapping) -> str:
    """The offload setting flags mean (the inverse of offload_flags); parameters without the
    optimizer (DeepSpeed's offload_param alone) have none: "none"."""
    opt, par = bool(flags.get("optimizer_offload")), bool(flags.get("param_offload"))
    return "params" if opt and par else "optimizer" if opt and not par else "none"


CHOICES: dict[str, tuple[str, ...]] = {
    "gpu": tuple(GPUS), "schedule": tuple(SCHEDULES), "precision": tuple(RECIPES),
    "optimizer": tuple(OPTIMIZERS), "profile": tuple(PROFILES), "attention": tuple(ATTENTION_IMPLS),
    "recompute": tuple(RECOMPUTE), "loop": LOOP_CHOICES, "reshard": RESHARD_AFTER_FORWARD,
    "ft": MODES, "lora_dtype": LORA_DTYPES, "base": ("auto",) + BASE_WEIGHTS,
    "offload": OFFLOADS, "graphs": CUDA_GRAPHS,
}
NAME_KEYS = {"lora_targets": tuple(MODULES) + tuple(TARGET_SETS),
             "freeze": tuple(MODULES) + tuple(TARGET_SETS) + FREEZE_ONLY + ("layers:A-B",)}
BOOL_KEYS = ("sp", "compile", "loss_parallel", "inbwd")
BOOL_WORDS = {"1": True, "true": True, "on": True, "yes": True,
              "0": False, "false": False, "off": False, "no": False}
LAYOUT_WORDS = ("balanced", "even")


@dataclass(frozen=True)
class ParamIssue:
    """A bad URL value: which parameter, what it said, why, and what is used instead."""

    key: str
    value: str
    message: str
    fallback: str

    def __str__(self) -> str:
        shown = self.value if len(self.value) <= 40 else self.value[:37] + "..."
        return f"`{self.key}={shown}`: {self.message}. Using {self.key}={self.fallback}."


class BadValue(ValueError):
    pass


# -- single values ---------------------------------------------------------------------------
def parse_int(key: str, raw: str) -> int:
    lo, hi = INT_LIMITS[key]
    text = raw.strip()
    if not text.lstrip("-").isdigit() or len(text) > 12:
        raise BadValue(f"expected an integer {lo}..{hi}")
    v = int(text)
    if not lo <= v <= hi:
        raise BadValue(f"must be in {lo}..{hi}")
    return v


def parse_bool(raw: str) -> bool:
    try:
        return BOOL_WORDS[raw.strip().lower()]
    except KeyError:
        raise BadValue("expected 1/0, true/false or on/off") from None


def parse_choice(key: str, raw: str) -> str:
    if raw not in CHOICES[key]:
        raise BadValue(f"unknown value; valid: {', '.join(CHOICES[key])}")
    return raw


def parse_layout(raw: str) -> str:
    if raw in LAYOUT_WORDS:
        return raw
    parts = raw.split(",")
    if len(parts) > 1024 or not all(p.strip().isdigit() and len(p.strip()) <= 5 for p in parts):
        raise BadValue("expected 'balanced', 'even' or layers per stage such as 4,8,8,4")
    return ",".join(str(int(p)) for p in parts)


def parse_model(raw: str) -> str:
    if raw in MODELS:
        return raw
    if raw.startswith(SPEC_PREFIX):
        try:
            decode_model(raw)
        except SpecError as e:
            raise BadValue(str(e)) from None
        return raw
    raise BadValue(f"unknown preset; valid: {', '.join(MODELS)} or an imported config")


def parse_gpu(raw: str) -> str:
    """A preset, or a custom GPU (memledger.presets.gpus.custom_gpu) in its one spelling."""
    if raw.startswith(CUSTOM_GPU):
        try:
            return canonical_custom(raw)
        except SpecError as e:
            raise BadValue(e.message) from None
    return parse_choice("gpu", raw)


def parse_names(key: str, raw: str) -> str:
    """A comma-separated list of module names (or, for freeze, layer ranges)."""
    names = [x.strip() for x in raw.split(",") if x.strip()]
    if len(names) > 64:
        raise BadValue(f"{len(names)} names; at most 64")
    for n in names:
        if n not in NAME_KEYS[key] and not (key == "freeze" and parse_range(n)):
            raise BadValue(f"unknown module {n[:40]!r}; valid: {', '.join(NAME_KEYS[key])}")
    if key == "lora_targets" and not names:
        raise BadValue("needs at least one target")
    return ",".join(names)


def parse_value(key: str, raw: str):
    if len(raw) > MAX_VALUE_CHARS:
        raise BadValue(f"value is {len(raw)} characters long (at most {MAX_VALUE_CHARS})")
    if key == "gpu":
        return parse_gpu(raw)
    if key in INT_LIMITS:
        return parse_int(key, raw)
    if key in CHOICES:
        return parse_choice(key, raw)
    if key in BOOL_KEYS:
        return parse_bool(raw)
    if key == "layout":
        return parse_layout(raw)
    if key in NAME_KEYS:
        return parse_names(key, raw)
    if key == "model":
        return parse_model(raw)
    raise BadValue("not a dashboard parameter")


def format_value(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def last_value(raw) -> str:
    """st.query_params gives a string; a repeated key gives a list: the last one wins."""
    if isinstance(raw, (list, tuple)):
        return str(raw[-1]) if raw else ""
    return str(raw)


# -- whole configurations --------------------------------------------------------------------
def parse_params(params: Mapping[str, object]) -> tuple[Config, list[ParamIssue]]:
    """The configuration a URL asks for, and one issue per value that could not be used."""
    values, issues = {}, []
    for key in KEYS:
        if key not in params:
            continue
        raw = last_value(params[key])
        try:
            values[key] = parse_value(key, raw)
        except BadValue as e:
            fallback = getattr(DEFAULT, key) if key != "dp" else "world/(tp·pp·cp)"
            issues.append(ParamIssue(key, raw, str(e), format_value(fallback)))
    dp = values.pop("dp", None)
    cfg = replace(DEFAULT, **values)
    if dp is not None:
        cfg, issue = _apply_dp(cfg, dp, "world" in values)
        issues += [issue] if issue else []
    return cfg, issues


def _apply_dp(cfg: Config, dp: int, world_given: bool) -> tuple[Config, ParamIssue | None]:
    """dp is derived from world; a link may carry dp instead of (or as well as) world."""
    per_replica = cfg.tp * cfg.pp * cfg.cp
    if not world_given:
        world = dp * per_replica
        lo, hi = INT_LIMITS["world"]
        if world > hi:
            return cfg, ParamIssue("dp", str(dp), f"gives world = dp·tp·pp·cp = {world} > {hi}",
                                   f"world/(tp·pp·cp) with world={cfg.world}")
        return replace(cfg, world=world), None
    if dp * per_replica != cfg.world:
        why = (f"disagrees with world={cfg.world}: dp·tp·pp·cp = "
               f"{dp}·{cfg.tp}·{cfg.pp}·{cfg.cp} = {dp * per_replica}")
        return cfg, ParamIssue("dp", str(dp), why, "world/(tp·pp·cp)")
    return cfg, None


def to_params(cfg: Config) -> dict[str, str]:
    """The query parameters of a configuration, defaults left out, in `KEYS` order."""
    return {k: format_value(getattr(cfg, k)) for k in CONFIG_KEYS
            if getattr(cfg, k) != getattr(DEFAULT, k)}


# -- specs -----------------------------------------------------------------------------------
def load_model(name: str) -> ModelSpec:
    """A preset by name or an imported model carried in the URL; raises SpecError('model')."""
    if name.startswith(SPEC_PREFIX):
        return decode_model(name)
    return model(name)


def hardware(cfg: Config) -> Hardware:
    return gpu(cfg.gpu)


def runtime(cfg: Config, **kw) -> RuntimeSpec:
    """The runtime spec a configuration implies: its training loop and FSDP2 / compile / loss
    knobs (the rest at defaults)."""
    from memledger.specs.loop_implied import implied
    rules = implied(cfg.loop, dp=cfg.dp, cp=cfg.cp, tp=cfg.tp, pp=cfg.pp,
                    dp_replicate=cfg.dp_replicate)
    tp_engine = rules.get("tp_engine", ("megatron",))[0]
    return RuntimeSpec(loop=cfg.loop, fsdp_reshard_after_forward=cfg.reshard,
                       torch_compile=cfg.compile, loss_parallel=cfg.loss_parallel,
                       optimizer_in_backward=cfg.inbwd, cuda_graphs=cfg.graphs,
                       **offload_flags(cfg.offload),
                       **{"tp_engine": tp_engine, **kw})


def _layout(cfg: Config, m: ModelSpec, probe: ParallelSpec) -> tuple[int, ...] | None:
    if cfg.layout == "even":
        return None
    if cfg.layout == "balanced":
        if probe.n_stages > m.n_layers:
            raise SpecError("pp", f"{probe.n_stages} pipeline stages (pp={cfg.pp}, "
                                  f"{probe.chunks} chunk(s) per rank) exceed the model's "
                                  f"{m.n_layers} layers")
        return balanced_layout(m.n_layers, probe.n_stages)
    return tuple(int(x) for x in cfg.layout.split(","))


def to_specs(cfg: Config, m: ModelSpec) -> tuple[ParallelSpec, TrainSpec]:
    """The core's specs for a configuration; raises SpecError exactly as the core does."""
    kw = dict(tp=cfg.tp, pp=cfg.pp, vpp=cfg.vpp, ep=cfg.ep, etp=cfg.etp, cp=cfg.cp, sp=cfg.sp,
              dp_replicate=cfg.dp_replicate, zero=cfg.zero, schedule=cfg.schedule)
    probe = ParallelSpec.from_world(cfg.world, **kw)
    layout = _layout(cfg, m, probe)
    par = replace(probe, layout=layout) if layout is not None else probe
    train = TrainSpec(micro_batch=cfg.mb, seq=cfg.seq, micro_batches=cfg.m,
                      precision=cfg.precision, optimizer=cfg.optimizer, profile=cfg.profile,
                      attention=cfg.attention, recompute=cfg.recompute,
                      recompute_every=cfg.recompute_every, recompute_budget_pct=cfg.budget,
                      hidden_dropout_pct=cfg.dropout, finetune=finetune_spec(cfg))
    return par, train


def finetune_spec(cfg: Config) -> FinetuneSpec:
    """The fine-tuning spec of a configuration; raises SpecError as the core does."""
    if cfg.ft == "full":
        return FinetuneSpec()
    names = lambda text: tuple(x for x in text.split(",") if x)  # noqa: E731
    base = cfg.base if cfg.base != "auto" else ("nf4" if cfg.ft == "qlora" else "bf16")
    return FinetuneSpec(mode=cfg.ft, lora_rank=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                        lora_targets=names(cfg.lora_targets), lora_dropout_pct=cfg.lora_dropout,
                        lora_dtype=cfg.lora_dtype, base_weights=base, freeze=names(cfg.freeze))


# -- page-specific parameters ----------------------------------------------------------------
@dataclass(frozen=True)
class PageParam:
    """A setting only one page has (e.g. the staircase's schedules to compare)."""

    key: str
    default: object
    choices: tuple = ()  # allowed values (each item of a list when multi)
    multi: bool = False  # a comma-separated list of choices
    max_items: int = 0  # for multi: at most this many (0 = no limit)
    limits: tuple[int, int] | None = None  # an integer in this range
    # A value of its own kind (a policy, a list of world sizes): text -> value; raises
    # BadValue or SpecError with a message naming the valid range. The value is written back
    # with str(), so it returns a canonical string.
    parse: Callable[[str], str] | None = None


def _parse_page_value(spec: PageParam, raw: str):
    if len(raw) > MAX_VALUE_CHARS:
        raise BadValue(f"value is {len(raw)} characters long")
    if spec.parse is not None:
        try:
            return spec.parse(raw)
        except SpecError as e:
            raise BadValue(e.message) from None
    if isinstance(spec.default, bool):
        return parse_bool(raw)
    if spec.limits:
        lo, hi = spec.limits
        text = raw.strip()
        if not text.lstrip("-").isdigit() or len(text) > 12 or not lo <= int(text) <= hi:
            raise BadValue(f"expected an integer {lo}..{hi}")
        return int(text)
    if spec.multi:
        items = tuple(x for x in raw.split(",") if x)
        bad = [x for x in items if x not in spec.choices]
        if bad or not items or len(set(items)) != len(items):
            raise BadValue(f"expected distinct values from {', '.join(spec.choices)}")
        if spec.max_items and len(items) > spec.max_items:
            raise BadValue(f"at most {spec.max_items} values")
        return items
    if raw not in spec.choices:
        raise BadValue(f"unknown value; valid: {', '.join(map(str, spec.choices))}")
    return raw


def _format_page_value(value) -> str:
    return ",".join(value) if isinstance(value, tuple) else format_value(value)


def parse_page_params(params: Mapping[str, object], specs: tuple[PageParam, ...]):
    """The page's own settings from a URL, with one issue per unusable value."""
    values, issues = {s.key: s.default for s in specs}, []
    for s in specs:
        if s.key in params:
            raw = last_value(params[s.key])
            try:
                values[s.key] = _parse_page_value(s, raw)
            except BadValue as e:
                issues.append(ParamIssue(s.key, raw, str(e), _format_page_value(s.default)))
    return values, issues


def page_to_params(values: Mapping[str, object], specs: tuple[PageParam, ...]) -> dict[str, str]:
    return {s.key: _format_page_value(values[s.key]) for s in specs if values[s.key] != s.default}


def start_of(model: str, cfg: Config) -> tuple[Config, str]:
    """`cfg` with `model` chosen and its start layout (memledger.presets.layouts) in place of
    the layout settings, and a sentence saying where that layout comes from ("" for a model
    without one, e.g. an imported config: its settings stay)."""
    start = start_layout(model)
    if start is None:
        return replace(cfg, model=model), ""
    base = {k: getattr(DEFAULT, k) for k in LAYOUT_KEYS}
    new = replace(cfg, model=model, **(base | start.settings))
    kind = "the layout its authors published" if start.published else "a layout that fits"
    said = f"{MODELS[model].name} starts from {kind} ({start.source})"
    if start.gpu and start.gpu != new.gpu:  # the banner never names one GPU, the page another
        said += (f". They trained on {GPUS[start.gpu].name}; this page prices the sidebar's "
                 f"{gpu(new.gpu).name}: choose {GPUS[start.gpu].name} there to match")
    return new, said
