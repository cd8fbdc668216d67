"""Where a search writes its kept configurations: three preallocated columns (flat index
into the block's grid, peak, step time; the block of a row follows from each block's count,
`blocks.Evaluated.block_rows`) that `cells.assemble` (or `fused`) fills chunk by chunk in
the order it keeps them; and what each block kept (`Kept`: its counts and smallest peak).

Why: keeping one array per chunk and concatenating them at the end copies every kept row once
more (DeepSeek-V3 on 2,048 H100: 7.07 M rows, ~0.05 s of a ~1.4 s sweep; docs/planner-speed.md,
Round 3). The columns are reserved for every configuration of the space (`n_configurations`,
the upper bound of what can be kept), capped at CAP rows and doubled when a search keeps more;
memory pages that are never written are never touched (numpy's large `np.empty` is an
anonymous mapping), so only the kept rows occupy memory. The answer is the same rows in the
same order as before — tests/test_planner_prune.py, tests/test_planner_equality.py.
"""
from __future__ import annotations

from dataclasses import dataclass

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

    def give_back(self, k: int) -> None:
        """Return the last k rows handed out and not written (`fused`: rows are reserved for
        every configuration of a chunk before the kernel knows how many fit)."""
        if not 0 <= k <= self.n:
            raise ValueError(f"give_back: k={k} outside 0..{self.n} rows handed out")
        self.n -= k

    def result(self) -> dict[str, np.ndarray]:
        """The written rows of each column."""
        return {name: col[:self.n] for name, col in self.cols.items()}


def n_configurations(groups, zs, rcs, sizes) -> int:
    """Configurations of the space: per group, its pipeline shapes × the micro-batch sizes of
    each width's dp (`sizes(dp)`) × ZeRO stages × recompute modes (planner.sweep.size counts the
    same for the server's budget)."""
    per_dp: dict[int, int] = {}
    total = 0
    for g in groups:
        for dp in g.dp.tolist():
            if dp not in per_dp:
                per_dp[dp] = len(sizes(dp))
            total += per_dp[dp] * len(g.pipes)
    return total * len(zs) * len(rcs)


@dataclass
class Kept:
    """What one block keeps: its rows of the search's `sink.Sink` (flat index into the block's
    grid, peak, seconds), its step-time terms (parts=True) and its counts."""

    n_rows: int
    parts: dict
    n_evaluated: int = 0
    n_fits: int = 0
    n_pruned: int = 0  # configurations of cells the static bound ruled out
    best: tuple | None = None  # (peak_total, flat, seconds) of the smallest valid peak

    def add_to(self, out, block) -> None:
        """Add this block's counts and kept configurations to `out` (`blocks.Evaluated`)."""
        out.n_evaluated += self.n_evaluated
        out.n_fits += self.n_fits
        out.n_pruned += self.n_pruned
        if self.best is not None and (out.best is None or self.best[0] < out.best["peak_bytes"]):
            row = {k: v[0].item() for k, v in block.decode(np.array([self.best[1]])).items()}
            out.best = {**row, "peak_bytes": self.best[0], "seconds": self.best[2]}
        if not self.n_rows:
            return
        out.blocks.append(block)  # its rows follow the previous block's in the sink
        out.block_rows.append(self.n_rows)
        for k, v in self.parts.items():
            out.parts.setdefault(k, []).extend(v)
