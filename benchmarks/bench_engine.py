"""Wall time of the engine validation (`memledger validate --engine torch`): each fake-scale
case (FakeTensorMode + fake process group, one process; target <= 15 s) and one real-tensor
case on gloo CPU processes (spawn + imports dominate).

Run: python benchmarks/bench_engine.py [--cpu]   (needs torch and transformers)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memledger.engine.cases import CPU_CASES, FAKE_CASES  # noqa: E402
from memledger.engine.fake import run_fake  # noqa: E402


def main() -> int:
    t0 = time.perf_counter()
    import transformers  # noqa: F401  (one-time imports, not a case's cost)
    from transformers import AutoModelForCausalLM  # noqa: F401
    print(f"imports (torch, transformers)                              "
          f"{time.perf_counter() - t0:6.1f} s", flush=True)
    worst = 0.0
    for case in FAKE_CASES:
        t0 = time.perf_counter()
        run_fake(case)
        dt = time.perf_counter() - t0
        worst = max(worst, dt)
        print(f"fake  {case.name:<50} {dt:6.1f} s", flush=True)
    if "--cpu" in sys.argv:
        from memledger.engine.workers import run_case
        case = CPU_CASES[0]
        t0 = time.perf_counter()
        run_case(case)
        print(f"cpu   {case.name:<50} {time.perf_counter() - t0:6.1f} s ({case.world} processes)")
    print(f"slowest fake-scale case: {worst:.1f} s (target 15 s)")
    return 0 if worst <= 15 else 1


if __name__ == "__main__":
    sys.exit(main())
