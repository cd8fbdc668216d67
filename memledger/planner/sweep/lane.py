"""A second lane for a search: while the calling thread computes one block's arrays (the
peak's pieces and the step time's, `evaluate`), the previous block is assembled on one worker
thread (`cells.assemble`: the cell-by-cell max, the fit test, the kept rows' step times and the
kept rows).

Why it is faster: the assembly's heavy part, the compiled pass (`fused`, built with
`nogil=True`), runs without Python's global lock, so on a machine with two or more cores it
overlaps the next block's computation instead of following it. `evaluate` sends only such
blocks, and only large ones (`evaluate.LANE_MIN`): numpy's assembly holds the lock between its
operations and gained nothing (docs/planner-speed.md, Round 7, has the measurements).

Why the answer is the same: one worker takes blocks first in, first out, so the kept rows
reach the search's sink in the order of the one-lane search, and the sink is touched by that
worker alone. What a block reports back (its counts, its best, the progress tick) is applied
on the calling thread, in order, so callbacks — the app's progress bar — never run on the
worker. At most `depth` assembled-but-unreported blocks wait, which bounds the memory held.
On one core (or `enabled=False`) every block is assembled inline, as before.
Ignores: anything that is not this search's own work (the machine's other load).
"""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

ENABLED = True  # benchmarks/ab/bench_lanes_ab.py turns it off for the one-lane side


class Lane:
    """`submit(work, done)`: run work() in order on the worker; done(result) on the caller.
    The pool's one thread starts with the first background block."""

    def __init__(self, depth: int = 2, enabled: bool | None = None):
        if depth < 1:
            raise ValueError(f"Lane depth={depth}: at least 1 block may wait")
        on = ENABLED if enabled is None else enabled
        self.depth = depth
        self._pool = ThreadPoolExecutor(1, "memledger-assemble") if on and (
            os.cpu_count() or 1) > 1 else None
        self._pending: deque = deque()

    def submit(self, work, done, background: bool = True) -> None:
        """Queue work() behind the blocks already submitted; done(its result) runs here, in
        order. background=False runs it inline once those are reported (a block too small to
        gain from the worker)."""
        if self._pool is None or not background:
            self.drain()
            done(work())
            return
        self._pending.append((self._pool.submit(work), done))
        while len(self._pending) > self.depth:
            self._report()

    def drain(self) -> None:
        """Wait for every submitted block and report it, in order."""
        while self._pending:
            self._report()

    def _report(self) -> None:
        future, done = self._pending.popleft()
        done(future.result())  # an exception on the worker is raised here, on the caller

    def __enter__(self) -> Lane:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:  # on an error: drop what has not started, wait for the rest
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()
