"""Which values each dashboard setting may take, and the repair of an invalid configuration.

Validity is the core's call only: a configuration is valid when its specs construct, the
cross-spec checks `memledger.ledger.checks.check_all` pass and the activation profile is registered.
This module proposes candidates (divisors of the world size for parallel degrees, the tables for
choices), keeps those the core accepts with every other setting held fixed, and, when a setting
must change (a stale link, a new model), moves it to the nearest valid value. Results are cached:
a configuration and its model are frozen, hashable values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from memledger.errors import SpecError
from memledger.ledger.activations import get_profile
from memledger.ledger.checks import check_all, check_offload
from memledger.ledger.step_in_backward import check as check_step_in_backward
from memledger.ledger.titan_graphs import check as check_cuda_graphs
from memledger.presets import GPUS
from memledger.specs import OPTIMIZERS, RECIPES, SCHEDULES, ModelSpec
from memledger.specs.finetune import BASE_WEIGHTS, LORA_DTYPES, MODES
from memledger.specs.loop import resolve_loop
from memledger.specs.runtime import CUDA_GRAPHS, LOOP_CHOICES, RESHARD_AFTER_FORWARD
from memledger.specs.train import ATTENTION_IMPLS, PROFILES, RECOMPUTE
from memledger.views.state import LAYOUT_WORDS, OFFLOADS, Config, runtime, to_specs

# Which setting to move when the core names a field (None: move something else).
FIELD_KEY = {"tp": "tp", "pp": "pp", "vpp": "vpp", "ep": "ep", "etp": "etp", "cp": "cp",
             "sp": "sp", "seq": "seq", "layout": "layout", "schedule": "schedule",
             "attention": "attention", "profile": "profile", "world": None,
             "micro_batches": "m",  # tokens per step over its bound: fewer micro-batches
             "recompute_every": "recompute_every", "recompute_budget_pct": "budget",
             "finetune": "ft", "lora_rank": "lora_r", "lora_targets": "lora_targets",
             "base_weights": "base", "freeze": "freeze", "lora_dropout": "lora_dropout",
             "hidden_dropout_pct": "dropout", "dp_replicate": "dp_replicate",
             "param_offload": "offload",
             # the optimizer in backward's refusals (ledger.step_in_backward.RULES)
             "grad_lifetime": "loop", "zero": "zero", "optimizer": "optimizer",
             "optimizer_offload": "offload", "optimizer_in_backward": "inbwd",
             "cuda_graphs": "graphs"}
# Settings a repair may move, most expendable first (after the one the error names). HSDP's
# replica count is last: unless the core names it, the other settings are tried first.
REPAIR_ORDER = ("pp", "vpp", "cp", "tp", "etp", "ep", "sp", "layout", "schedule", "attention",
                "profile", "seq", "lora_targets", "lora_r", "freeze", "base", "ft",
                "dp_replicate")
# Values that make any model valid on any world size (the last resort of a repair).
SIMPLEST = dict(tp=1, pp=1, vpp=1, ep=1, etp=1, cp=1, sp=False, schedule="1f1b",
                layout="balanced", attention="flash", profile="megatron")
DEGREE_KEYS = ("tp", "pp", "vpp", "ep", "etp", "cp")
NUMERIC = frozenset(DEGREE_KEYS) | {"seq", "world", "mb", "m", "zero", "recompute_every",
                                    "budget", "dropout"}


def divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def _seq_candidates(m: ModelSpec, cfg: Config) -> tuple[int, ...]:
    """The current length rounded to multiples of powers of two (what cp/sp splits need)."""
    out = {cfg.seq}
    for k in range(13):
        q = 2**k
        out |= {max(q, cfg.seq // q * q), -(-cfg.seq // q) * q}
    return tuple(sorted(v for v in out if v <= 4_194_304))


CANDIDATES = {
    "tp": lambda m, c: divisors(c.world),
    "pp": lambda m, c: tuple(d for d in divisors(c.world) if d <= m.n_layers),
    "vpp": lambda m, c: tuple(range(1, min(16, m.n_layers) + 1)),
    "ep": lambda m, c: divisors(c.world),
    "etp": lambda m, c: divisors(c.world),
    "cp": lambda m, c: divisors(c.world),
    # HSDP replicas divide dp; not NUMERIC, so a count that no longer divides falls back to the
    # first candidate, 1 (HSDP off), rather than to another replica count
    "dp_replicate": lambda m, c: divisors(max(c.dp, 1)),
    "zero": lambda m, c: (0, 1, 2, 3),
    "sp": lambda m, c: (True, False),
    "schedule": lambda m, c: tuple(SCHEDULES),
    "layout": lambda m, c: LAYOUT_WORDS + (() if c.layout in LAYOUT_WORDS else (c.layout,)),
    "precision": lambda m, c: tuple(RECIPES),
    "optimizer": lambda m, c: tuple(OPTIMIZERS),
    "profile": lambda m, c: tuple(PROFILES),
    "attention": lambda m, c: tuple(ATTENTION_IMPLS),
    "recompute": lambda m, c: tuple(RECOMPUTE),
    "loop": lambda m, c: LOOP_CHOICES,
    "recompute_every": lambda m, c: tuple(sorted({c.recompute_every, *range(9)})),
    "budget": lambda m, c: tuple(sorted({c.budget, *range(0, 101, 10)})),
    "dropout": lambda m, c: tuple(sorted({c.dropout, 0, 5, 10, 20})),
    "reshard": lambda m, c: RESHARD_AFTER_FORWARD,
    "compile": lambda m, c: (False, True),
    "inbwd": lambda m, c: (False, True),
    "graphs": lambda m, c: CUDA_GRAPHS,
    "loss_parallel": lambda m, c: (True, False),
    "offload": lambda m, c: OFFLOADS,  # params below ZeRO-3: the core's check_offload refuses
    "gpu": lambda m, c: tuple(GPUS) + (() if c.gpu in GPUS else (c.gpu,)),  # or a custom GPU
    "seq": _seq_candidates,
    # micro-batches: powers of two and multiples of pp (what pipeline engines ask for)
    "m": lambda m, c: tuple(sorted({c.m} | {2**k for k in range(17)}
                                   | {k * c.pp for k in range(1, 9)})),
    # fine-tuning: the current value first, then the common ones (peft / LLaMA-Factory)
    "ft": lambda m, c: MODES,
    "lora_r": lambda m, c: tuple(dict.fromkeys((c.lora_r, 8, 4, 2, 1, 16, 32, 64, 128, 256))),
    "lora_alpha": lambda m, c: tuple(dict.fromkeys((c.lora_alpha, 8, 16, 32, 64))),
    "lora_targets": lambda m, c: tuple(dict.fromkeys((c.lora_targets, "q_proj,v_proj",
                                                      "attention", "all-linear", "mlp"))),
    "lora_dropout": lambda m, c: tuple(dict.fromkeys((c.lora_dropout, 0, 5, 10))),
    "lora_dtype": lambda m, c: LORA_DTYPES,
    "base": lambda m, c: ("auto",) + BASE_WEIGHTS,
    "freeze": lambda m, c: tuple(dict.fromkeys((c.freeze, "", "embeddings", "embeddings,head"))),
}


def with_value(cfg: Config, key: str, value) -> Config:
    """Set one setting, carrying along what it drags with it: only the interleaved schedule
    has virtual stages, so choosing a schedule resets vpp to 1 or lifts it to 2."""
    new = replace(cfg, **{key: value})
    if key == "schedule":
        vpp = max(cfg.vpp, 2) if value == "interleaved" else 1
        new = replace(new, vpp=vpp)
    return new


def problem(m: ModelSpec, cfg: Config) -> SpecError | None:
    """The core's objection to a configuration, or None when it is valid."""
    found = _problem(m, cfg)
    return None if found is None else SpecError(*found)


@lru_cache(maxsize=65_536)
def _problem(m: ModelSpec, cfg: Config) -> tuple[str, str] | None:
    """(field, message): the cache keeps text, not the exception and its traceback's frames."""
    try:
        par, train = to_specs(cfg, m)
        check_all(m, par, train)
        if cfg.offload == "params":
            check_offload(par, runtime(cfg))
        if cfg.inbwd:
            rt = runtime(cfg)
            check_step_in_backward(par, train, rt, resolve_loop(rt, train.profile))
        if cfg.graphs == "on":  # where torchtitan refuses its CUDA-graph step
            rt = runtime(cfg)
            check_cuda_graphs(par, train, rt, resolve_loop(rt, train.profile))
        get_profile(train.profile)
    except SpecError as e:
        return e.field, e.message
    return None


@lru_cache(maxsize=16_384)
def valid_values(m: ModelSpec, cfg: Config, key: str) -> tuple:
    """Values of `key` the core accepts with every other setting as in `cfg`."""
    return tuple(v for v in CANDIDATES[key](m, cfg) if problem(m, with_value(cfg, key, v)) is None)


def nearest(options, current, key: str):
    if current in options:
        return current
    if key in NUMERIC:  # by ratio: from tp=8, 4 and 16 are equally near; prefer the smaller
        return min(options, key=lambda v: (abs(math.log(v / current)) if current > 0 else v, v))
    return options[0]  # candidates are listed in order of preference


@dataclass(frozen=True)
class Adjustment:
    """A setting the repair moved, and the core's reason."""

    key: str
    old: object
    new: object
    reason: str

    def __str__(self) -> str:
        return f"{self.key} {_fmt(self.old)} → {_fmt(self.new)}: {self.reason}"


def _fmt(v) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


def repair(m: ModelSpec, cfg: Config,
           pinned: frozenset[str] = frozenset()) -> tuple[Config, list[Adjustment]]:
    """A valid configuration as close to `cfg` as one-setting moves get, never moving a pinned
    setting (the one the user just changed) unless nothing else works."""
    notes: list[Adjustment] = []
    for _ in range(12):
        err = problem(m, cfg)
        if err is None:
            return cfg, notes
        named = FIELD_KEY.get(err.field)
        keys = [k for k in dict.fromkeys(([named] if named else []) + list(REPAIR_ORDER))
                if k not in pinned]
        step = _single_move(m, cfg, keys) or _partial_move(m, cfg, err, keys)
        if step is None:
            break
        key, value = step
        notes.append(Adjustment(key, getattr(cfg, key), value, err.message))
        cfg = with_value(cfg, key, value)
    return _last_resort(m, cfg, notes)


def _single_move(m, cfg, keys):
    """The first setting whose nearest valid value makes the whole configuration valid."""
    for k in keys:
        opts = valid_values(m, cfg, k)
        if opts:
            return k, nearest(opts, getattr(cfg, k), k)
    return None


def _partial_move(m, cfg, err, keys):
    """No single move fixes it: move the first setting to its nearest value that at least
    clears the present objection (the next loop takes the next one)."""
    for k in keys:
        cands = [v for v in CANDIDATES[k](m, cfg) if v != getattr(cfg, k)]
        clears = [v for v in cands
                  if (e := problem(m, with_value(cfg, k, v))) is None or e.field != err.field]
        if clears:
            return k, nearest(clears, getattr(cfg, k), k)
    return None


def _last_resort(m, cfg, notes):
    simple = replace(cfg, **SIMPLEST)
    if problem(m, simple) is not None:  # e.g. a sequence length cp/sp cannot split
        simple = replace(Config(), model=cfg.model, gpu=cfg.gpu, world=cfg.world, **SIMPLEST)
    changed = [k for k in SIMPLEST if getattr(cfg, k) != getattr(simple, k)]
    reason = "no nearby valid setting; reset the parallel layout"
    notes += [Adjustment(k, getattr(cfg, k), getattr(simple, k), reason) for k in changed]
    return simple, notes
