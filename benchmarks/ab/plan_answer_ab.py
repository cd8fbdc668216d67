"""The planner's answer on two trees, compared: same kept configurations in the same order,
byte-identical peaks, step times within 1e-12 relative, the same order, Pareto front, top-20
rows and smallest peak (docs/planner-speed.md, Round 3).

    python benchmarks/ab/plan_answer_ab.py OTHER_TREE   # e.g. main unpacked with git archive

Cases: the three of bench_planner.py and Llama-3 8B on 64 H100. Each tree runs in its own
process (its own `memledger`); the answers are decoded column by column and compared here.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[2]
CASES = {
    "DeepSeek-V3, 2048 x H100": dict(model="deepseek-v3", worlds=(2048,), seq=4096,
                                     global_batch=15360),
    "Llama-3.1 405B, 1024 x H100": dict(model="llama3.1-405b", worlds=(1024,), seq=8192,
                                        global_batch=2048),
    "DeepSeek-V3, vpp<=4 cp<=8 mb<=8": dict(model="deepseek-v3", worlds=(2048,), seq=4096,
                                            global_batch=15360,
                                            bounds=dict(max_vpp=4, max_cp=8, max_micro_batch=8)),
    "Llama-3 8B, 64 x H100": dict(model="llama3-8b", worlds=(64,), seq=8192, global_batch=512),
}


def dump(out: str) -> None:
    """Run in the tree under test: every case's answer, as `out`.npz (arrays, no pickles) and
    `out`.json (counts, smallest peak, top and front rows)."""
    from memledger import gpu, model
    from memledger.planner import Constraints, PlanSpec, plan
    arrays, meta = {}, {}
    for name, kw in CASES.items():
        kw = dict(kw)
        spec = PlanSpec(model=model(kw.pop("model")), hardware=gpu("h100"),
                        constraints=Constraints(**kw.pop("bounds", {})), **kw)
        r = plan(spec)
        ev = r.evaluated
        meta[name] = dict(counts=r.counts(), pruned=ev.n_pruned, best=ev.best,
                          cols=list(ev.columns()), top=r.rows(r.top(20)),
                          front=r.rows(r.pareto))
        arrays.update({f"{name}|col|{k}": np.asarray(v) for k, v in ev.columns().items()})
        arrays.update({f"{name}|{k}": np.asarray(v) for k, v in (
            ("peak", ev.peak_bytes), ("secs", ev.seconds), ("order", r.order),
            ("pareto", r.pareto))})
    np.savez(out + ".npz", **arrays)
    with open(out + ".json", "w") as f:
        json.dump(meta, f)


def load(out: str) -> dict:
    """`dump`'s answer back, arrays read without pickles."""
    with open(out + ".json") as f:
        meta = json.load(f)
    with np.load(out + ".npz", allow_pickle=False) as z:
        for name, m in meta.items():
            m["cols"] = {k: z[f"{name}|col|{k}"] for k in m["cols"]}
            m.update({k: z[f"{name}|{k}"] for k in ("peak", "secs", "order", "pareto")})
    return meta


def _rows_equal(a: list, b: list) -> bool:
    same = lambda x, y: ({k: v for k, v in x.items() if k != "seconds"}  # noqa: E731
                         == {k: v for k, v in y.items() if k != "seconds"}
                         and abs(x["seconds"] - y["seconds"]) <= 1e-12 * x["seconds"])
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def compare(a: dict, b: dict) -> bool:
    ok = True
    for name, x in a.items():
        y, bad = b[name], []
        if x["counts"] != y["counts"] or x["pruned"] != y["pruned"]:
            bad.append("counts")
        if (x["best"] is None) != (y["best"] is None) or (
                x["best"] and not _rows_equal([x["best"]], [y["best"]])):
            bad.append("smallest peak")
        bad += [f"column {k}" for k in x["cols"] if not np.array_equal(x["cols"][k], y["cols"][k])]
        if not np.array_equal(x["peak"], y["peak"]):
            bad.append("peaks")
        rel = float(np.max(np.abs(x["secs"] - y["secs"]) / x["secs"])) if len(x["secs"]) else 0.0
        if len(x["secs"]) != len(y["secs"]) or rel > 1e-12:
            bad.append(f"step times (max relative difference {rel:.1e})")
        bad += [k for k in ("order", "pareto") if not np.array_equal(x[k], y[k])]
        bad += [f"{k} rows" for k in ("top", "front") if not _rows_equal(x[k], y[k])]
        print(f"{name}: {len(x['peak']):,} kept, front {len(x['pareto'])}, step times within "
              f"{rel:.1e} relative: " + ("identical" if not bad else "DIFFERENT: " + ", ".join(bad)))
        ok &= not bad
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description="Compare the planner's answer on another tree "
                                             "with this one.")
    ap.add_argument("other", nargs="?", help="the other tree's root (e.g. git archive output)")
    ap.add_argument("--dump", metavar="OUT", help=argparse.SUPPRESS)  # the per-tree child run
    args = ap.parse_args()
    if args.dump:
        return dump(args.dump)
    if not args.other or not (Path(args.other) / "memledger").is_dir():
        ap.error(f"other: expected a tree with a memledger/ package, got {args.other!r}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, tree in enumerate((Path(args.other).resolve(), HERE)):
            paths.append(f"{tmp}/{i}")
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--dump", paths[-1]],
                           cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
        a, b = (load(p) for p in paths)
    ok = compare(a, b)
    print("ALL IDENTICAL" if ok else "DIFFERENCES")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
