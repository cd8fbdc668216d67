"""Why FSDPMemTracker reports 3.3x the measured peak on the fake-scale TP x FSDP cases: run the
Llama-3-70B tp=8 sp x FSDP2 world=512 case twice, as stored and with DTensor's sharding
propagation given a fake mode of its own (`detect_fake_mode` -> None in
torch/distributed/tensor/_sharding_prop.py), which the tracker's skip test
(`active_fake_mode() is self._fake_mode_on_entry`, _tools/fsdp2_mem_tracker.py) expects.
Prints the measured peak and activations and the tracker's Activation / Temp / Total.
(docs/engine-validation.md; about 25 s, needs torch and transformers.)

Run: python benchmarks/ab/fsdp_tracker_check.py
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = """
import sys
sys.path.insert(0, ROOT)
from memledger.engine.cases import FAKE_CASES
from memledger.engine.fake import run_fake
case = next(c for c in FAKE_CASES if c.name.startswith("llama3-70b") and c.world == 512)
if PATCHED:
    import torch.distributed.tensor._sharding_prop as sp
    sp.detect_fake_mode = lambda *a, **k: None
r = run_fake(case)
t, peak = r["fsdp_tracker_peak"], r["peak_live"]
label = "own fake mode" if PATCHED else "as stored"
print(f"{label:<14} measured peak {peak:>14,} activations {r['activations']:>14,} | tracker "
      f"Activation {t['Activation']:>14,} Temp {t['Temp']:>14,} Total {t['Total']:>14,} "
      f"({t['Total'] / peak:.2f}x)")
"""


def main() -> int:
    for patched in (False, True):  # separate processes: the patch is process-wide
        out = subprocess.run([sys.executable, "-c", CODE.replace("ROOT", repr(str(ROOT))).replace("PATCHED", str(patched))],
                             capture_output=True, text=True)
        if out.returncode:
            print(out.stderr.strip().splitlines()[-1])
            return 1
        print(out.stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
