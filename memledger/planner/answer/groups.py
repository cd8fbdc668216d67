"""The Planner's table without near-duplicates: fitting configurations grouped by layout, each
group shown once, ranked by step time to the shown precision and then by headroom.

Two configurations that differ only in the virtual pipeline size (vpp, with the stage split it
implies) or the recompute mode are one layout decision with a knob still to turn: on
DeepSeek-V3 they sit a few milliseconds apart (vpp 15/14/13/12 × recompute none/selective fill
the first twenty rows) and crowd out layouts that differ in tp, pp, ep, dp, ZeRO or
micro-batch. A group is every fitting configuration with the same world, tp, pp, ep, etp, cp, dp,
schedule, ZeRO stage and micro-batch size (`GROUP_AXES`).

Ranking: step times are a simple model (memledger.costs.stepmodel), so two times that agree to
`SIG_DIGITS` significant digits — the digits the page shows — are a tie, and a tie goes to the
smaller peak (more headroom). Ties between equal rounded times and equal peaks keep the exact
time order. A group's representative is its first configuration in that ranking, and groups
are ranked by their representatives. `Plan.order` (the CLI's ranking) is unchanged: exact
times, then peak.

Each group also lists its `NEAR` variants: members whose step time is within NEAR (5 %) of the
representative's — the near-duplicates the table folds away.
"""
from __future__ import annotations

import numpy as np

from memledger.planner.sweep.blocks import SCHEDULE_CODES
from memledger.planner.answer.result import Plan
from memledger.planner.question.spec import PLAN_RECOMPUTE

GROUP_AXES = ("world", "tp", "pp", "ep", "etp", "cp", "dp", "schedule", "zero", "micro_batch")
VARIANT_AXES = ("vpp", "recompute")  # what a group's members differ in
SIG_DIGITS = 3
NEAR = 0.05
FIRST_SCAN = 4096  # configurations decoded first; the scan grows ×4 until k groups are found


def shown_seconds(seconds) -> np.ndarray:
    """Step times rounded to SIG_DIGITS significant digits, as the page shows them."""
    s = np.asarray(seconds, dtype=np.float64)
    digits = SIG_DIGITS - 1 - np.floor(np.log10(np.where(s > 0, s, 1.0))).astype(np.int64)
    scale = 10.0 ** digits
    return np.round(s * scale) / scale


def layout_rank(result: Plan, i: int) -> tuple[int, int]:
    """(rank, layouts): where configuration i's layout (its group) stands among the layouts of
    `result` — 1 + the number of layouts whose fastest configuration is strictly faster than
    the fastest of i's — and how many layouts fit. Exact step times (no rounding, no headroom
    tie-break): the count a rank among configurations would use, one per layout."""
    ev = result.evaluated
    labels = layout_labels(ev)
    best = np.full(int(labels.max()) + 1, np.inf)
    np.minimum.at(best, labels, ev.seconds)
    return 1 + int(np.count_nonzero(best < best[labels[i]])), int(np.isfinite(best).sum())


def layout_labels(ev, rows=None) -> np.ndarray:
    """One integer per kept configuration `rows` of `ev` (`blocks.Evaluated`; default: all),
    equal exactly for configurations of one layout (`GROUP_AXES`), read off the flat indices: a
    block is one (world, tp, pp, cp, dp) — a search has one block per such tuple — and in its
    grid [pipe, width, ZeRO, micro-batch, recompute] a layout is (the pipe's schedule, width,
    ZeRO, micro-batch). No column is decoded (a DeepSeek-V3 search keeps 7 M configurations)."""
    ends = np.cumsum(ev.block_rows)
    sizes = [len(SCHEDULE_CODES) * int(np.prod(b.shape[1:4])) for b in ev.blocks]
    offsets = np.cumsum([0] + sizes[:-1])
    if rows is None:  # every row: each block's rows are one slice
        at = [slice(e - n, e) for e, n in zip(ends.tolist(), ev.block_rows)]
        flat, out = ev.flat, np.empty(len(ev.flat), np.int64)
    else:
        flat = ev.flat[np.asarray(rows, dtype=np.int64)]
        ids = np.searchsorted(ends, rows, side="right")
        order = np.argsort(ids, kind="stable")  # the rows of each block, together
        at = np.split(order, np.cumsum(np.bincount(ids, minlength=len(ev.blocks)))[:-1])
        out = np.empty(len(flat), np.int64)
    for b, (blk, sel) in enumerate(zip(ev.blocks, at)):
        _, n_w, n_z, n_b, n_rc = blk.shape
        p, rest = np.divmod(flat[sel], n_w * n_z * n_b * n_rc)
        out[sel] = offsets[b] + blk.pipes["schedule"][p] * (n_w * n_z * n_b) + rest // n_rc
    return out


def _ranked(result: Plan, idx: np.ndarray) -> np.ndarray:
    ev = result.evaluated
    return idx[np.lexsort((ev.seconds[idx], ev.peak_bytes[idx], shown_seconds(ev.seconds[idx])))]


def top_groups(result: Plan, k: int) -> list[np.ndarray]:
    """The k first groups, each an array of configuration indices (into `result.evaluated`):
    the representative first, then its NEAR variants in ranking order."""
    ev = result.evaluated
    n = len(ev.seconds)
    if not n or k < 1:
        return []
    shown = shown_seconds(ev.seconds)
    scan = min(n, max(FIRST_SCAN, 64 * k))
    while True:
        cut = shown[np.argpartition(shown, scan - 1)[scan - 1]] if scan < n else np.inf
        cand = _ranked(result, np.flatnonzero(shown <= cut))  # every tie of the cut included
        labels = layout_labels(result.evaluated, cand)
        _, first = np.unique(labels, return_index=True)
        if len(first) >= k or len(cand) == n:
            break
        scan = min(n, scan * 4)
    reps = cand[np.sort(first)[:k]]
    return _with_variants(result, reps)


def _with_variants(result: Plan, reps: np.ndarray) -> list[np.ndarray]:
    ev = result.evaluated
    limit = ev.seconds[reps] * (1 + NEAR)
    pool = _ranked(result, np.flatnonzero(ev.seconds <= limit.max()))
    labels = layout_labels(result.evaluated, np.concatenate([reps, pool]))
    rep_labels, pool_labels = labels[:len(reps)], labels[len(reps):]
    out = []
    for i, rep in enumerate(reps.tolist()):
        near = pool[(pool_labels == rep_labels[i]) & (ev.seconds[pool] <= limit[i])
                    & (pool != rep)]
        out.append(np.concatenate([[rep], near]).astype(np.int64))
    return out


def variants_text(result: Plan, group: np.ndarray) -> str:
    """'' for a group of one; else e.g. '+7 within 5%: vpp 4–7, recompute none/selective'."""
    if len(group) < 2:
        return ""
    cols = result.evaluated.columns(group)
    parts = []
    vpp = sorted(set(cols["vpp"].tolist()))
    if len(vpp) > 1:
        parts.append(f"vpp {vpp[0]}–{vpp[-1]}" if vpp == list(range(vpp[0], vpp[-1] + 1))
                     else "vpp " + "/".join(map(str, vpp)))
    modes = [PLAN_RECOMPUTE[c] for c in sorted(set(cols["recompute"].tolist()))]
    if len(modes) > 1:
        parts.append("recompute " + "/".join(modes))
    return f"+{len(group) - 1} within {NEAR:.0%}: " + ", ".join(parts)
