"""`memledger validate --engine torchtitan`: torchtitan's own code at real scale as the truth.

Runs each case of `memledger.engine.titan_cases` (or the ones named by --cases) under
FakeTensorMode with the fake process group, prints measured vs predicted per row, and with
--out writes <out>/engine-torchtitan.json (measurements + environment; predictions are
re-derived whenever the file is read: `memledger validate --rescore FILE`). torchtitan not
installed → exit 2 with the line that installs it. Exit 1 when a row misses its bar.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def environment() -> dict:
    import platform

    import torch
    import torchtitan
    return {"torch": torch.__version__, "torchtitan": getattr(torchtitan, "__version__", "0.3.0"),
            "python": platform.python_version(), "device": "cpu",
            "backend": "fake process group + FakeTensorMode",
            "spmd_backend": "partial_dtensor",
            "stand_ins": "FlexAttention -> scaled_dot_product_attention(is_causal) (same saved "
                         "tensors; MLA's unequal q/v head sizes: an op saving flex's q, k, v, "
                         "out, logsumexp); RMSNorm -> the CUDA _fused_rms_norm autograd node "
                         "(saves input, weight, rstd); trunc_normal_ init skipped; meshes on cpu; "
                         "compiled loss run eager; CP: no BlockMask built; EP: balanced "
                         "all-to-all splits (T*K/ep per peer); PP: stage metadata as pp rank 0 "
                         "sends it, the warm-up vote answered, compile and Float8 off"}


def report(doc: dict) -> int:
    from memledger.engine.titan_compare import rescore
    records = rescore(doc)
    for r in records:
        mark = "ok  " if r["ok"] else "MISS"
        print(f"{mark} {r['case']:<34} {r['row']:<15} measured {r['measured_bytes']:>15,} "
              f"predicted {r['predicted_bytes']:>15,}  {100 * r['rel_error']:+7.2f}% "
              f"(bar {100 * r['tolerance']:g}%)")
    return 0 if all(r["ok"] for r in records) else 1


def _measure(case) -> dict:
    """A pipeline case runs in a fresh process: after a pp rank > 0 under TP, a later case in
    the same process finds a DTensor buffer's mesh on a destroyed process group (torchtitan's
    init_states re-distributes it); cause not found, isolation sidesteps it."""
    from memledger.engine.titan import run_titan
    if case.pp == 1:
        return run_titan(case)
    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(run_titan, (case,))


def run(args) -> int:
    from memledger.engine.titan import require_torchtitan
    from memledger.engine.titan_cases import CASES, case_by_name
    from memledger.engine.titan_compare import case_to_dict
    require_torchtitan()
    cases = [case_by_name(n) for n in args.cases.split(",")] if args.cases else list(CASES)
    if args.out:
        from memledger.cli.outfiles import keep_existing
        keep_existing([Path(args.out) / "engine-torchtitan.json"], args.force)
    doc = {"engine": "torchtitan", "scale": "fake", "environment": environment(),
           "measurements": []}
    for case in cases:
        meas = _measure(case)
        meas.pop("timeline", None)
        doc["measurements"].append({"case": case.name, "spec": case_to_dict(case),
                                    "measured": meas})
        print(f"measured {case.name} in {meas['seconds']:.1f} s", file=sys.stderr, flush=True)
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "engine-torchtitan.json").write_text(json.dumps(doc, indent=1))
        print(f"wrote {folder}/engine-torchtitan.json", file=sys.stderr)
    return report(doc)
