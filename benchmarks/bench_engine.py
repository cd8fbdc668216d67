"""Time of the engine validation: `memledger validate --engine torch`'s fake-scale cases
(FakeTensorMode + fake process group, one process; target <= 15 s) and one real-tensor case on
gloo CPU processes (spawn + imports dominate); with --torchtitan, every stored `memledger
validate --engine torchtitan` case (named or ad-hoc) instead, each in a fresh process after its
imports, timed in CPU seconds
(time.process_time: the box is shared) and re-measured against
validation/engine-torchtitan.json, every stored field byte for byte (JSON) but `seconds`.

Run: python benchmarks/bench_engine.py [--cpu]   (needs torch and transformers)
     python benchmarks/bench_engine.py --torchtitan [--cases NAME,NAME]   (needs torchtitan)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memledger.engine.cases import CPU_CASES, FAKE_CASES  # noqa: E402
from memledger.engine.fake import run_fake  # noqa: E402


def titan_case(name: str) -> dict:
    """One torchtitan case in this process: CPU and wall seconds, the stored fields it differs on."""
    import importlib
    import json

    from memledger.engine.titan import run_titan
    from memledger.engine.titan_compare import case_from_dict
    for family in ("llama3", "deepseek_v3", "qwen3"):  # imports are not a case's cost
        importlib.import_module(f"torchtitan.models.{family}.config_registry")
    stored = json.loads((ROOT / "validation" / "engine-torchtitan.json").read_text())
    entry = next(e for e in stored["measurements"] if e["case"] == name)
    want = entry["measured"]
    c0, t0 = time.process_time(), time.perf_counter()
    got = run_titan(case_from_dict(entry["spec"]))  # a stored ad-hoc case too
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    differ = [k for k in want if k != "seconds" and json.dumps(want[k]) != json.dumps(got.get(k))]
    return {"case": name, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "differ": differ}


def titan(names: list[str]) -> int:
    import json
    import subprocess
    worst, same = 0.0, True
    for name in names:
        out = subprocess.run([sys.executable, __file__, "--titan-case", name], text=True,
                             capture_output=True, cwd=ROOT)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("{")), None)
        if line is None:
            print(f"torchtitan  {name:<56} failed: {out.stderr.strip().splitlines()[-1:]}")
            same = False
            continue
        r = json.loads(line)
        worst, same = max(worst, r["cpu_s"]), same and not r["differ"]
        print(f"torchtitan  {name:<56} {r['cpu_s']:6.1f} CPU-s {r['wall_s']:6.1f} s  "
              + ("identical" if not r["differ"] else "DIFFERS: " + ", ".join(r["differ"])),
              flush=True)
    print(f"slowest torchtitan case: {worst:.1f} CPU-s (target 15 s); stored measurements "
          + ("re-measured identical" if same else "NOT re-measured identical"))
    return 0 if same and worst <= 15 else 1


def main() -> int:
    if "--titan-case" in sys.argv:
        import json
        print(json.dumps(titan_case(sys.argv[sys.argv.index("--titan-case") + 1])))
        return 0
    if "--torchtitan" in sys.argv:
        import json
        stored = json.loads((ROOT / "validation" / "engine-torchtitan.json").read_text())
        names = (sys.argv[sys.argv.index("--cases") + 1].split(",") if "--cases" in sys.argv
                 else [e["case"] for e in stored["measurements"]])
        return titan(names)
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
