"""`memledger validate`: run real training steps and compare with the ledger (needs torch and
transformers: `pip install memledger[trace]`). Writes <out>/validation-<device>.json and .csv."""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from memledger.cli.outfiles import keep_existing
from memledger.errors import SpecError


def add(sub) -> None:
    p = sub.add_parser("validate", help="measure real training steps and compare with the ledger")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--cases", default=None, help="comma-separated case names (default: all for the device)")
    p.add_argument("--out", default=None, help="folder for the JSON/CSV results (an existing "
                   "result there is kept unless --force)")
    p.add_argument("--force", action="store_true", help="replace an existing result in --out")
    p.add_argument("--list", action="store_true", help="list the case names and exit")
    p.add_argument("--finetune", action="store_true",
                   help="the fine-tuning cases (peft LoRA, frozen modules; needs peft): writes "
                        "<out>/finetune-<device>.json")
    p.add_argument("--rescore", metavar="JSON", default=None,
                   help="re-predict a stored run's measurements with the current ledger (no torch)")
    from memledger.cli.engine_cmd import add_flags
    add_flags(p)
    p.add_argument("--timeline", action="store_true",
                   help="measure the step timeline event by event (CPU cases × zero_grad to None "
                        "or not × AdamW foreach/fused/for-loop × checkpointing); writes "
                        "<out>/timeline-<device>.json")
    p.set_defaults(run=run)


def _device(choice: str) -> str:
    try:
        import torch
    except ImportError:
        raise SpecError("device", "validate needs torch and transformers: pip install 'memledger[trace]'") from None
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise SpecError("device", "cuda requested but torch sees no GPU")
    return choice


def run(args) -> int:
    from memledger.cli.trace_cmd import framework_errors
    if args.rescore:
        return rescore_file(Path(args.rescore))
    if getattr(args, "backend", None) and args.engine != "torchtitan":
        raise SpecError("backend", f"{args.backend} goes with --engine torchtitan only "
                                   "(--engine torch: --scale cpu|fake)")
    if getattr(args, "merge", False) and args.engine not in ("torchtitan", "megatron-core"):
        raise SpecError("merge", "goes with --engine torchtitan or megatron-core only")
    if args.engine == "torchtitan":
        from memledger.cli import titan_cmd
        if args.list:
            print("\n".join(c.name for c in titan_cmd.pool(args)))
            return 0
        return titan_cmd.run(args)
    if args.engine == "megatron-core":
        from memledger.cli import megatron_cmd
        if args.list:
            from memledger.engine.megatron_cases import CASES as MEGATRON
            print("\n".join(c.name for c in MEGATRON))
            return 0
        return megatron_cmd.run(args)
    if args.engine:
        from memledger.cli import engine_cmd
        if args.list:
            from memledger.engine.cases import CPU_CASES as ENGINE_CPU
            from memledger.engine.cases import FAKE_CASES
            print("\n".join(c.name for c in ENGINE_CPU + FAKE_CASES))
            return 0
        return engine_cmd.run(args)
    return framework_errors(_run, args, "device")


def _run(args) -> int:
    from memledger.validation.cases import CPU_CASES, FINETUNE_CPU_CASES, GPU_CASES, cases_named
    if args.list:
        print("\n".join(c.name for c in GPU_CASES + CPU_CASES + FINETUNE_CPU_CASES))
        return 0
    device = _device(args.device)
    if args.timeline:
        from memledger.cli.timeline_validate import run_timeline
        return run_timeline(device, args.out, args.force)
    pool = FINETUNE_CPU_CASES if args.finetune else GPU_CASES if device == "cuda" else CPU_CASES
    cases = cases_named(args.cases.split(",") if args.cases else None) if args.cases else pool
    from memledger.validation.measure import environment, measure, workspace_bytes
    from memledger.validation.report import compare, worst_by_row
    env = environment()
    ws = workspace_bytes() if device == "cuda" else 0
    env["cublas_workspace_bytes"] = ws
    records, raw = [], []
    for case in cases:
        m = measure(case, device)
        raw.append({"case": case.name, **m})
        rows = compare(case, m, env, ws)
        records += rows
        print(f"{case.name:<45} " + "  ".join(f"{r['row']}={100 * r['rel_error']:+.2f}%" for r in rows),
              flush=True)
    worst = worst_by_row(records)
    print("worst |error| per row: " + ", ".join(f"{k} {100 * v:.2f}%" for k, v in worst.items()))
    if args.out:
        write(Path(args.out), device, env, records, raw, force=args.force,
              stem="finetune" if args.finetune else "validation")
    return 0 if all(r["ok"] for r in records) else 1


def rescore_file(path: Path) -> int:
    from memledger.safe_json import load_file
    from memledger.validation.report import rescore, worst_by_row
    doc = load_file(path, "rescore")  # bounded in size and nesting before parsing
    if isinstance(doc, dict) and doc.get("engine") == "megatron-core":
        from memledger.cli.megatron_cmd import report as megatron_report
        return megatron_report(doc)
    if isinstance(doc, dict) and doc.get("engine") == "torchtitan":
        from memledger.cli.titan_cmd import report as titan_report
        return titan_report(doc)
    if isinstance(doc, dict) and doc.get("engine"):  # a stored `validate --engine torch` run
        from memledger.cli.engine_cmd import rescore_file as engine_rescore
        return engine_rescore(doc)
    if isinstance(doc, dict) and "runs" in doc:  # a timeline result (validate --timeline)
        from memledger.cli.timeline_validate import print_records
        return print_records(doc)
    try:
        records = rescore(doc)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise SpecError("rescore", f"cannot read a validation result from {path}: {e}") from None
    for r in records:
        print(f"{r['case']:<45} {r['row']:<15} {100 * r['rel_error']:+7.2f}%  {'ok' if r['ok'] else 'MISS'}")
    worst = worst_by_row(records)
    print("worst |error| per row: " + ", ".join(f"{k} {100 * v:.2f}%" for k, v in worst.items()))
    return 0 if all(r["ok"] for r in records) else 1


def write(folder: Path, device: str, env: dict, records: list[dict], raw: list[dict],
          force: bool = False, stem: str = "validation") -> None:
    """<stem>-<device>.json and .csv in `folder` (stem "finetune" for the fine-tuning cases);
    an existing result (such as the stored GPU run the tests re-predict) is kept unless
    `force`."""
    keep_existing([folder / f"{stem}-{device}.{ext}" for ext in ("json", "csv")], force)
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"environment": env, "records": records, "measurements": raw}
    (folder / f"{stem}-{device}.json").write_text(json.dumps(doc, indent=1))
    with open(folder / f"{stem}-{device}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(records[0]))
        w.writeheader()
        w.writerows(records)
    print(f"wrote {folder}/{stem}-{device}.json and .csv", file=sys.stderr)
