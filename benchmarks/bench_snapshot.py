"""Reading and attributing a large memory snapshot: seconds and peak RSS.

Generates a snapshot in torch's format (memledger.snapshot.generate; a 48-layer step with ~120-frame stacks repeated
until the trace has ~1 M entries, each entry with its own frames list of shared frame dicts, as
torch writes them), pickles it (~200 MB), then in a fresh process reads it with the safe reader,
measures and attributes it, and prints the time of each stage and the process's peak RSS.
Target (issue 29): <= 10 s for ~200 MB / ~1 M entries.
Run: PYTHONPATH=. python benchmarks/bench_snapshot.py [entries [outer frames per stack]]
(the default, 1,000,000 entries with 110 outer frames, is ~200 MB.)
"""
from __future__ import annotations

import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time

DEPTH = 110  # outer frames per stack: ~200 MB at 1 M entries (real stacks: 20-40 Python frames, more with C++)
CHILD = """
import resource, sys, time
t0 = time.perf_counter()
from memledger.snapshot.reader import read_file
from memledger.snapshot.measure import measure
from memledger.snapshot.attribute import attribute
t1 = time.perf_counter(); snap = read_file(sys.argv[1], 1 << 30)
t2 = time.perf_counter(); m = measure(snap)
t3 = time.perf_counter(); a = attribute(m)
t4 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"entries {m.n_entries:,}  peak allocated {m.peak_allocated_bytes:,} B  "
      f"unattributed {a.rows['unattributed']:,} B")
print(f"read {t2 - t1:.2f} s  measure {t3 - t2:.2f} s  attribute {t4 - t3:.2f} s  "
      f"total {t4 - t1:.2f} s  (imports {t1 - t0:.2f} s)  peak RSS {rss:,.0f} MiB")
"""


def main(entries: int = 1_000_000, depth: int = DEPTH) -> None:
    from memledger.snapshot.generate import StepModel, generate
    one, two = (len(generate(StepModel(layers=48, steps=k, tokens=2048))[0]["device_traces"][0])
                for k in (1, 2))
    t0 = time.perf_counter()
    snap, _ = generate(StepModel(layers=48, steps=max(1, (entries - one) // (two - one) + 1),
                                 tokens=2048, stacks="python", depth=depth))
    gen_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "snapshot.pickle")
        with open(path, "wb") as f:
            pickle.dump(snap, f)
        size = os.path.getsize(path)
        if os.environ.get("BENCH_SNAPSHOT_KEEP"):  # reuse the file for profiling
            os.link(path, os.environ["BENCH_SNAPSHOT_KEEP"])
        del snap
        print(f"generated in {gen_s:.1f} s: {size / 1e6:,.0f} MB")
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        out = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True,
                             env=env, timeout=300)
        print(out.stdout.strip() or out.stderr.strip())
    print(f"generator peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
