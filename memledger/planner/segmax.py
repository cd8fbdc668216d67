"""Segmented maximum over the leading axis: the planner's per-pipeline-shape reduction over
candidate ranks, written for speed.

`segment_max(a, seg)` equals `np.maximum.reduceat(a, seg, axis=0)` for non-empty contiguous
segments (every pipeline shape has at least one candidate rank), but walks the segments by
position — the first rows of every segment, then the second rows of those that have one, ... —
so each step is one vectorised maximum over whole slabs; numpy's reduceat along a leading axis
of a many-dimensional array is several times slower. Where every segment has the same length k
(every pipeline shape of pp = 2 has two distinct ranks), the slabs are strided views, not copies.
"""
from __future__ import annotations

import numpy as np


def segment_max(a: np.ndarray, seg: np.ndarray) -> np.ndarray:
    seg = np.asarray(seg)
    n = np.diff(np.append(seg, len(a)))
    if n.min(initial=1) < 1:
        raise ValueError("segment_max needs non-empty segments")
    k = int(n[0]) if len(n) else 1
    if len(n) and (n == k).all() and len(a) == k * len(n):  # equal segments: strided views
        out = a[::k].copy() if k == 1 else np.maximum(a[::k], a[1::k])  # no copy to start from
        for j in range(2, k):
            np.maximum(out, a[j::k], out=out)
        return out
    out = a[seg]
    for j in range(1, int(n.max(initial=1))):
        has = np.flatnonzero(n > j)
        if len(has) == len(seg):
            np.maximum(out, a[seg + j], out=out)
        else:
            out[has] = np.maximum(out[has], a[seg[has] + j])
    return out

