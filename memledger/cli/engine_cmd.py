"""`memledger validate --engine torch`: per-rank truth from PyTorch's distributed engine.

Not a sub-command of its own: `validate_cmd` adds these flags and hands over when --engine is
given. `--scale cpu` runs the real-tensor cases on 2-8 gloo CPU processes, `--scale fake` the
real-shape cases under FakeTensorMode at 64-1024 ranks, `all` both. Writes
<out>/engine-<scale>.json (measurements + environment; predictions are re-derived on read).
Bad input (an unknown case, a configuration the engine cannot run) exits 2 with one line;
a failing rank exits 1 naming the rank.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from memledger.errors import SpecError


def add_flags(p) -> None:
    p.add_argument("--engine", choices=("torch", "torchtitan", "megatron-core"), default=None,
                   help="torch: measure every rank of a torch.distributed step (FSDP2, ZeRO-1, "
                        "TP+SP, PP); torchtitan: torchtitan's own model and parallelize code at "
                        "real scale under fake tensors (needs torchtitan: pip install -e "
                        "'.[validation]'); megatron-core: Megatron-Core's GPTModel (local spec), "
                        "DDP and DistributedOptimizer on gloo CPU processes (needs megatron-core: "
                        "pip install --no-deps 'megatron-core==0.16.1')")
    p.add_argument("--scale", choices=("cpu", "fake", "all"), default="cpu",
                   help="with --engine: real tensors on gloo CPU processes, fake mode at scale, or both")
    p.add_argument("--backend", choices=("fake", "gloo"), default=None,
                   help="with --engine torchtitan: fake (default: real sizes under fake tensors) "
                        "or gloo (small sizes for real, one CPU process per rank, each case also "
                        "run under fake mode; writes <out>/engine-torchtitan-gloo.json)")
    p.add_argument("--merge", action="store_true",
                   help="with --engine torchtitan or megatron-core --out: the measured cases "
                        "replace their namesakes in the stored file or join it (in the case "
                        "list's order); "
                        "every other stored measurement is kept as it is (no --force needed)")
    p.add_argument("--timeout", type=float, default=180.0, help="with --engine: seconds per case")
    p.add_argument("--engine-config", default=None, metavar="K=V,...",
                   help="with --engine: one ad-hoc case, e.g. tp=2,pp=2,m=4,schedule=1f1b "
                        "(keys tp pp vpp dp zero sp schedule m b seq); with --engine "
                        "torchtitan: model=FAMILY:FLAVOR,world=N,... (keys model world tp cp "
                        "ep pp replicate ac seq lb mbs schedule pp_rank loss), e.g. "
                        "model=qwen3:14B,world=16,tp=2,ac=full,seq=4096,lb=2")
    p.add_argument("--hf-config", default=None, metavar="JSON",
                   help="with --engine-config: the model's config.json (default: a tiny Llama)")


def environment(scale: str) -> dict:
    import platform

    import torch
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "device": "cpu",
            "backend": "gloo" if scale == "cpu" else "fake process group + FakeTensorMode",
            "threads_per_rank": 1 if scale == "cpu" else torch.get_num_threads()}


def _pool(scale: str):
    from memledger.engine.cases import CPU_CASES, FAKE_CASES
    return CPU_CASES if scale == "cpu" else FAKE_CASES


def measure(scale: str, cases, timeout: float) -> dict:
    from memledger.engine.cases import case_to_dict, check_runnable
    from memledger.engine.compare import compare_case
    for c in cases:
        check_runnable(c)  # bad input fails before any process starts
    doc = {"engine": "torch", "scale": scale, "environment": environment(scale), "measurements": []}
    for case in cases:
        if scale == "cpu":
            from memledger.engine.workers import run_case
            ranks = run_case(case, timeout_s=timeout)
        else:
            from memledger.engine.fake import run_fake
            ranks = [run_fake(case)]
        doc["measurements"].append({"case": case.name, "spec": case_to_dict(case), "ranks": ranks})
        rows = compare_case(case, ranks)
        print(f"{case.name:<48} " + "  ".join(
            f"{r['row']}={100 * r['rel_error']:+.2f}%" for r in rows if r["rank"] == 0), flush=True)
    return doc


def report(doc: dict) -> int:
    from memledger.engine.compare import rescore
    from memledger.validation.report import worst_by_row
    records = rescore(doc)
    worst = worst_by_row(records)
    print(f"{doc['scale']}: worst |error| per row over {len(records)} records: "
          + ", ".join(f"{k} {100 * v:.2f}%" for k, v in worst.items()))
    misses = [r for r in records if not r["ok"]]
    for r in misses:
        print(f"  MISS {r['case']} rank {r['rank']} {r['row']}: {100 * r['rel_error']:+.2f}% "
              f"(bar {100 * r['tolerance']:g}%)")
    return 0 if not misses else 1


def _cases(args, scale: str):
    from memledger.engine.cases import case_from_text, cases_named
    if args.engine_config:
        config = None
        if args.hf_config:
            try:
                config = json.loads(Path(args.hf_config).read_text())
            except (OSError, ValueError) as e:
                raise SpecError("hf-config", f"cannot read {args.hf_config}: {e}") from None
        return (case_from_text(args.engine_config, config),)
    if not args.cases:
        return _pool(scale)
    names = args.cases.split(",")
    pool = {c.name for c in _pool(scale)}
    return cases_named([n for n in names if n in pool], _pool(scale)) \
        if any(n in pool for n in names) or args.scale != "all" else ()


def run(args) -> int:
    from memledger.engine.workers import EngineError
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SpecError("engine", "--engine torch needs torch and transformers: "
                                  "pip install 'memledger[trace]'") from None
    if args.cases and args.scale != "all":
        from memledger.engine.cases import cases_named
        cases_named(args.cases.split(","), _pool(args.scale))  # unknown names: exit 2
    scales = ("cpu", "fake") if args.scale == "all" else (args.scale,)
    if args.engine_config:
        scales = scales[:1]
    status = 0
    if args.out:  # before any measurement: a stored run is kept unless --force
        from memledger.cli.outfiles import keep_existing
        keep_existing([Path(args.out) / f"engine-{s}.json" for s in scales], args.force)
    for scale in scales:
        cases = _cases(args, scale)
        if not cases:
            continue
        try:
            doc = measure(scale, cases, args.timeout)
        except EngineError as e:
            print(f"memledger validate: {e}", file=sys.stderr)
            return 1
        if args.out:
            folder = Path(args.out)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"engine-{scale}.json").write_text(json.dumps(doc, indent=1))
            print(f"wrote {folder}/engine-{scale}.json", file=sys.stderr)
        status |= report(doc)
    return status


def rescore_file(doc: dict) -> int:
    return report(doc)
