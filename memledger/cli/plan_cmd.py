"""`memledger plan`: every layout of a model on a GPU budget that fits, fastest first.

Same flag names as `memledger ledger` where they apply; the parallel flags (--tp, --pp, ...,
--zero, --micro-batch, --recompute, --schedule) fix that axis instead of setting it, and
--world takes one or more world sizes (repeat it or give a comma list)."""
from __future__ import annotations

import json

from memledger.cli.args import (add_model_args, add_train_args, finetune_from_args, load_model,
                               resolve_profile, runtime_from_args)
from memledger.errors import SpecError
from memledger.presets import GPUS, gpu
from memledger.units import gib

FIXED = ("tp", "pp", "vpp", "ep", "etp", "cp", "dp")
TIMED = 20  # rows that get a breakdown and a reason (one small search each)
BOUNDS = ("max_tp", "max_etp", "max_cp", "max_vpp", "max_micro_batch")


def add(sub) -> None:
    p = sub.add_parser("plan", help="every layout that fits, ranked by estimated step time")
    add_model_args(p)
    add_train_args(p)
    p.set_defaults(micro_batch=None, recompute=None, micro_batches=None)
    g = p.add_argument_group("search space")
    g.add_argument("--world", action="append", default=None,
                   help="world size(s): repeat the flag or give a comma list (required unless "
                        "a --config sets it)")
    g.add_argument("--global-batch", type=int, default=None,
                   help="sequences per step (required unless a --config sets it)")
    g.add_argument("--gpus-per-node", type=int, default=None, help="default: the GPU preset's")
    g.add_argument("--headroom", type=float, default=0.0, help="fraction of HBM kept free")
    for name in FIXED:
        g.add_argument(f"--{name}", type=int, default=None, help=f"fix {name}")
    g.add_argument("--zero", type=int, default=None, help="fix the ZeRO stage")
    g.add_argument("--schedule", default=None, help="fix the schedule: 1f1b, interleaved, dualpipe")
    for name in BOUNDS:
        g.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    g.add_argument("--framework", default="megatron-core",
                   help="what overlaps: megatron-core, megatron-2021, megatron-2022 "
                        "(memledger.costs.overlap)")
    p.add_argument("--top", type=int, default=20, help="configurations to list (0 = all)")
    p.add_argument("--json", action="store_true", help="one JSON object, bytes as integers")
    p.set_defaults(run=run)


def _worlds(values: list[str]) -> tuple[int, ...]:
    parts = [x.strip() for v in values for x in v.split(",")]
    if not all(p.isdigit() and len(p) <= 12 for p in parts):
        shown = ",".join(values)[:60]
        raise SpecError("world", f"expected positive integers or comma lists, got {shown!r}")
    return tuple(dict.fromkeys(int(p) for p in parts))  # a repeated size is searched once


def spec_from_args(args):
    from memledger.planner import Constraints, PlanSpec
    if args.gpu is None:
        raise SpecError("gpu", f"the planner needs a GPU preset; valid: {', '.join(GPUS)}")
    if args.micro_batches is not None:
        raise SpecError("micro_batches", "the planner derives it: global batch / (dp · micro-batch)")
    if args.policy or args.policy_preset:
        raise SpecError("policy", "the planner searches recompute none / selective / full with "
                                  "every tensor kept; check a storage policy with `memledger "
                                  "ledger --policy`")
    if args.recompute_every:
        raise SpecError("recompute_every", "the planner searches none, selective and full")
    for dest, flag in (("world", "--world"), ("global_batch", "--global-batch")):
        if getattr(args, dest) is None:
            raise SpecError(dest, f"give {flag} (or a --config that says it)")
    if args.top < 0:
        raise SpecError("top", f"must be >= 0, got {args.top}")
    resolve_profile(args)
    if args.profile.startswith("traced:"):
        from memledger.trace.profile import register_traced  # lands with the tracing work
        args.profile = register_traced(args.profile[len("traced:"):])
    fixed = {k: getattr(args, k) for k in FIXED + ("zero", "micro_batch", "recompute", "schedule")}
    bounds = {k: getattr(args, k) for k in BOUNDS}
    return PlanSpec(model=load_model(args), hardware=gpu(args.gpu), worlds=_worlds(args.world),
                    seq=args.seq, global_batch=args.global_batch,
                    gpus_per_node=args.gpus_per_node, precision=args.precision,
                    optimizer=args.optimizer, profile=args.profile, attention=args.attention,
                    headroom=args.headroom, runtime=runtime_from_args(args),
                    mfu_pct=args.mfu, framework=args.framework,
                    constraints=Constraints(**fixed, **bounds), finetune=finetune_from_args(args))


def run(args) -> int:
    from memledger.planner import plan
    from memledger.planner.answer.breakdown import annotate
    result = plan(spec_from_args(args))
    if args.json:
        out = result.to_dict(args.top)
        out["configurations"] = annotate(result.spec, out["configurations"], explain=TIMED)
        print(json.dumps(out))
    else:
        print(render(result, args.top))
    return 0


def render(result, top: int) -> str:
    from memledger.planner import describe
    s, c = result.spec, result.counts()
    lines = [f"{s.model.name} on {'/'.join(map(str, s.worlds))} × {s.hardware.name} "
             f"({s.node_size} per node) | seq {s.seq} | global batch {s.global_batch} | "
             f"{s.precision}/{s.optimizer} | limit {gib(s.limit_bytes):.2f} GiB per GPU",
             f"layouts: {c['structural']} ({c['invalid']} invalid) | configurations: "
             f"{c['evaluated']} evaluated, {c['over_capacity']} over capacity, {c['fits']} fit "
             f"| {result.wall_s:.2f} s"]
    if result.reason:
        return "\n".join(lines + [result.reason])
    from memledger.planner.answer.breakdown import annotate
    from memledger.planner.time.throughput import LABELS
    rows = result.rows(result.top(top))
    timed = annotate(s, rows, explain=TIMED)
    lines.append(f"{'#':>4}  {'est. s/step':>11}  {'tokens/s':>10}  {'TFLOP/s':>7}  {'MFU':>4}  "
                 f"{'peak GiB':>8}  {'free GiB':>8}  layout | why it ranks here")
    for i, r in enumerate(timed, 1):
        tput = f"{r['tokens_per_s']:>10,.0f}  {r['tflops_per_gpu']:>7.0f}  {r['mfu_pct']:>3.0f}%"
        lines.append(f"{i:>4}  {r['seconds']:>11.3f}  {tput}  {gib(r['peak_bytes']):>8.2f}  "
                     f"{gib(r['free_bytes']):>8.2f}  {describe(r)}"
                     + (f" | {r['why']}" if "why" in r else ""))
    if timed:
        parts = timed[0]["breakdown"]
        lines.append("#1 step: " + ", ".join(f"{LABELS[k]} {v:.3f} s" for k, v in parts.items()
                                             if v > 0))
    lines.append(f"Pareto front (peak vs time): {len(result.pareto)} configurations; "
                 f"GiB = 2^30 bytes; times are estimates (memledger.costs.stepmodel, "
                 f"docs/step-time.md); TFLOP/s and MFU count model FLOPs (3 × forward)")
    return "\n".join(lines)
