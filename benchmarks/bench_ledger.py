"""Time to build the full per-rank ledger (pure Python), for the issue's two reference cases.

Run: python benchmarks/bench_ledger.py   (prints ms per full ledger; target < 5 ms)
Cold = every cache cleared first (a new configuration); warm = the same configuration again.
Caches are cleared before each build so the figure is a cold, full computation.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memledger import ParallelSpec, TrainSpec, build_ledger, model  # noqa: E402
from memledger.ledger.pipeline.schedules import balanced_layout  # noqa: E402

CASES = {
    "DeepSeek-V3 tp=8 pp=16 ep=64 (2048 GPUs)": (
        model("deepseek-v3"),
        ParallelSpec(tp=8, pp=16, ep=64, dp=16, sp=True, zero=1, layout=balanced_layout(61, 16)),
        TrainSpec(seq=4096, micro_batches=64)),
    "Llama-3.1 405B tp=8 pp=16 (1024 GPUs)": (
        model("llama3.1-405b"),
        ParallelSpec(tp=8, pp=16, dp=8, sp=True, zero=1, layout=balanced_layout(126, 16)),
        TrainSpec(seq=8192, micro_batches=64)),
}


def clear_caches():
    import functools
    import importlib
    import pkgutil

    import memledger

    # every lru_cache in the package: a cold build recomputes everything
    for info in pkgutil.walk_packages(memledger.__path__, "memledger."):
        if info.name.startswith(("memledger.views", "memledger.trace", "memledger.validation",
                                 "memledger.cli", "memledger.__main__")):
            continue
        mod = importlib.import_module(info.name)
        for obj in vars(mod).values():
            if isinstance(obj, functools._lru_cache_wrapper):
                obj.cache_clear()


def bench(case, repeat=50, cold=True, clock=time.perf_counter, timeline=False):
    """timeline=True: also build every rank's explicit step timeline (the JSON / chart path)."""
    times = []
    for _ in range(repeat):
        if cold:
            clear_caches()
        t0 = clock()
        led = build_ledger(*case)
        if timeline:
            for r in led.ranks:
                r.timeline
        times.append(clock() - t0)
    return statistics.median(times) * 1e3


def with_loop(case, loop):
    from memledger.specs.runtime import RuntimeSpec
    return (*case, RuntimeSpec(loop=loop))


if __name__ == "__main__":
    for name, case in CASES.items():
        # process CPU time is robust to other jobs on a shared machine; wall time is what users feel
        print(f"{name}: cold {bench(case):.2f} ms wall / {bench(case, clock=time.process_time):.2f} ms CPU, "
              f"warm {bench(case, cold=False):.2f} ms wall per full ledger (median of 50)")
        full = (bench(case, clock=time.process_time, timeline=True),
                bench(case, cold=False, clock=time.process_time, timeline=True))
        walked = with_loop(case, "pytorch")  # on-demand gradients: the peak walks the events
        on_demand = (bench(walked, clock=time.process_time), bench(walked, cold=False, clock=time.process_time))
        print(f"  + every rank's explicit timeline: cold {full[0]:.2f} / warm {full[1]:.2f} ms CPU; "
              f"loop pytorch (walked peak): cold {on_demand[0]:.2f} / warm {on_demand[1]:.2f} ms CPU")
