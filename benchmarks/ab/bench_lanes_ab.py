"""Two lanes against one: the planner sweep with each block's assembly on a worker thread
(`memledger/planner/sweep/lane.py`, shipped) and with every block assembled inline (the switch off).

    python benchmarks/ab/bench_lanes_ab.py [--rounds 8]

For the cases of `bench_planner.py` (DeepSeek-V3 on 2,048 H100, Llama-3.1 405B on 1,024 H100),
on the compiled pass (the app) and on numpy alone (a one-shot `memledger plan`): `--rounds`
sweeps each way in one process, alternated and the order flipped every round so both see the
same drift of a shared machine. Prints best and median wall time, the median process CPU time
(above the wall time: the second core at work) and the ratio of the medians. The answers
(counts, every kept row's peak and time, the top 20) are compared: a lane changes when a block
is assembled, never what is kept.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_planner import CASES, run_case  # noqa: E402

from memledger.planner.sweep import fused, lane  # noqa: E402

AB_CASES = ("DeepSeek-V3, 2048 x H100", "Llama-3.1 405B, 1024 x H100")


def sweeps(kw: dict, compiled: bool, rounds: int) -> dict[bool, list[dict]]:
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for i in range(rounds):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            lane.ENABLED = on
            runs[on].append(run_case(kw, compiled))
    lane.ENABLED = True
    return runs


def report(name: str, path: str, runs: dict[bool, list[dict]]) -> None:
    if len({repr(r["answer"]) for rs in runs.values() for r in rs}) != 1:
        raise SystemExit(f"{name} ({path}): two lanes and one disagree")
    med = {}
    print(f"{name}, {path}:")
    for on, label in ((True, "two lanes"), (False, "one lane ")):
        wall = [r["sweep_s"] for r in runs[on]]
        med[on] = statistics.median(wall)
        cpu = statistics.median(r["cpu_s"] for r in runs[on])
        print(f"  {label} best {min(wall):.3f} s, median {med[on]:.3f} s "
              f"(CPU {cpu:.3f} s)  " + " ".join(f"{t:.2f}" for t in wall))
    print(f"  median two lanes / one lane: {med[True] / med[False]:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    fused.kernel()
    for name in AB_CASES:
        for compiled, path in ((True, "compiled pass"), (False, "numpy only")):
            report(name, path, sweeps(CASES[name], compiled, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
