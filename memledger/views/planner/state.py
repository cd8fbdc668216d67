"""The Planner page's own settings, as page parameters next to the shared configuration, and
the PlanSpec they make with it. Pure: no Streamlit.

From the shared configuration (`state.Config`): model, GPU, the world size searched when no list
is given, sequence length, precision, optimizer, activation profile, attention kernel. The
planner's own keys carry a `fix_` / `max_` prefix where the shared link already has the name
(`tp=8` is the sidebar's layout; `fix_tp=8` restricts the search to it). 0 means "search this
axis" for `fix_*` numbers and "no bound" for `max_*`.
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping

from memledger.costs.overlap import FRAMEWORKS
from memledger.errors import SpecError
from memledger.planner import Constraints, Plan, PlanSpec, plan
from memledger.planner.question.spec import PLAN_RECOMPUTE, PLAN_SCHEDULES
from memledger.presets import gpu
from memledger.specs import ModelSpec
from memledger.specs.runtime import RuntimeSpec
from memledger.views.budget import PLANNER_CACHE_BYTES, PLANNER_MAX_WORLDS, ByteLRU, admit_plan
from memledger.views.state import INT_LIMITS, BadValue, Config, PageParam, finetune_spec

MAX_WORLDS = PLANNER_MAX_WORLDS  # a link is input from anyone: each world size is a full search
ANY = "any"
# page key -> Constraints field
FIXED = {"fix_tp": "tp", "fix_pp": "pp", "fix_vpp": "vpp", "fix_ep": "ep", "fix_etp": "etp",
         "fix_cp": "cp", "fix_mb": "micro_batch", "max_vpp": "max_vpp", "max_cp": "max_cp",
         "max_mb": "max_micro_batch"}
NUMBER_CONSTRAINTS = tuple(FIXED)
CHOSEN = {"fix_zero": "zero", "fix_recompute": "recompute", "fix_schedule": "schedule"}


def parse_worlds(raw: str) -> str:
    """World sizes, comma separated ("" = the sidebar's): canonical "8,16", duplicates kept out."""
    lo, hi = INT_LIMITS["world"]
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if len(parts) > MAX_WORLDS or not all(p.isdigit() and lo <= int(p) <= hi for p in parts):
        raise BadValue(f"expected at most {MAX_WORLDS} integers {lo}..{hi}, comma separated")
    return ",".join(str(w) for w in dict.fromkeys(int(p) for p in parts))


SPECS = (
    PageParam("worlds", "", parse=parse_worlds),
    PageParam("gb", 0, limits=(0, 1 << 24)),  # 0: the sidebar's dp × micro-batches × mb
    PageParam("gpn", 8, limits=(1, 64)),
    PageParam("headroom", 0, limits=(0, 90)),
    PageParam("top", 20, limits=(1, 500)),
    PageParam("row", 1, limits=(1, 500)),
    PageParam("fix_zero", ANY, choices=(ANY, "0", "1", "2", "3")),
    PageParam("fix_recompute", ANY, choices=(ANY,) + PLAN_RECOMPUTE),
    PageParam("fix_schedule", ANY, choices=(ANY,) + PLAN_SCHEDULES),
    PageParam("framework", "megatron-core", choices=tuple(FRAMEWORKS)),
    *(PageParam(k, 0, limits=(0, 4096 if k.endswith("mb") else 1024)) for k in FIXED),
)
LABEL = {"worlds": "World sizes", "gb": "Global batch (0 = sidebar's)", "gpn": "GPUs per node",
         "headroom": "Headroom (% HBM)", "top": "Top K",
         "row": "Configuration #", "fix_zero": "ZeRO stage",
         "fix_recompute": "Recompute", "fix_schedule": "Schedule", "framework": "Framework",
         "fix_tp": "tp (0 = search)",
         "fix_pp": "pp (0 = search)", "fix_vpp": "vpp (0 = search)", "fix_ep": "ep (0 = search)",
         "fix_etp": "etp (0 = search)", "fix_cp": "cp (0 = search)",
         "fix_mb": "micro-batch (0 = search)", "max_vpp": "max vpp (0 = none)",
         "max_cp": "max cp (0 = none)", "max_mb": "max micro-batch (0 = none)"}
HELP = {"worlds": "Comma separated, e.g. 64,128,256. Empty: the sidebar's world size.",
        "gb": "Sequences per optimizer step over all data-parallel replicas: fixes "
              "micro-batch × micro-batches × dp. 0: the sidebar's layout's, dp × micro-batches "
              "× micro-batch size.",
        "gpn": "GPUs per node: which groups cross the slower inter-node network.",
        "headroom": "Keep this share of each GPU's memory free (fragmentation, spikes).",
        "row": "Marked with a star in the chart; the link opens it on the Ledger page.",
        "framework": "What the step-time model overlaps, and whether layouts with tp > 1 run "
                     "sequence parallelism: megatron-core (SP, flash attention, DP and CP "
                     "communication overlapped), megatron-2021 (Narayanan et al. 2021: no SP, "
                     "no flash, DP reduce overlapped only without pipelining) or megatron-2022 "
                     "(Korthikanti et al. 2022: megatron-2021 with SP and selective "
                     "recompute). It also bounds the search to what the framework runs: the "
                     "2021 and 2022 ones have 1F1B and interleaved pipelines only (interleaving "
                     "at pp > 2 with a micro-batch count pp divides), equal stages, no CP, "
                     "ZeRO-0; full or no recompute (2021), or selective too (2022)."}


def worlds(page: Mapping, cfg: Config) -> tuple[int, ...]:
    """The world sizes to search; raises SpecError('worlds') for text that is not a list."""
    try:
        text = parse_worlds(page["worlds"])
    except BadValue as e:
        raise SpecError("worlds", f"{page['worlds']!r}: {e}") from None
    return tuple(int(w) for w in text.split(",")) if text else (cfg.world,)


def clean(page: Mapping) -> dict:
    """The page's values for the link: a world list in canonical spelling when it parses."""
    try:
        return {**page, "worlds": parse_worlds(page["worlds"])}
    except BadValue:
        return dict(page)


def worlds_text(text: str, default: int) -> str:
    return (text.replace(",", ", ") if text else f"{default:,}") + " GPUs"


def sidebar_batch(cfg: Config) -> int:
    """The global batch the sidebar's layout runs: dp × micro-batches × micro-batch size."""
    return cfg.dp * cfg.m * cfg.mb


def global_batch(cfg: Config, page: Mapping) -> int:
    return page["gb"] or sidebar_batch(cfg)


def batch_warning(cfg: Config, page: Mapping) -> str | None:
    """A word when the global batch is too small for a world searched: with fewer sequences
    than the sidebar layout's data-parallel replicas, every layout must spend GPUs on model
    parallelism (tp·pp·cp) instead, and the ranking says nothing about why."""
    gb, per_replica = global_batch(cfg, page), cfg.tp * cfg.pp * cfg.cp
    short = [w for w in worlds(page, cfg) if gb * per_replica < w]
    if not short:
        return None
    w = max(short)
    return (f"Global batch {gb:,} is smaller than {w:,} GPUs can use: at most {gb:,} "
            f"data-parallel replicas, so every layout needs tp·pp·cp ≥ {-(-w // gb):,} "
            f"(the sidebar's layout has {per_replica:,} per replica and would run "
            f"dp = {w // per_replica:,}). The sidebar's layout implies "
            f"{sidebar_batch(cfg):,} sequences (dp × micro-batches × micro-batch size).")


def plan_settings(cfg: Config, page: Mapping) -> dict:
    """Everything the search depends on besides model and GPU, as plain hashable values."""
    return {"worlds": ",".join(map(str, worlds(page, cfg))), "seq": cfg.seq,
            "gb": global_batch(cfg, page),
            "gpn": page["gpn"], "precision": cfg.precision, "optimizer": cfg.optimizer,
            "profile": cfg.profile, "attention": cfg.attention, "headroom": page["headroom"],
            "loop": cfg.loop, "framework": page["framework"], "finetune": finetune_spec(cfg),
            **{k: page[k] for k in FIXED}, **{k: page[k] for k in CHOSEN}}


def plan_spec(m: ModelSpec, gpu_key: str, v: Mapping) -> PlanSpec:
    """The PlanSpec of `plan_settings`; raises SpecError as the planner does."""
    fixed = {field: (v[k] or None) for k, field in FIXED.items()}
    chosen = {field: None if v[k] == ANY else (int(v[k]) if field == "zero" else v[k])
              for k, field in CHOSEN.items()}
    return PlanSpec(model=m, hardware=gpu(gpu_key), worlds=tuple(map(int, v["worlds"].split(","))),
                    seq=v["seq"], global_batch=v["gb"], gpus_per_node=v["gpn"],
                    precision=v["precision"], optimizer=v["optimizer"], profile=v["profile"],
                    attention=v["attention"], headroom=v["headroom"] / 100,
                    framework=v.get("framework", "megatron-core"),
                    runtime=RuntimeSpec(loop=v.get("loop", "auto")),
                    constraints=Constraints(**fixed, **chosen),
                    **({"finetune": v["finetune"]} if "finetune" in v else {}))


def run_plan(m: ModelSpec, gpu_key: str, v: Mapping, progress=None) -> Plan:
    """The plan, refused before evaluating when over the server's budget (OverBudget);
    `progress(stage, done, total)` as `memledger.planner.plan` calls it."""
    spec = plan_spec(m, gpu_key, v)
    return plan(spec, admit=lambda n: admit_plan(len(spec.worlds), n), progress=progress)


# One-click narrowings offered when a search is over budget, in the order offered: fix an
# axis to the sidebar's value, or bound one. Each is counted (space + size: ~20 ms for
# DeepSeek-V3 on 2,048 GPUs) before it is offered, so a button never leads to another refusal.
NARROW_TO_SIDEBAR = {"fix_tp": "tp", "fix_pp": "pp", "fix_ep": "ep"}
NARROW_BOUNDS = {"max_vpp": 2, "max_cp": 2, "max_mb": 2}


def narrowings(m: ModelSpec, gpu_key: str, v: Mapping, cfg: Config) -> list[tuple[str, int, int]]:
    """(page key, value, configurations) for each single change of an open axis that brings an
    over-budget search within the budget; `v` as `plan_settings` gives it."""
    from memledger.planner.sweep.size import n_configurations
    from memledger.planner.question.space import enumerate_space
    from memledger.views.budget import PLANNER_MAX_CONFIGURATIONS
    options = [(k, getattr(cfg, a)) for k, a in NARROW_TO_SIDEBAR.items()]
    options += list(NARROW_BOUNDS.items())
    out = []
    for key, value in options:
        if v[key]:
            continue
        try:
            spec = plan_spec(m, gpu_key, {**v, key: value})
            n = n_configurations(spec, enumerate_space(spec))
        except SpecError:
            continue
        if n <= PLANNER_MAX_CONFIGURATIONS:
            out.append((key, value, n))
    return out


def _plan_bytes(p: Plan) -> int:
    return 1 << 20 if p is None else (1 << 20) + 28 * len(p.evaluated.seconds)


# Process-wide, like the st.cache_resource(max_entries=1) it replaces (whose spinner could not
# show progress): the last plans, up to the bytes of the largest one the budget admits.
PLANS = ByteLRU(PLANNER_CACHE_BYTES, _plan_bytes)


def cached_plan(model_key: str, gpu_key: str, items: tuple, load, progress=None) -> Plan:
    """The plan of `plan_settings` items (sorted), cached by model key, GPU and items;
    `load(model_key)` gives the ModelSpec. `progress` is called only when it is computed."""
    key = (model_key, gpu_key, items)
    result = PLANS.get(key)
    if result is None:
        result = run_plan(load(model_key), gpu_key, dict(items), progress)
        PLANS.put(key, result)
    return result


STAGES = {"layouts": ("Listing the parallel layouts", 0.0, 0.05),
          "configurations": ("Evaluating configurations", 0.05, 0.95),
          "ranking": ("Ranking the fitting configurations and drawing the chart", 0.95, 1.0)}


ETA_AFTER = 0.1  # share of the configurations done before an ETA is shown


def progress_state(stage: str, done: int, total: int, elapsed_s: float) -> tuple[float, str]:
    """(fraction of the whole request, text) for a progress bar: the stage, the count and,
    once ETA_AFTER of it is done, an ETA from the stage's rate so far (`elapsed_s` since the
    stage began)."""
    text, lo, hi = STAGES[stage]
    share = done / total if total else 1.0
    if stage != "configurations":
        return lo + (hi - lo) * share, f"{text}…"
    text = f"{text}: {done:,} of {total:,}"
    # the first blocks also build each layout's tables: a rate from them overestimates
    if ETA_AFTER * total <= done < total and elapsed_s > 0:
        text += f" · about {format_eta(elapsed_s * (total - done) / done)} left"
    return lo + (hi - lo) * share, text


class Progress:
    """A `plan(progress=...)` callback that calls show(fraction, text) (`progress_state`) at
    most every `every_s` seconds, and always at a stage's first and last count."""

    def __init__(self, show, every_s: float = 0.15, clock=time.perf_counter):
        self.show, self.every_s, self.clock = show, every_s, clock
        self.stage, self.t0, self.shown = None, 0.0, -math.inf

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = self.clock()
        if stage != self.stage:
            self.stage, self.t0, self.shown = stage, now, -math.inf
        if now - self.shown >= self.every_s or done in (0, total):
            self.shown = now
            self.show(*progress_state(stage, done, total, now - self.t0))


def format_eta(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s" if seconds < 120 \
        else f"{seconds / 60:.0f} min"

