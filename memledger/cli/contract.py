"""The command line's contract: every flag works or exits 2 with one line naming it and its range.

Checked here, after argparse and before any command runs, so that no flag value reaches a
division, a loop or numpy unchecked: integers against a range (the spec bounds of
`memledger.specs.bounds` where the flag is a spec field), floats finite and in range, paths
non-empty. `flag_of` turns a SpecError's field into the flag a user typed (`micro_batch` ->
`--micro-batch`), so the core's messages name the flag too. Values 0 and "" are never silently
replaced by a default: a flag given as 0 or "" is either meaningful (documented as such in its
help) or an error.
"""
from __future__ import annotations

import argparse
import math

from memledger.errors import SpecError
from memledger.specs.bounds import BOUNDS

_DEGREE = BOUNDS["world"].limit
# flag dest -> (lowest, highest) for integer flags; None as a bound means "no bound on that side".
INT_RANGES: dict[str, tuple[int, int]] = {
    **{k: (1, _DEGREE) for k in ("tp", "pp", "ep", "etp", "cp", "dp")},
    "vpp": (1, BOUNDS["vpp"].limit),
    "world": (1, _DEGREE),
    "micro_batch": (1, BOUNDS["micro_batch"].limit),
    "seq": (1, BOUNDS["seq"].limit),
    "micro_batches": (1, BOUNDS["micro_batches"].limit),
    "recompute_every": (0, BOUNDS["recompute_every"].limit),
    "recompute_budget_pct": (0, 100),
    "allocator_slack_pct": (0, 100),
    "deepep_max_tokens": (0, BOUNDS["tokens_per_step"].limit),
    "zero3_prefetch_layers": (0, BOUNDS["n_layers"].limit),
    "nccl_channels": (0, 1024),  # NCCL_MAX_NCHANNELS is 64 today; 1024 leaves room
    "mfu": (1, 100),
    # plan
    "global_batch": (1, BOUNDS["global_batch"].limit),
    "gpus_per_node": (1, BOUNDS["gpus_per_node"].limit),
    "top": (0, 1_000_000),
    "max_tp": (1, _DEGREE), "max_etp": (1, _DEGREE), "max_cp": (1, _DEGREE),
    "max_vpp": (1, BOUNDS["vpp"].limit), "max_micro_batch": (1, BOUNDS["micro_batch"].limit),
    # trace
    "check_seq": (1, 1 << 20), "batch": (1, 1024), "layers": (2, 4), "scale": (1, 1 << 20),
    "hidden": (1, BOUNDS["hidden"].limit), "seed": (0, 2**32 - 1),
}
# float flags: (lowest, highest, lowest is exclusive)
FLOAT_RANGES: dict[str, tuple[float, float, bool]] = {
    "capacity_factor": (0.0, 64.0, True),
    "cuda_context_gib": (0.0, 64.0, False),
    "reduce_bucket": (0.0, 1e12, False),
    "allgather_bucket": (0.0, 1e12, False),
    "zero3_prefetch_bucket": (0.0, 1e12, False),
    "zero3_max_live": (1.0, 1e13, False),
    "grad_offload_chunk": (0.0, 1e12, False),
    "headroom": (0.0, 0.99, False),
    "hidden_dropout": (0.0, 0.99, False),
    "target_gib": (0.0, 100_000.0, True),
}
PATHS = ("hf_config", "out", "rescore", "cases", "layout", "profile", "module", "policy_preset")


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """dest -> the long option a user types, for one (sub)parser."""
    out = {}
    for a in parser._actions:  # argparse exposes no public list of actions
        longs = [o for o in a.option_strings if o.startswith("--")]
        if longs:
            out.setdefault(a.dest, longs[0])
    return out


ALIASES = {"config": "hf_config", "mfu_pct": "mfu", "capacity_factor_pct": "capacity_factor",
           "worlds": "world"}


def flag_of(field: str, names: dict[str, str], args=None) -> str:
    """The flag for a spec field name; a field read from --hf-config is shown as its key there."""
    key = ALIASES.get(field, field.replace("-", "_"))
    flag = names.get(key) or names.get(key.removesuffix("_bytes"))
    if flag:
        return flag
    if field.startswith("--"):
        return field
    if getattr(args, "hf_config", None):
        return f"--hf-config {field}"
    return field


def _fail(flag: str, message: str) -> None:
    raise SpecError(flag, message)


def check_args(args: argparse.Namespace, names: dict[str, str]) -> None:
    """Raise SpecError('--flag', range) for the first flag outside its range."""
    for dest, (lo, hi) in INT_RANGES.items():
        v = getattr(args, dest, None)
        if dest in names and isinstance(v, int) and not isinstance(v, bool) and not lo <= v <= hi:
            _fail(names[dest], f"must be an integer {lo:,}..{hi:,}, got {v:,}"
                  if abs(v) < 10**30 else f"must be an integer {lo:,}..{hi:,}")
    for dest, (lo, hi, open_lo) in FLOAT_RANGES.items():
        v = getattr(args, dest, None)
        if dest in names and isinstance(v, float):
            ok = math.isfinite(v) and (lo < v if open_lo else lo <= v) and v <= hi
            if not ok:
                side = "(" if open_lo else "["
                _fail(names[dest], f"must be a finite number in {side}{lo:g}, {hi:g}], got {v!r}")
    for dest in PATHS:
        v = getattr(args, dest, None)
        if dest in names and isinstance(v, str) and not v.strip():
            _fail(names[dest], "is empty; give a value or leave the flag out")
    for v in getattr(args, "policy", None) or ():
        if not str(v).strip():
            _fail("--policy", "is empty; give CLASS=POLICY")
