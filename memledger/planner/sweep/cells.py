"""The planner's hot loop: a block's peaks, fit test and step times, one chunk of cells at a time
(numpy; once loaded, `fused` does the common case — pruned, keeping what fits — in one pass).

A block (one world, pp, tp, cp, dp) is the grid [pipe P, width W, ZeRO stage Z, micro-batch
size B, recompute RC] (`blocks.Block`). A *cell* is one (pipe, width, ZeRO stage): its B·RC
configurations are one contiguous run of the block's flat order, so cells taken in ascending
order keep every configuration's flat index and the order the planner keeps them in (ties in
`Plan.order` resolve as they always have).

Cells are evaluated up to CHUNK configurations at a time. A chunk's peak is the max over its
pipes' candidate ranks, one rank slot at a time, on rows gathered from the per-rank terms of
`evaluate.combine` (`RankTerms`) — no [rank, P, W, Z, B, RC] array is built — exactly as
`ledger.build_rank` assembles a rank:
    alloc      = max over ranks r of max(F[r, w, b, rc] + SF[r, w, z] + adj, SS[r, w, z])
    peak_total = alloc + ⌈alloc · slack% / 100⌉ + CUDA context
F: activations, per-micro-batch buffers and the largest transient; SF: static rows plus the
buffers that do not depend on the micro-batch; SS: static rows plus the optimizer-step
temporaries; adj ≤ 0: the loss-side transients discounted by the FSDP unit (ZeRO-3 with FSDP
units, `ledger.runtime.transient_at_peak`), zero where the unit is 0. Step times are
pipeline[p, w, b, rc] + per-step[p, w, z, b] (`timing.block_seconds(split=True)`), added only
for chunks that keep something. Only kept configurations are written out (flat index, peak,
step time); the counts are sums.

Pruning (exact; only when over-capacity configurations are not kept): a cell whose static
bound — max over its ranks of max(SF, SS) — already gives a peak_total above the limit holds no
fitting configuration, because every configuration's alloc is at least that bound: F + adj is a
sum of non-negative byte counts (kept activations, casts, first/last-stage tensors, pipeline
and all-to-all buffers, and max(in-layer, at-loss − unit, 0) for the transient), and peak_total
is strictly increasing in alloc. Such cells are counted as evaluated (`Evaluated.n_pruned`)
and never assembled: 8.8 M of DeepSeek-V3's 23.5 M configurations on 2,048 H100 (seq 4096,
global batch 15,360), 99.6 % of the 8.85 M in cells where nothing fits. The one thing
pruning cannot give is the smallest over-capacity peak (`Evaluated.best`) when nothing fits
at all: `evaluate` then searches again without pruning. Fitting is tested on alloc against
`alloc_ceiling` (the largest alloc whose peak_total fits); peak_total is computed only for
what is kept.
Not used: "a larger micro-batch never needs less memory". It would skip at most another 10 %
of the configurations (those of live cells at micro-batch sizes where nothing fits), and it
is not proven for every schedule: m = global batch / (dp · b) falls as b grows, and each
schedule × engine's in-flight count (ledger.pipeline.schedules) is a different function of m.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memledger.planner.sweep import fused
from memledger.planner.memory.segmax import segment_max
from memledger.planner.sweep.sink import Kept

CHUNK = 1 << 18  # configurations per chunk: bounds the temporaries of the largest blocks
NEVER = np.iinfo(np.int64).max
FUSED = True  # False: numpy even where `fused` is loaded (tests, the benchmark)


def peak_total(alloc, slack_pct: int, context: int, out=None):
    """alloc + ⌈alloc · slack / 100⌉ + context (`ledger.runtime`); strictly increasing.
    out: written there (an int64 array of alloc's shape), with one temporary."""
    if out is None:
        return alloc - (-alloc * slack_pct) // 100 + context
    up = np.multiply(alloc, -slack_pct)
    np.floor_divide(up, 100, out=up)
    np.subtract(alloc, up, out=out)
    out += context
    return out


def alloc_ceiling(limit: int, slack_pct: int, context: int) -> int:
    """The largest alloc whose peak_total fits under `limit` (-1: none)."""
    a = max((limit - context) * 100 // (100 + slack_pct), -1)
    while peak_total(a + 1, slack_pct, context) <= limit:
        a += 1
    while a >= 0 and peak_total(a, slack_pct, context) > limit:
        a -= 1
    return a


@dataclass
class RankTerms:
    """Per-rank pieces of the peak from `evaluate.combine` (persistent gradients)."""

    fwd_bwd: np.ndarray  # [R, W, B, RC] F
    with_fixed: np.ndarray  # [R, W, Z] SF
    with_step: np.ndarray  # [R, W, Z] SS
    units: np.ndarray | None = None  # [R, W, Z] FSDP unit bytes (None: no ZeRO-3 FSDP units)
    phases: list | None = None  # per recompute mode (in-layer, at-loss), broadcastable [R, W, B]
    src: tuple | None = field(default=None, repr=False)  # _sources(), built on first use
    # fwd_bwd's rows first, then room for one copy per ZeRO stage with units (evaluate.combine)
    table: np.ndarray | None = field(default=None, repr=False)

    def bound(self, seg) -> np.ndarray:
        """[P, W, Z] a lower bound of every configuration's alloc (static rows, see above)."""
        return segment_max(np.maximum(self.with_fixed, self.with_step), seg)

    def rows(self, seg, n_ranks, p, w, z) -> np.ndarray:
        """[K, B·RC] alloc of the cells (p, w, z): the max over their pipe's ranks of
        F + SF, then of SS (max over r of max(x_r, y_r) = max(max_r x_r, max_r y_r))."""
        n_w, n_z = self.with_fixed.shape[1:]
        f, base, variant = self._sources()
        sf, ss = self.with_fixed.reshape(-1), self.with_step.reshape(-1)
        need, v = n_ranks[p], variant.take(z)
        out, floor, low = None, None, None
        for j in range(int(need.max())):
            on = None if j == 0 or need.min() > j else np.flatnonzero(need > j)
            if on is not None and 2 * len(on) >= len(p):  # most cells: all of them, those
                on, j = None, np.minimum(j, need - 1)  # without a rank j repeat their last
            pj, wj, zj, vj = (p, w, z, v) if on is None else (p[on], w[on], z[on], v[on])
            r = seg[pj] + j
            rwz = (r * n_w + wj) * n_z + zj
            cand = f.take(base[vj, r] + wj, axis=0)
            add = sf.take(rwz)
            cand += add[:, None]
            if out is None:
                out, floor, low = cand, ss.take(rwz), add
            elif on is None:
                np.maximum(out, cand, out=out)
                np.maximum(floor, ss.take(rwz), out=floor)
                np.maximum(low, add, out=low)
            else:
                out[on] = np.maximum(out[on], cand)
                floor[on] = np.maximum(floor[on], ss.take(rwz))
                low[on] = np.maximum(low[on], add)
        # every F is ≥ 0 (the pruning argument above), so out ≥ max over ranks of SF (`low`):
        # SS changes only the cells whose SS exceeds that (none in most searches)
        hi = np.flatnonzero(floor > low)
        if len(hi):
            out[hi] = np.maximum(out[hi], floor[hi, None])
        return out

    def _sources(self):
        """(rows, base, variant): F as rows [(r, w), B·RC]; after them, for each ZeRO stage
        with FSDP units, the discounted rows of the ranks whose discount is not 0 —
        + max(max(in-layer, at-loss − unit), 0) − max(in-layer, at-loss), evaluate.combine's
        rule, which is 0 where the unit is 0 (at-loss ≥ 0) or at-loss is 0 (unit ≥ 0).
        base[variant[z], r] + w: the row rank r, width w reads at ZeRO stage z. (Should an
        at-loss ever be negative, every rank at every stage takes the rule, as combine did.)"""
        if self.src is not None:
            return self.src
        n_r, n_w, n_b, n_rc = self.fwd_bwd.shape
        n_z = self.with_fixed.shape[-1]
        base, variant = [np.arange(n_r) * n_w], np.zeros(n_z, np.int64)
        exact = all((sp >= 0).all() for _, sp in self.phases or ())
        hit = np.zeros(n_r, bool)  # ranks with a loss-side transient
        for _, sp in self.phases or ():
            hit |= (sp != 0).any(axis=(1, 2))
        n_rows = n_r * n_w
        table = self.table
        copies = 0 if self.units is None else n_z if not exact else sum(
            bool(self.units[:, :, k].any()) for k in range(n_z))
        if table is None or table.shape[0] < n_rows * (1 + copies):
            table = np.empty((n_rows * (1 + (n_z if self.units is not None else 0)), n_b * n_rc),
                             self.fwd_bwd.dtype)
            table[:n_rows] = self.fwd_bwd.reshape(n_rows, -1)
        for k in range(n_z) if self.units is not None else ():
            ranks = np.flatnonzero(hit & (self.units[:, :, k] > 0).any(1)) if exact \
                else np.arange(n_r)
            if not len(ranks):
                continue
            u = self.units[ranks, :, k, None]  # [n, W, 1]
            d = table[n_rows:n_rows + len(ranks) * n_w].reshape(len(ranks), n_w, n_b, n_rc)
            np.take(self.fwd_bwd, ranks, axis=0, out=d, mode="clip")
            for i, (lp, sp) in enumerate(self.phases):  # [R, 1 or W, B]: index, then broadcast
                lp, sp = lp[ranks], sp[ranks]
                d[..., i] += np.maximum(np.maximum(lp, sp - u), 0) - np.maximum(lp, sp)
            row = base[0].copy()
            row[ranks] = n_rows + np.arange(len(ranks)) * n_w
            variant[k], n_rows = len(base), n_rows + len(ranks) * n_w
            base.append(row)
        self.src = table[:n_rows], np.stack(base), variant
        return self.src


def spread_table(stacked, spread, n_copies: int):
    """(table, F): F = stacked [R, E, B, RC] spread to the widths (`spread`, one etp per
    width) as the first R·W rows of a table with room for `n_copies` more (RankTerms'
    FSDP-discounted rows: no concatenation later; pages never written cost nothing)."""
    n_rw = len(stacked) * len(spread)
    table = np.empty(((1 + n_copies) * n_rw, stacked[0, 0].size), stacked.dtype)
    fwd_bwd = table[:n_rw].reshape(len(stacked), len(spread), *stacked.shape[2:])
    np.take(stacked, spread, axis=1, out=fwd_bwd, mode="clip")  # unbuffered (indices valid)
    return table, fwd_bwd


@dataclass
class GridPeaks:
    """Every configuration's peak_total already computed (on-demand gradients): no pruning."""

    grid: np.ndarray  # [P, W, Z, B, RC]


def compiled(terms, keep_all: bool, prune: bool, parts: dict | None) -> bool:
    """Whether `assemble` takes the compiled pass (`fused`: pruned, fitting rows only)."""
    return (FUSED and fused.loaded() and isinstance(terms, RankTerms) and prune
            and not keep_all and parts is None)


def assemble(terms, secs, valid, seg, n_ranks, shape, limit, rt, keep_all: bool,
             prune: bool, sink, parts: dict | None = None) -> Kept:
    """Evaluate one block; its kept rows go to `sink` (`sink.Sink`), after the previous block's.
    terms: `RankTerms` or `GridPeaks`; secs: the step time's pieces (`timing.StepTerms`);
    valid [P, B]: the micro-batch counts the engine runs; seg, n_ranks: each pipe's first
    candidate rank and count; parts: step-time terms, each [P, W, Z, B, RC]."""
    n_p, n_w, n_z, n_b, n_rc = shape
    n_brc = n_b * n_rc
    out = Kept(0, {k: [] for k in parts or {}})
    out.n_evaluated = int(np.count_nonzero(valid)) * n_w * n_z * n_rc
    slack, ctx = rt.allocator_slack_pct, rt.cuda_context_bytes
    ranked = isinstance(terms, RankTerms)  # else the grid holds peak_total already
    ceiling = alloc_ceiling(limit, slack, ctx) if ranked else limit
    cells = np.arange(n_p * n_w * n_z if out.n_evaluated else 0)
    if prune and not keep_all and ranked and len(cells):
        cells = np.flatnonzero(terms.bound(seg).reshape(-1) <= ceiling)
        dead = np.ones(n_p * n_w * n_z, bool)
        dead[cells] = False
        out.n_pruned = int(np.count_nonzero(valid[np.flatnonzero(dead) // (n_w * n_z)])) * n_rc
    if compiled(terms, keep_all, prune, parts):
        return fused.assemble(out, terms, secs, valid, seg, n_ranks, shape, cells,
                              ceiling, (slack, ctx, peak_total), sink, CHUNK)
    total = (lambda a, out=None: peak_total(a, slack, ctx, out)) if ranked else \
        (lambda a, out=None: a if out is None else np.copyto(out, a))  # the grid: peak_total
    pipeline, per_step = secs.arrays()
    pipeline = pipeline.reshape(n_p * n_w, n_brc)
    per_step = per_step.reshape(-1, n_b)
    valid_rc = None if valid.all() else np.repeat(valid, n_rc, axis=1)  # [P, B·RC]
    step = max(1, CHUNK // n_brc)
    for c0 in range(0, len(cells), step):
        cell = cells[c0:c0 + step]
        pw, z = np.divmod(cell, n_z)
        p, w = np.divmod(pw, n_w)
        alloc = (terms.rows(seg, n_ranks, p, w, z) if ranked
                 else terms.grid.reshape(-1, n_brc).take(cell, axis=0))
        ok = None if valid_rc is None else valid_rc.take(p, axis=0)
        fit = alloc <= ceiling
        if ok is not None:
            fit &= ok
        fits = np.flatnonzero(fit)
        out.n_fits += len(fits)
        # once a fitting best is known, the kept rows (the fitting ones, in flat order) are
        # all that can beat it: read off what is written below
        from_kept = not keep_all and out.best is not None and out.best[0] <= limit
        if not from_kept:  # pruned: only a fitting best counts (evaluate reruns if none fits)
            _best(out, alloc, ok, fits, cell, pw, pipeline, per_step, n_rc, limit, total, prune)
        local = fits if not keep_all else np.flatnonzero(ok) if ok is not None else \
            np.arange(alloc.size)
        if not len(local):
            continue
        row = local // n_brc  # division by a scalar (numpy's libdivide): ~4x np.divmod's time
        s = pipeline.take(pw, axis=0)
        s.reshape(len(cell), n_b, n_rc)[...] += per_step.take(cell, axis=0)[:, :, None]
        to = sink.rows(len(local))  # written in place: no per-chunk arrays to join later
        # flat = cell[row]·B·RC + col = local + (cell[row] − row)·B·RC: no column array
        np.add(local, ((cell - np.arange(len(cell))) * n_brc).take(row), out=to["flat"])
        np.take(alloc.reshape(-1), local, out=to["peak_bytes"], mode="wrap")  # unbuffered
        total(to["peak_bytes"], out=to["peak_bytes"])
        np.take(s.reshape(-1), local, out=to["seconds"], mode="wrap")
        out.n_rows += len(local)
        if from_kept:
            i = int(np.argmin(to["peak_bytes"]))  # the first of equal peaks: flat order
            if to["peak_bytes"][i] < out.best[0]:
                out.best = (int(to["peak_bytes"][i]), int(to["flat"][i]),
                            float(to["seconds"][i]))
        for k, v in (parts or {}).items():
            out.parts[k].append(np.asarray(v[p, w, z]).reshape(len(cell), -1)[row, local % n_brc])
    return out


def _best(out: Kept, alloc, ok, fits, cell, pw, pipeline, per_step, n_rc, limit, total,
          fitting_only: bool = False):
    """Track the smallest valid peak and its step time; on ties the first in flat order.
    Once a fitting one is known, only fitting ones can beat it. fitting_only: over-capacity
    peaks are not tracked (a pruned search: `evaluate` searches again unpruned if none fits)."""
    if fitting_only or (out.best is not None and out.best[0] <= limit):
        if not len(fits):
            return
        i = int(fits[np.argmin(alloc.reshape(-1).take(fits))])
    else:
        i = int(np.argmin(alloc if ok is None else np.where(ok, alloc, NEVER)))
        if ok is not None and not ok.flat[i]:
            return
    low = int(total(alloc.flat[i]))
    if out.best is not None and low >= out.best[0]:
        return
    k, col = divmod(i, alloc.shape[1])
    sec = pipeline[pw[k], col] + per_step[cell[k], col // n_rc]
    out.best = (low, int(cell[k]) * alloc.shape[1] + col, float(sec))
