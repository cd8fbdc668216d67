"""Where a search writes its kept configurations: three preallocated columns (flat index
into the block's grid, peak, step time; the block of a row follows from each block's count,
`evaluate.Evaluated.block_rows`) that `cells.assemble` fills chunk by chunk with
numpy's `out=`, in the order it keeps them.

Why: keeping one array per chunk and concatenating them at the end copies every kept row once
more (DeepSeek-V3 on 2,048 H100: 7.07 M rows, ~0.05 s of a ~1.4 s sweep; docs/planner-speed.md,
Round 3). The columns are reserved for every configuration of the space (`n_configurations`,
the upper bound of what can be kept), capped at CAP rows and doubled when a search keeps more;
memory pages that are never written are never touched (numpy's large `np.empty` is an
anonymous mapping), so only the kept rows occupy memory. The answer is the same rows in the
same order as before — tests/test_planner_prune.py, tests/test_planner_equality.py.
"""
from __future__ import annotations

import numpy as np

CAP = 1 << 24  # rows reserved at most up front (3 columns: 384 MiB of address space)
COLUMNS = (("flat", np.int64), ("peak_bytes", np.int64), ("seconds", np.float64))


class Sink:
    """The kept rows of one search; `rows(k)` hands out the next k rows of every column."""

    def __init__(self, capacity: int):
        cap = int(max(1, min(capacity, CAP)))
        self.n = 0
        self.cols = {k: np.empty(cap, dtype) for k, dtype in COLUMNS}

    def rows(self, k: int) -> dict[str, np.ndarray]:
        """Views of the next k rows of each column (to be written by the caller)."""
        need = self.n + k
        if need > len(self.cols["flat"]):
            size = max(need, 2 * len(self.cols["flat"]))
            for name, col in self.cols.items():
                grown = np.empty(size, col.dtype)
                grown[:self.n] = col[:self.n]
                self.cols[name] = grown
        out = {name: col[self.n:need] for name, col in self.cols.items()}
        self.n = need
        return out

    def result(self) -> dict[str, np.ndarray]:
        """The written rows of each column."""
        return {name: col[:self.n] for name, col in self.cols.items()}


def n_configurations(groups, zs, rcs, sizes) -> int:
    """Configurations of the space: per group, its pipeline shapes × the micro-batch sizes of
    each width's dp (`sizes(dp)`) × ZeRO stages × recompute modes (planner.size counts the
    same for the server's budget)."""
    per_dp: dict[int, int] = {}
    total = 0
    for g in groups:
        for dp in g.dp.tolist():
            if dp not in per_dp:
                per_dp[dp] = len(sizes(dp))
            total += per_dp[dp] * len(g.pipes)
    return total * len(zs) * len(rcs)
