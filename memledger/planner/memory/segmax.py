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


def segment_max(a: np.ndarray, seg) -> np.ndarray:
    # the segment lengths as Python ints: a search calls this ~1,300 times on a few dozen
    # segments, where numpy's per-call overhead (np.append, np.diff, comparisons) was most of
    # the time (docs/planner-speed.md, Round 7)
    s = seg.tolist() if isinstance(seg, np.ndarray) else [int(x) for x in seg]
    n = [e - b for b, e in zip(s, s[1:] + [len(a)])]
    if min(n, default=1) < 1:
        raise ValueError("segment_max needs non-empty segments")
    k = n[0] if n else 1
    if n and n.count(k) == len(n) and len(a) == k * len(n):  # equal segments: strided views
        out = a[::k].copy() if k == 1 else np.maximum(a[::k], a[1::k])  # no copy to start from
        for j in range(2, k):
            np.maximum(out, a[j::k], out=out)
        return out
    starts = np.asarray(s, dtype=np.intp)
    out = a[starts]
    for j in range(1, max(n, default=1)):
        has = [i for i, x in enumerate(n) if x > j]
        if len(has) == len(s):
            np.maximum(out, a[starts + j], out=out)
        else:
            at = np.asarray(has, dtype=np.intp)
            out[at] = np.maximum(out[at], a[starts[at] + j])
    return out
