"""`memledger validate --engine torchtitan`: torchtitan's own code at real scale as the truth.

Runs each case of `memledger.engine.titan_cases` (or the ones named by --cases, or the one
`--engine-config model=FAMILY:FLAVOR,world=N,...` spells: engine/titan_adhoc.py) under
FakeTensorMode with the fake process group, prints measured vs predicted per row, and with
--out writes <out>/engine-torchtitan.json (measurements + environment; predictions are
re-derived whenever the file is read: `memledger validate --rescore FILE`); with --merge the
measured cases replace their namesakes in that file or join it, the other stored measurements
untouched (refused when the stored run's torch / torchtitan / backend differ). `--backend gloo`
runs the small cases (`GLOO_CASES`) for real, one gloo CPU process per rank, and each again
under fake mode at the same world size: <out>/engine-torchtitan-gloo.json, with the fake − real
bytes per rank and row. torchtitan not installed → exit 2 with the line that installs it; an
unknown case → exit 2 naming the valid ones. Exit 1 when a row misses its bar, when fake and
real differ, or when a rank fails (one line naming it).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from memledger.errors import SpecError


FILES = {"fake": "engine-torchtitan.json", "gloo": "engine-torchtitan-gloo.json"}
GLOO_STAND_INS = ("; gloo: _fused_rms_norm_backward's CPU kernel = torch's decomposition, FSDP "
                  "units set_force_sum_reduction_for_comms (gloo refuses PREMUL_SUM; the divide "
                  "factor is torchtitan's 1.0)")


def pool(args):
    from memledger.engine.titan_cases import CASES, GLOO_CASES
    return GLOO_CASES if getattr(args, "backend", None) == "gloo" else CASES


def environment(backend: str = "fake") -> dict:
    import platform

    import torch
    import torchtitan
    return {"torch": torch.__version__, "torchtitan": getattr(torchtitan, "__version__", "0.3.0"),
            "python": platform.python_version(), "device": "cpu",
            "backend": ("gloo, one CPU process per rank, real tensors; each case also under the "
                        "fake process group + FakeTensorMode" if backend == "gloo"
                        else "fake process group + FakeTensorMode"),
            "spmd_backend": "partial_dtensor",
            "stand_ins": "FlexAttention -> scaled_dot_product_attention(is_causal) (same saved "
                         "tensors; MLA's unequal q/v head sizes: an op saving flex's q, k, v, "
                         "out, logsumexp); RMSNorm -> the CUDA _fused_rms_norm autograd node "
                         "(saves input, weight, rstd); trunc_normal_ init skipped; meshes on cpu; "
                         "compiled loss run eager; CP: no BlockMask built; MoE router gate on "
                         "fp32 casts of its input and weight (CUDA's fp32 autocast; CPU "
                         "autocast disables itself); EP: balanced "
                         "all-to-all splits (T*K/ep per peer); PP: stage metadata as pp rank 0 "
                         "sends it, the warm-up vote answered, compile and Float8 off"
                         + (GLOO_STAND_INS if backend == "gloo" else "")}


def report(doc: dict) -> int:
    from memledger.engine.titan_compare import rescore
    records = rescore(doc)
    for r in records:
        mark = "ok  " if r["ok"] else "MISS"
        print(f"{mark} {r['case']:<34} {r['row']:<15} measured {r['measured_bytes']:>15,} "
              f"predicted {r['predicted_bytes']:>15,}  {100 * r['rel_error']:+7.2f}% "
              f"(bar {100 * r['tolerance']:g}%)")
    same = _fake_vs_real(doc)
    return 0 if all(r["ok"] for r in records) and same else 1


def _fake_vs_real(doc: dict) -> bool:
    from memledger.engine.titan_compare import fake_vs_real
    same = True
    for entry in (e for e in doc["measurements"] if "fake" in e):
        diffs = [d for d in fake_vs_real(entry) if d["diff_bytes"]]
        same &= not diffs
        print(f"{'ok  ' if not diffs else 'DIFF'} {entry['case']:<34} fake vs real, "
              f"{len(entry['ranks'])} ranks: " + ("equal to the byte" if not diffs else ", ".join(
                  f"rank {d['rank']} {d['row']} {d['diff_bytes']:+,} B" for d in diffs)))
    return same


def _measure(case) -> dict:
    from memledger.engine.titan import run_titan_fresh
    return run_titan_fresh(case)


def _cases(args, backend: str) -> list:
    """The named cases, every case of the pool, or the one `--engine-config` spells."""
    from memledger.engine.titan_cases import case_by_name
    if getattr(args, "engine_config", None):
        if args.cases:
            raise SpecError("engine-config", "give either --cases or --engine-config, not both")
        if backend != "fake":
            raise SpecError("engine-config", "an ad-hoc torchtitan case runs under fake tensors "
                                             "only (--backend fake); the gloo cases: --list")
        if getattr(args, "hf_config", None):
            raise SpecError("hf-config", "with --engine torchtitan the model is the flavor "
                                         "model=FAMILY:FLAVOR names")
        from memledger.engine.titan_adhoc import case_from_text
        return [case_from_text(args.engine_config)]
    return [case_by_name(n, pool(args)) for n in args.cases.split(",")] if args.cases \
        else list(pool(args))


def run(args) -> int:
    from memledger.engine.titan import require_torchtitan
    from memledger.engine.titan_compare import case_to_dict
    from memledger.engine.workers import EngineError
    require_torchtitan()
    backend = getattr(args, "backend", None) or "fake"
    cases = _cases(args, backend)
    name = FILES[backend]
    merge = getattr(args, "merge", False)
    if merge and not args.out:
        raise SpecError("merge", "needs --out (the folder of the file to merge into)")
    if args.out and not merge:
        from memledger.cli.outfiles import keep_existing
        keep_existing([Path(args.out) / name], args.force)
    doc = {"engine": "torchtitan", "scale": backend, "environment": environment(backend),
           "measurements": []}
    for case in cases:
        if backend == "gloo":
            from memledger.engine.titan_gloo import measure_case
            try:
                entry = measure_case(case, timeout_s=max(args.timeout, 300.0))
            except EngineError as e:
                print(f"memledger validate: {e}", file=sys.stderr)
                return 1
        else:
            meas = _measure(case)
            meas.pop("timeline", None)
            entry = {"case": case.name, "spec": case_to_dict(case), "measured": meas}
        doc["measurements"].append(entry)
        print(f"measured {case.name} in {entry['measured']['seconds']:.1f} s", file=sys.stderr,
              flush=True)
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        stored = merged(folder / name, doc, pool(args)) if merge else doc
        (folder / name).write_text(json.dumps(stored, indent=1))
        print(f"wrote {folder}/{name}" + (f" ({len(doc['measurements'])} of "
              f"{len(stored['measurements'])} measurements new)" if merge else ""),
              file=sys.stderr)
    return report(doc)


MERGE_KEYS = ("torch", "torchtitan", "backend", "spmd_backend")


def merged(path: Path, doc: dict, cases) -> dict:
    """The stored run at `path` with `doc`'s measurements in place of their namesakes (or added),
    ordered as `cases`; the stored environment kept. A run of other versions is not mixed in."""
    from memledger.cli.outfiles import merge_measurements
    return merge_measurements(path, doc, cases, MERGE_KEYS, refreshed=("stand_ins",))
