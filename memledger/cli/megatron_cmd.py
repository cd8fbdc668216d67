"""`memledger validate --engine megatron-core`: Megatron-Core's own code on gloo CPU processes as
the truth for the `megatron` profile.

Runs each case of `memledger.engine.megatron_cases` (or the ones named by --cases) with one
spawned process per rank, prints measured vs predicted per rank and row, and with --out writes
<out>/engine-megatron-core.json (measurements + environment; predictions are re-derived whenever
the file is read: `memledger validate --rescore FILE`); with --merge the measured cases replace
their namesakes in that file or join it, the other stored measurements untouched (refused when
the stored run's torch / megatron-core / device / backend / threads differ; as titan_cmd's).
megatron-core not installed → exit 2 with the line that installs it. Exit 1 when a row misses
its bar.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from memledger.errors import SpecError

FILE = "engine-megatron-core.json"


def environment() -> dict:
    import platform

    import megatron.core
    import torch
    return {"torch": torch.__version__, "megatron_core": megatron.core.__version__,
            "python": platform.python_version(), "device": "cpu", "backend": "gloo",
            "threads_per_rank": 1,
            "stand_ins": "torch.cuda.current_device -> cpu; device='cuda' literals -> cpu and "
                         "Tensor.type() names torch.cuda.*; CUDA RNG tracker fork -> null "
                         "(the dropout stream only); hidden-dropout cases: F.dropout -> "
                         "native_dropout (CUDA's path: a bool mask); core attention -> "
                         "scaled_dot_product_attention (flash's saved set) unless "
                         "attention=local; RMSNorm -> one function keeping input + fp32 "
                         "rstd (the CUDA kernels') unless norm=torch-cpu; MoE: "
                         "split sizes as numpy, "
                         "the router gemm's unbound te_general_gemm -> None (torch.mm); etp > 1: "
                         "uneven all_gather / reduce_scatter padded to equal sizes; one object for "
                         "every torch.cuda.Stream (the MoE dispatcher's D2H copy stream; partial "
                         "DistOpt's communication stream, which DDP makes with instances > 1 and "
                         "uses only with overlap_grad_reduce)"}


def report(doc: dict) -> int:
    from memledger.engine.megatron_compare import rescore
    records = rescore(doc)
    for r in records:
        mark = "ok  " if r["ok"] else "MISS"
        print(f"{mark} {r['case']:<40} rank {r['rank']} {r['row']:<22} measured "
              f"{r['measured_bytes']:>13,} predicted {r['predicted_bytes']:>13,}  "
              f"{100 * r['rel_error']:+7.2f}% (bar {100 * r['tolerance']:g}%)")
    return 0 if all(r["ok"] for r in records) else 1


def run(args) -> int:
    from memledger.engine.megatron_cases import CASES, case_by_name
    from memledger.engine.megatron_compare import case_to_dict
    from memledger.engine.megatron_core import require_megatron_core, run_case
    require_megatron_core()
    cases = [case_by_name(n) for n in args.cases.split(",")] if args.cases else list(CASES)
    merge = getattr(args, "merge", False)
    if merge and not args.out:
        raise SpecError("merge", "needs --out (the folder of the file to merge into)")
    if args.out and not merge:
        from memledger.cli.outfiles import keep_existing
        keep_existing([Path(args.out) / FILE], args.force)
    doc = {"engine": "megatron-core", "scale": "cpu", "environment": environment(),
           "measurements": []}
    for case in cases:
        try:
            ranks = run_case(case, timeout_s=max(args.timeout, 600.0))
        except RuntimeError as e:
            print(f"memledger validate: {e}", file=sys.stderr)
            return 1
        doc["measurements"].append({"case": case.name, "spec": case_to_dict(case),
                                    "ranks": ranks})
        print(f"measured {case.name} in {ranks[0]['seconds']:.1f} s", file=sys.stderr, flush=True)
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        stored = merged(folder / FILE, doc, CASES) if merge else doc
        (folder / FILE).write_text(json.dumps(stored, indent=1))
        print(f"wrote {folder}/{FILE}" + (f" ({len(doc['measurements'])} of "
              f"{len(stored['measurements'])} measurements new)" if merge else ""),
              file=sys.stderr)
    return report(doc)


MERGE_KEYS = ("torch", "megatron_core", "device", "backend", "threads_per_rank")


def merged(path: Path, doc: dict, cases) -> dict:
    """The stored run at `path` with `doc`'s measurements in place of their namesakes (or added),
    ordered as `cases` (titan_cmd.merged's rule); the stored environment kept but for its
    stand-ins line, this run's (the code's list, a superset). Other versions are not mixed in."""
    from memledger.cli.outfiles import merge_measurements
    return merge_measurements(path, doc, cases, MERGE_KEYS, ("stand_ins",))
