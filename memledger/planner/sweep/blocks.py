"""What a search keeps, block by block: `Block` — the axes of one evaluated block (a world, pp,
tp, cp, dp with its widths, pipeline shapes, ZeRO stages, micro-batch sizes and recompute
modes), whose configurations are flat indices into its grid — and `Evaluated`, the kept rows
of every block (flat index, peak, step time; written by `cells.assemble` through the sink)
with the search's counts and its smallest peak. `columns` decodes kept rows into the axes a
table shows. Computes nothing about memory or time itself (`evaluate` does).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

COLUMNS = ("world", "tp", "pp", "vpp", "ep", "etp", "cp", "dp", "schedule", "balanced", "zero",
           "micro_batch", "micro_batches", "recompute")
SCHEDULE_CODES = ("1f1b", "interleaved", "dualpipe")


@dataclass
class Block:
    """The axes of one evaluated block; a configuration is a flat index into its grid."""

    world: int
    pp: int
    tp: int
    cp: int
    dp: int
    ep: np.ndarray  # [W]
    etp: np.ndarray
    pipes: dict  # vpp, schedule (code), balanced: [P]
    zs: np.ndarray  # [Z]
    bs: np.ndarray  # [B] micro-batch sizes
    ms: np.ndarray  # [B] micro-batches per step
    rcs: np.ndarray  # [RC] recompute codes
    shape: tuple

    def decode(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        p, w, z, b, r = np.unravel_index(flat, self.shape)
        n = len(flat)
        return {"world": np.full(n, self.world), "tp": np.full(n, self.tp),
                "pp": np.full(n, self.pp), "vpp": self.pipes["vpp"][p], "ep": self.ep[w],
                "etp": self.etp[w], "cp": np.full(n, self.cp), "dp": np.full(n, self.dp),
                "schedule": self.pipes["schedule"][p], "balanced": self.pipes["balanced"][p],
                "zero": self.zs[z], "micro_batch": self.bs[b], "micro_batches": self.ms[b],
                "recompute": self.rcs[r]}


@dataclass
class Evaluated:
    blocks: list[Block] = field(default_factory=list)
    block_rows: list[int] = field(default_factory=list)  # kept rows per block, in sink order
    flat: np.ndarray | list = field(default_factory=list)
    peak_bytes: np.ndarray | list = field(default_factory=list)
    seconds: np.ndarray | list = field(default_factory=list)
    n_evaluated: int = 0
    n_fits: int = 0
    n_pruned: int = 0  # evaluated configurations whose cell the static bound ruled out (cells)
    best: dict | None = None  # the configuration with the smallest peak, fitting or not
    seconds_eval: float = 0.0  # combine + step times + assembly, both lanes summed (benchmark)
    parts: dict | None = None  # step-time terms per kept configuration (evaluate(parts=True))

    @property
    def block_id(self) -> np.ndarray:
        """Each kept row's block (run lengths `block_rows`: no per-row column is written)."""
        return np.repeat(np.arange(len(self.blocks), dtype=np.int32), self.block_rows)

    def columns(self, rows=None) -> dict[str, np.ndarray]:
        """Decoded axes of the kept configurations `rows` (default: all), in that order."""
        rows = np.arange(len(self.flat)) if rows is None else np.asarray(rows, dtype=np.int64)
        out = {c: np.zeros(len(rows), bool if c == "balanced" else np.int64) for c in COLUMNS}
        ids = np.searchsorted(np.cumsum(self.block_rows), rows, side="right")
        for b in np.unique(ids).tolist():
            at = np.flatnonzero(ids == b)
            for k, v in self.blocks[b].decode(self.flat[rows[at]]).items():
                out[k][at] = v
        return out
