"""`--config FILE` on every configuration sub-command: the files' settings fill every flag the
command line did not give explicitly (explicit flags override the file), then the rules that
need the whole configuration run — micro-batches from a global batch, DeepSpeed's "auto"
buckets — with errors naming the file, line and key."""
from __future__ import annotations

import argparse

from memledger.configs import read_files
from memledger.configs.resolve import data_parallel, micro_batches, replicas
from memledger.presets.defaults import DEFAULTS as D

MODEL_DESTS = ("model", "hf_config", "hf_id", "model_spec")


def explicit_dests(parser: argparse.ArgumentParser, argv: list[str], command: str) -> set[str]:
    """The dests the command line set itself: parse again with every default suppressed."""
    sub = parser._subparsers._group_actions[0].choices[command]
    saved = [(a, a.default) for a in sub._actions]
    try:
        for a, _ in saved:
            a.default = argparse.SUPPRESS
        ns = parser.parse_args(argv)
    finally:
        for a, d in saved:
            a.default = d
    return set(vars(ns)) & {a.dest for a, _ in saved}


def apply_configs(args, parser, argv: list[str]):
    """Fill `args` from its --config files; returns the Imported (None without files)."""
    if not getattr(args, "config", None):
        return None
    imp = read_files(args.config, args.config_format)
    explicit = explicit_dests(parser, argv, args.command)
    values = imp.flags()
    if args.command == "plan":
        values = _for_planner(args, imp, values, explicit)
    if not explicit & set(MODEL_DESTS):
        if imp.model is not None:
            args.config_model = imp.model
        elif "model" in values or "hf_id" in values:
            for d in MODEL_DESTS:
                setattr(args, d, None)
    if {"world", "dp"} & explicit:  # the command line sets the size: the file's yields
        values = {k: v for k, v in values.items() if k not in ("world", "dp")}
    for dest, value in values.items():
        if dest.startswith("_") or dest in explicit or not hasattr(args, dest):
            continue
        if dest in MODEL_DESTS and explicit & set(MODEL_DESTS):
            continue
        setattr(args, dest, value)
    if "micro_batches" not in explicit and args.command != "plan":
        _micro_batches(args, imp, values)
    if "dp_replicate" not in explicit and hasattr(args, "dp_replicate"):
        _replicas(args, imp, values)
    _auto_buckets(args, imp, values, explicit)
    if values.get("finetune") == "freeze" and "_lf_trainable_layers" in values \
            and "freeze" not in explicit:
        from memledger.cli.args import load_model
        from memledger.configs.accelerate import lf_freeze
        args.freeze = lf_freeze(load_model(args).n_layers, values["_lf_trainable_layers"])
    return imp


# The planner searches the layout, micro-batch and recompute: a file gives it the model, the
# workload, the world size and the global batch only (its layouts shard over all of dp: a
# file's HSDP replica count is a layout choice it does not search).
PLANNER_SEARCHES = ("tp", "pp", "vpp", "ep", "etp", "cp", "dp", "dp_replicate", "zero", "sp",
                    "schedule", "layout", "micro_batch", "micro_batches", "recompute", "recompute_every")


def _for_planner(args, imp, values: dict, explicit: set) -> dict:
    f = dict(values)
    tp, pp, cp = (f.get(k, 1) for k in ("tp", "pp", "cp"))
    world = f.get("world") or (f["dp"] * tp * pp * cp if "dp" in f else None)
    if world and "world" not in explicit:
        args.world = [str(world)]
    gb = f.get("_global_batch")
    if gb in (None, -1) and world and "micro_batch" in f:
        dp = data_parallel(imp, tp=tp, pp=pp, cp=cp, dp=f.get("dp"), world=world)
        m = micro_batches(imp, f, dp=dp, micro_batch=f["micro_batch"])
        gb = f["micro_batch"] * (m if m is not None else f.get("micro_batches", 1)) * dp
    if gb not in (None, -1) and "global_batch" not in explicit:
        args.global_batch = gb
    return {k: v for k, v in f.items() if k not in PLANNER_SEARCHES and k != "world"}


def _dp(args, imp) -> int:
    world = args.world if args.world is not None else D["world"]
    return data_parallel(imp, tp=args.tp, pp=args.pp, cp=args.cp, dp=args.dp, world=world)


def _replicas(args, imp, values: dict) -> None:
    """HSDP copies the files imply once dp is known (DeepSpeed MiCS: configs.resolve)."""
    r = replicas(imp, {**values, "zero": args.zero}, dp=_dp(args, imp))
    if r is not None:
        args.dp_replicate = r


def _micro_batches(args, imp, values: dict) -> None:
    m = micro_batches(imp, values, dp=_dp(args, imp), micro_batch=args.micro_batch)
    if m is not None:
        args.micro_batches = m
        args.config_resolved = {"micro_batches"}  # set by the files: a loop's default yields


def _auto_buckets(args, imp, values: dict, explicit: set) -> None:
    """DeepSpeed "auto" buckets as the HF integration fills them (hidden², 0.9·hidden²)."""
    if not (values.get("_auto_reduce_bucket") or values.get("_auto_prefetch_bucket")):
        return
    from memledger.cli.args import load_model
    if not (getattr(args, "config_model", None) or any(getattr(args, d, None) for d in MODEL_DESTS)):
        return  # no model yet: `memledger config` still explains the file
    h = load_model(args).hidden
    if values.get("_auto_reduce_bucket") and "reduce_bucket" not in explicit:
        args.reduce_bucket = float(h * h)
    if values.get("_auto_prefetch_bucket") and "zero3_prefetch_bucket" not in explicit:
        args.zero3_prefetch_bucket = float(int(0.9 * h * h))


def apply_loop_implied(args, parser, argv: list[str], imp) -> dict[str, object]:
    """A named --loop's settings (specs.loop_implied) for every flag neither the command line
    nor a --config file set; returns what it set. The planner searches its own layouts."""
    from memledger.specs.loop_implied import (implied, implied_accumulation, implied_degrees,
                                              implied_recompute)
    if args.command == "plan" or getattr(args, "loop", "auto") == "auto":
        return {}
    given = (explicit_dests(parser, argv, args.command) | set(imp.flags() if imp else ())
             | getattr(args, "config_resolved", set()))
    out = {}
    _set(args, implied_degrees(args.loop, given), out)  # the pipeline degree first
    _set(args, implied_accumulation(args.loop, given, args.pp), out)
    _set(args, implied_recompute(args.loop, getattr(args, "torchtitan_version", "0.3"), given),
         out)
    tp, pp, cp = args.tp, args.pp, args.cp
    if args.dp is not None:
        dp = args.dp
    else:
        world = args.world if args.world is not None else D["world"]
        dp = max(1, world // max(1, tp * pp * cp))
    layout = implied(args.loop, dp=dp, cp=cp, tp=tp, pp=pp,
                     dp_replicate=getattr(args, "dp_replicate", 1), ep=getattr(args, "ep", 1))
    _set(args, {dest: value for dest, (value, _src) in layout.items() if dest not in given}, out)
    args.implied_etp = "etp" in out  # the loop's etp is for routed experts: moot without them
    return out


def _set(args, values: dict, out: dict) -> None:
    """The values on `args` (dests the command has), recorded in `out`."""
    for dest, value in values.items():
        if hasattr(args, dest):
            setattr(args, dest, value)
            out[dest] = value
