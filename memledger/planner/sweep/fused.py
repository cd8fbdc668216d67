"""The planner's hot loop in one compiled pass: a pruned block's peaks, fit test, step times
and kept rows, cell by cell (numba).

`cells.assemble` computes, for every configuration of the cells it keeps after pruning,
    alloc      = max(max over the pipe's ranks r of F[r, w, b, rc] + SF[r, w, z],
                     max over r of SS[r, w, z])          (RankTerms.rows, with the FSDP-unit
                                                          rows already in F's table)
    fits       = alloc ≤ alloc_ceiling and the engine runs that micro-batch count
    peak_total = alloc − ⌊−alloc · slack / 100⌋ + CUDA context
    seconds    = pipeline[p, w, b, rc] + per-step[p, w, z, b]   (`timing.StepTerms.arrays`)
with numpy as a chain of gathers, adds and maxima, each a pass over every configuration of a
chunk (~15 M configurations of live cells in DeepSeek-V3 on 2,048 H100), after the step
times of every configuration of the block. Here each configuration is read and written once,
and the step times are evaluated from their pieces (`StepTerms`: the slowest rank of each
(pipe, width) row, its data-parallel terms and optimizer) only for the rows that keep
something: the same integers, the same float operations in the same order, so the kept rows,
their order, their step times, the counts and the smallest fitting peak are identical to the
numpy path (tests/test_planner_fused.py runs both on every kind of block; docs/planner-speed.md,
Rounds 5 and 8, have the figures).

Used only where it is the whole answer: a ranked block (persistent gradients), pruned, keeping
only what fits, without per-term step-time parts. keep_all (tests), on-demand gradients
(`cells.GridPeaks`), the unpruned rerun and `parts=True` stay on the numpy path.

Loading costs ~0.6–1 s once per process (numba's import ~0.2 s, the dispatcher ~0.2 s, the
cached machine code ~0.2–0.5 s; compiling it the first time on a machine ~1.5 s more): about
what the pass saves on the largest search (~0.5 s on the full DeepSeek-V3 sweep), more than it
saves on any smaller one. So a search uses the pass only once it is loaded (`loaded()`): the
app loads it in the background when the Planner page is first drawn (`warm()`,
views/frame.py), the benchmark before it measures; a one-shot `memledger plan` stays on numpy
and pays nothing. Either way the answer is the same.
"""
from __future__ import annotations

import threading

import numpy as np

_KERNEL = None
_LOCK = threading.Lock()
failure: str | None = None  # why a background load failed (searches then stay on numpy)


def kernel():
    """The compiled kernel, loaded (compiled the first time, then from numba's on-disk cache)
    and run once on a one-cell block, so that the first real call pays nothing more."""
    global _KERNEL, _slowest_row, _per_step_row
    with _LOCK:
        if _KERNEL is None:
            from numba import njit  # here: ~0.2 s of import that only the planner needs
            jit = njit(cache=True, nogil=True)
            # the kernel calls its helpers by their module names: compiled first
            _slowest_row, _per_step_row = jit(_slowest_row), jit(_per_step_row)
            compiled = jit(_assemble_cells)
            compiled(*_one_cell())
            _KERNEL = compiled
    return _KERNEL


def loaded() -> bool:
    """Whether the kernel is ready (searches then use it)."""
    return _KERNEL is not None


def warm() -> threading.Thread:
    """Load the kernel on a daemon thread (the app, at start: its first large search then
    does not pay the load). Should numba be missing or unable to compile on this machine, the
    reason goes to `failure` and every search stays on numpy, which gives the same answer."""
    thread = threading.Thread(target=_load, name="memledger-fused-warm", daemon=True)
    thread.start()
    return thread


def _load() -> None:
    global failure
    try:
        kernel()
    except Exception as exc:  # noqa: BLE001 — any failure leaves the numpy path, same answer
        failure = f"{type(exc).__name__}: {exc}"


def assemble(out, terms, secs, valid, seg, n_ranks, shape, cells, ceiling, runtime, sink,
             chunk: int):
    """`cells.assemble` of a pruned block that keeps only what fits: the same rows, order,
    counts and smallest fitting peak in `out` (`sink.Kept`), one call per `chunk`
    configurations (the sink rows reserved at a time). runtime: (allocator slack %, CUDA
    context bytes, `cells.peak_total`)."""
    n_p, n_w, n_z, n_b, n_rc = shape
    n_brc = n_b * n_rc
    slack, ctx, peak_total = runtime
    f, base, variant = terms._sources()
    dp = secs.dp
    args = (seg, n_ranks, f, base, variant, terms.with_fixed.reshape(-1),
            terms.with_step.reshape(-1), np.repeat(valid, n_rc, axis=1), ceiling, slack, ctx,
            secs.seg, secs.n_ranks, secs.mo, secs.dual, secs.g, secs.g_dual, secs.fixed,
            secs.scale, np.ascontiguousarray(dp.x), np.ascontiguousarray(dp.y), dp.per_mb,
            dp.hide.astype(np.int64), secs.opt, secs.acc, secs.m)
    step, run = max(1, chunk // n_brc), kernel()
    for c0 in range(0, len(cells), step):
        cell = cells[c0:c0 + step]
        to = sink.rows(len(cell) * n_brc)  # room for all; what does not fit is given back
        k, a, i, s = run(cell, n_w, n_z, n_rc, *args, to["flat"], to["peak_bytes"], to["seconds"])
        sink.give_back(len(cell) * n_brc - k)
        out.n_fits += k
        out.n_rows += k
        low = int(peak_total(a, slack, ctx))
        if a >= 0 and (out.best is None or low < out.best[0]):  # strict: the first stays
            out.best = (low, int(i), float(s))
    return out


def _one_cell():
    """Arguments of a one-cell, one-configuration block, typed as the planner's."""
    i, one = np.zeros(1, np.int64), np.ones(1, np.int64)
    table = np.zeros((1, 1), np.int64)
    x1, x2, x3 = np.zeros(1), np.zeros((1, 1)), np.zeros((1, 1, 1))
    return (i, 1, 1, 1, i, one, table, table, i, i, i, np.ones((1, 1), bool), 0, 0, 0,
            i, one, x1, np.zeros(1, bool), x3, x3, x3, x2, x3, x3, np.zeros(1, bool), i, x3,
            x3.copy(), x1, i.copy(), i.copy(), np.zeros(1))


def _assemble_cells(cells, n_w, n_z, n_rc, seg, n_ranks, f, base, variant, sf, ss, valid_rc,
                    ceiling, slack, ctx, t_seg, t_n, mo, dual, g, g_dual, fixed, scale,
                    dp_x, dp_y, per_mb, hide, opt, acc, m, o_flat, o_peak, o_sec):
    """Write the fitting configurations of `cells` (ascending) to o_*; return (rows written,
    smallest fitting alloc or -1, its flat index, its seconds). Memory arguments as in
    `cells.assemble` / `RankTerms._sources`; t_seg … m: `timing.StepTerms` (its pipes' ranks,
    passes, scale, `stepmodel.DPTerms` as [Z, P, W], optimizer [P, W, Z], gradient
    accumulation [P, W, B], micro-batches),
    evaluated here only for the (pipe, width) rows that keep something, with
    `StepTerms.arrays`' operations in its order (so the same floats)."""
    n_brc = f.shape[1]
    n_b = n_brc // n_rc
    k = 0
    best_a, best_i, best_s = -1, -1, 0.0
    alloc = np.empty(n_brc, np.int64)
    passes = np.empty((g.shape[0], n_b))  # the current (pipe, width) row's slowest ranks
    per_step = np.empty(n_b)
    row_pw, step_cell = -1, -1
    for ci in range(cells.shape[0]):
        cell = cells[ci]
        pw, z = cell // n_z, cell % n_z
        p, w = pw // n_w, pw % n_w
        floor = ss[(seg[p] * n_w + w) * n_z + z]
        for j in range(n_ranks[p]):
            r = seg[p] + j
            rwz = (r * n_w + w) * n_z + z
            row, add = base[variant[z], r] + w, sf[rwz]
            floor = max(floor, ss[rwz])
            for c in range(n_brc):
                x = f[row, c] + add
                if j == 0 or x > alloc[c]:
                    alloc[c] = x
        for c in range(n_brc):
            a = max(alloc[c], floor)
            if a > ceiling or not valid_rc[p, c]:
                continue
            if row_pw != pw:
                _slowest_row(passes, p, w, t_seg, t_n, mo, dual, g, g_dual, fixed)
                row_pw = pw
            if step_cell != cell:
                _per_step_row(per_step, passes[0], p, w, z, dp_x, dp_y, per_mb, hide, opt, acc,
                              m)
                step_cell = cell
            b = c // n_rc
            s = passes[1 + c % n_rc, b] * scale[p, b] + per_step[b]
            o_flat[k] = cell * n_brc + c
            o_peak[k] = a - (-a * slack) // 100 + ctx
            o_sec[k] = s
            if best_a < 0 or a < best_a:  # strict: the first of equal peaks in flat order
                best_a, best_i, best_s = a, cell * n_brc + c, s
            k += 1
    return k, best_a, best_i, best_s


def _slowest_row(out, p, w, t_seg, t_n, mo, dual, g, g_dual, fixed):
    """out[k, b] = max over pipe p's ranks r of mo[r] · g[k, w, b] + fixed[k, r, b]."""
    for j in range(t_n[p]):
        r = t_seg[p] + j
        gg = g_dual if dual[r] else g
        for k in range(g.shape[0]):
            for b in range(g.shape[2]):
                x = mo[r] * gg[k, w, b] + fixed[k, r, b]
                if j == 0 or x > out[k, b]:
                    out[k, b] = x


def _per_step_row(out, comp, p, w, z, dp_x, dp_y, per_mb, hide, opt, acc, m):
    """out[b]: stage z's exposed data-parallel seconds (`stepmodel.exposed_seconds`), hidden
    by the compute pass `comp` of the row, + the optimizer + the gradient accumulation."""
    for b in range(out.shape[0]):
        h = 0.0
        if hide[z] == 1:
            h = (2.0 / 3.0) * comp[b]
        elif hide[z] == 2:
            h = comp[b] / 3
        v = max(dp_x[z, p, w] - h, 0.0)
        if per_mb[z]:
            v = m[b] * v
        out[b] = ((v + max(dp_y[z, p, w] - h, 0.0)) + opt[p, w, z]) + acc[p, w, b]
