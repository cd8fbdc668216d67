"""Reading and attributing a large memory snapshot (issue 29's bar: a ~200 MB, ~1 M-entry
snapshot in <= 10 s on the 2-core CI machine), with the peak RSS of the process that reads it.

The file is written by memledger.snapshot.synth in torch's format (frames on every forward
and optimizer allocation, as `stacks="python"` records them), uncompressed, then read in a
fresh process: safe unpickling, the structure check, the trace walk and the attribution.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READ = """
import json, resource, sys, time
t0 = time.perf_counter()
from memledger.snapshot.reader import read
from memledger.snapshot.measure import measure
from memledger.snapshot.attribute import at_peak
doc = read(sys.argv[1], limit=1 << 30)
t1 = time.perf_counter()
m = measure(doc)
rows = at_peak(m)
t2 = time.perf_counter()
print(json.dumps({"entries": m.entries, "read_s": t1 - t0, "measure_attribute_s": t2 - t1,
                  "total_s": t2 - t0, "peak_rss_mib": resource.getrusage(
                      resource.RUSAGE_SELF).ru_maxrss / 1024, "rows": rows}))
"""


def main() -> None:
    from memledger.snapshot import synth
    doc, _ = synth.training_step(layers=70_000, weight_bytes=4096, act_bytes=2048,
                                 act_grad_bytes=1024)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.pickle"
        synth.dump(doc, path, compress=False)
        size = path.stat().st_size
        del doc
        out = subprocess.run([sys.executable, "-c", READ, str(path)], capture_output=True,
                             text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    res = json.loads(out.stdout)
    print(f"snapshot {size / 2**20:,.0f} MiB, {res['entries']:,} trace entries: read "
          f"{res['read_s']:.2f} s, measured + attributed {res['measure_attribute_s']:.2f} s, "
          f"total {res['total_s']:.2f} s (bar 10 s); peak RSS {res['peak_rss_mib']:,.0f} MiB")


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"(benchmark wall time {time.perf_counter() - t:.1f} s)")
