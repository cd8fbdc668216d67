"""The vectorised evaluator: per-rank peak of every configuration, byte for byte the ledger's.

For one block — a (world, pp, tp, cp, dp) with its widths (ep, etp) and all its pipeline shapes —
the arrays of `coeffs` and `ranks` are combined with numpy over
[candidate rank, width, ZeRO stage, micro-batch size, recompute mode] exactly as
`ledger.build_rank` assembles a rank:
    peak_alloc = static + max(activations + communication + largest transient, step temporaries)
    peak_total = peak_alloc + ceil(peak_alloc · slack% / 100) + CUDA context
`combine` gives each candidate rank's pieces; `cells.assemble` takes the most loaded rank of
each pipeline shape cell by cell, skips the cells whose static rows alone are over the limit
(exact; planner/sweep/cells.py says why) and writes out only what is kept. m (micro-batches per step)
= global batch / (dp · b). Keep that assembly in step with `ledger.build_rank`; the equality
test compares every piece's sum with `build_ledger` on thousands of random configurations, and
tests/test_planner_prune.py the pruned search with the unpruned one.
"""
from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

import numpy as np

from memledger.planner.memory.acts import act_arrays_by_cp
from memledger.planner.sweep.blocks import SCHEDULE_CODES, Block, Evaluated
from memledger.planner.memory.bwdset import dense_only, layer_backward
from memledger.planner.sweep.cells import GridPeaks, RankTerms, assemble, compiled, spread_table
from memledger.planner.memory.coeffs import block_arrays, static_tables
from memledger.planner.sweep.lane import Lane
from memledger.planner.memory.lifetimes import on_demand_alloc
from memledger.planner.memory.ranks import pipe_tables, rank_held
from memledger.planner.sweep.sink import Sink, n_configurations
from memledger.planner.question.space import Group, Space, divisors, framework_runs
from memledger.planner.question.spec import PLAN_RECOMPUTE, PlanSpec
from memledger.planner.time.timing import block_seconds, pipe_flops
from memledger.specs.loop import built_model, resolve_loop
from memledger.units import ceil_div

# a block goes to the assembly lane (`lane`) when the compiled pass assembles it — its kernel
# runs without the GIL — and it has this many configurations; smaller ones, and numpy's
# assembly (which holds the GIL between its array operations), gain less than the threads
# cost (benchmarks/ab/bench_lanes_ab.py; docs/planner-speed.md, Round 7)
LANE_MIN = 100_000


def micro_batch_sizes(spec: PlanSpec, dp: int) -> np.ndarray:
    c = spec.constraints
    per_replica = spec.global_batch // dp
    out = [b for b in divisors(per_replica) if c.allows("micro_batch", b)
           and (c.max_micro_batch is None or b <= c.max_micro_batch)]
    return np.array(out, dtype=np.int64)


def _axes(spec: PlanSpec):
    c, fw = spec.constraints, spec.fw
    zs = [z for z in range(4) if c.allows("zero", z) and z in fw.zero_stages]
    rcs = [r for r in PLAN_RECOMPUTE if c.allows("recompute", r) and r in fw.recompute]
    return zs, rcs


def combine(S, CZ, STEP, const, ba, lD, lM, fmb, lml, n_moe, seg, rcs, rt, n_dense=None,
            units=None, life=None) -> RankTerms | GridPeaks:
    """The per-rank pieces of the peak, [R, ...] (`cells.RankTerms`; `cells.assemble` takes the
    max over each pipeline shape's ranks and adds the slack and context).

    Inputs are [W, R, ...] (widths × candidate ranks) and [R, B] (ranks × micro-batch sizes).
    `life`: on-demand gradients (planner.memory.lifetimes): every configuration's peak_total at once
    (`cells.GridPeaks`), else the persistent closed form, where `units` (FSDP layer-unit
    buffers) discount the loss-side transients as
    memledger.ledger.runtime / timeline_shape.transient_classes do."""
    if life is not None:
        fixed = (CZ + const[:, None, None]).transpose(1, 0, 2)
        alloc = on_demand_alloc(S.transpose(1, 0, 2), fixed, STEP.transpose(1, 0, 2), ba, lD, lM,
                                fmb, lml, n_dense, n_moe, rcs, life)
        alloc = np.maximum.reduceat(alloc, seg, axis=0)
        return GridPeaks(alloc + ceil_div(alloc * rt.allocator_slack_pct, 100)
                         + rt.cuda_context_bytes)
    has_d, has_m, last_t = lD > 0, lM > 0, lml > 0  # [R, B]
    fixed = (CZ + const[:, None, None]).transpose(1, 0, 2)  # [R, W, Z] comm that is not per-b
    static, step = S.transpose(1, 0, 2), STEP.transpose(1, 0, 2)
    # per (rank, b): first/last-stage tensors, pipeline buffers, the logits transient
    base = fmb * ba.first + lml * ba.last + ba.pp_buf
    logits = np.maximum(last_t * ba.logits, last_t * ba.logits_fwd)  # backward vs forward set
    a2a = (n_moe > 0)[:, None, None] * ba.a2a[None]  # [R, W, B]
    # widths of one etp share every activation row (planner.memory.acts is per etp): the terms are
    # built once per etp (E) and spread to the widths, where the all-to-all (per ep) joins
    _, first, spread = np.unique(ba.etp_row, return_index=True, return_inverse=True)
    keep = {k: v[first][None] for k, v in ba.keep.items()}  # [1, E, B]
    full = {k: v[first] for k, v in ba.full.items()}  # [E, B]
    parts, phases = [], []
    for rc in rcs:
        if rc == "full":
            act = ((lD + lM) * ba.layer_input)[:, None]
            cache_d, cache_m = ba.cast_cache  # amp: the forward's cast cache joins the logits
            fwd = last_t * ba.logits_fwd + (n_dense * cache_d + n_moe * cache_m)[:, None]
            # the recompute set meets the staircase less the last stage's tensors (timeline)
            freed = last_t * (ba.last + ba.autocast[rc][2])
            dense = full["dense"][None] + dense_only(has_d, has_m, ba)
            in_layer = np.maximum(has_d[:, None] * dense,
                                  has_m[:, None] * full["moe"][None]) - freed[:, None]
            at_loss = np.maximum(last_t * ba.logits, fwd)[:, None]
            worst = np.maximum(in_layer, at_loss)
        else:
            act = lD[:, None] * keep["dense", rc] + lM[:, None] * keep["moe", rc]
            at_loss = logits[:, None]  # the layer's backward set: less the last stage's tensors
            in_layer = layer_backward(has_d, has_m, ba, last_t * (ba.last + ba.autocast[rc][2]))
            worst = np.maximum(in_layer, at_loss)
        phases.append((in_layer, at_loss))
        cast_d, cast_m, cast_last = ba.autocast[rc]  # recipe amp's weight casts (else 0)
        parts.append(act + worst + (base + lD * cast_d + lM * cast_m + lml * cast_last)[:, None])
    # stacked per etp (small), spread to the widths in one take, the per-width all-to-all
    # added in place (integers: any order): [R, W, B, RC] (cells.spread_table)
    u = units is not None and units.any()
    table, fwd_bwd = spread_table(np.stack(np.broadcast_arrays(*parts), -1), spread,
                                  int(units.any(axis=(0, 1)).sum()) if u else 0)
    if a2a.any():
        fwd_bwd += a2a[..., None]
    # peak_alloc = static + max(fwd_bwd + fixed, step) = max(fwd_bwd + static+fixed, static+step)
    # runtime.transient_at_peak: loss-side transients run while no FSDP unit is gathered
    # (cells.RankTerms applies the discount where a unit is held)
    phases = [tuple(a[:, spread] if a.shape[1] == len(first) else a for a in ph)
              for ph in phases] if u else None
    return RankTerms(fwd_bwd, static + fixed, static + step,
                     units.transpose(1, 0, 2) if u else None, phases, table=table)


def evaluate(spec: PlanSpec, space: Space, keep_all: bool = False,
             parts: bool = False, tick=None, prune: bool = True) -> Evaluated:
    """Evaluate every configuration of the space; keep those that fit (or all, for tests).
    parts=True also keeps every step-time term (`timing.PARTS`) of the kept configurations.
    tick(n), when given, is told after each block how many configurations it covered (counted
    as `size.n_configurations` counts them); it only observes. prune=False assembles every
    cell, even those the static bound rules out (`cells`: the same answer, slower); when
    nothing fits, the search runs again unpruned for the smallest peak."""
    prune = prune and not keep_all
    out = _evaluate(spec, space, keep_all, parts, tick, prune)
    if prune and not out.n_fits and out.n_evaluated:  # the smallest peak may be in a pruned cell
        out = _evaluate(spec, space, keep_all, parts, None, False)
    return out


def _evaluate(spec, space, keep_all, parts, tick, prune) -> Evaluated:
    out = Evaluated(parts={} if parts else None)
    zs, rcs = _axes(spec)
    if not zs or not rcs:
        return _finish(out)
    tick = tick or (lambda n: None)
    cache = {"etps": sorted({e for g in space.groups for e in g.etp.tolist()}),
             "eps": sorted({e for g in space.groups for e in g.ep.tolist()}),
             "bs": np.unique(np.concatenate([np.zeros(0, np.int64)] + [
                 micro_batch_sizes(spec, dp) for dp in {d for g in space.groups
                                                        for d in g.dp.tolist()}]))}
    cache["sink"] = Sink(n_configurations(space.groups, zs, rcs,
                                          lambda dp: micro_batch_sizes(spec, dp)))
    with Lane() as lane:  # each block assembled on a worker while the next is computed
        for g in space.groups:
            _evaluate_group(spec, g, zs, rcs, keep_all, out, cache, lane, tick, prune)
        lane.drain()
    return _finish(out, cache["sink"])


def _group_ms(spec, g: Group):
    per_dp = {dp: micro_batch_sizes(spec, dp) for dp in np.unique(g.dp).tolist()}
    ms = sorted({spec.global_batch // (dp * b) for dp, bs in per_dp.items() for b in bs.tolist()})
    return per_dp, np.array(ms, dtype=np.int64)


def _evaluate_group(spec, g, zs, rcs, keep_all, out, cache, lane, tick=lambda n: None,
                    prune=False):
    rt, t = spec.runtime, spec.base_train()
    n_pipes = len(g.pipes)
    loop = resolve_loop(rt, t.profile)
    m = built_model(spec.model, loop)
    if loop.on_demand:  # planner.memory.lifetimes: single-stage (1F1B) ranks only
        g = replace(g, pipes=[x for x in g.pipes if x.schedule == "1f1b" and x.vpp == 1])
    per_dp, ms = _group_ms(spec, g)
    if not len(ms) or not g.pipes:
        tick(n_pipes * len(zs) * len(rcs) * sum(len(per_dp[d]) for d in g.dp.tolist()))
        return
    tables = [pipe_tables(m, pipe, ms, rt.pp_engine, rt.zb_w_holds, prune=not loop.on_demand)
              for pipe in g.pipes]
    runs = np.stack([tb.runs for tb in tables]) & framework_runs(spec, g.pipes, g.pp, ms)  # [P, M]
    n_ranks = np.array([len(tb.ranks) for tb in tables])
    seg = np.cumsum(n_ranks) - n_ranks
    cat = {k: np.concatenate([getattr(tb, k) for tb in tables])
           for k in ("n_dense", "n_moe", "l_dense", "l_moe", "first_mb", "last_mb", "n_mb", "last")}
    corners = [c for tb in tables for c in tb.corners]
    bubble = np.stack([tb.bubble for tb in tables])
    pipe_cols = _pipe_columns(g.pipes)
    held_cache: dict = {}
    for tp in np.unique(g.tp).tolist():
        in_tp = np.flatnonzero(g.tp == tp)
        sp = spec.sequence_parallel(tp)
        helds = [h for tb in tables for h in rank_held(m, tb, tp, t, held_cache, loop, sp=sp)]
        cols = lambda a: np.asarray(a)[in_tp][:, None]  # noqa: E731
        stt = static_tables(m, t, rt, helds, (tp, g.pp, cols(g.cp), cols(g.dp), cols(g.ep),
                                              cols(g.etp)), zs, loop.on_demand, sp=sp)
        pf = pipe_flops(m, t, tp, tables, rcs, sp=sp)
        for cp in np.unique(g.cp[in_tp]).tolist():
            sel = in_tp[g.cp[in_tp] == cp]
            rows = np.searchsorted(in_tp, sel)
            dp = int(g.dp[sel[0]])
            bs = per_dp[dp]
            n_block = n_pipes * len(sel) * len(bs) * len(zs) * len(rcs)
            if not len(bs):
                continue
            ms_b = spec.global_batch // (dp * bs)
            mi = np.searchsorted(ms, ms_b)
            ep, etp = g.ep[sel], g.etp[sel]
            if (tp, cp) not in cache:  # every cp of this tp at once (planner.memory.acts)
                cps = [c for c in np.unique(g.cp[in_tp]).tolist() if (tp, c) not in cache]
                for c, aa in act_arrays_by_cp(m, t, rt, tp, cps, cache["etps"], cache["eps"],
                                              cache["bs"], cache, sp=sp).items():
                    cache[tp, c] = aa
            ba = block_arrays(cache[tp, cp], m, t, rt, tp, g.pp, cp, dp, ep, etp, bs, sp=sp)
            t0 = time.perf_counter()
            life = dict(grads={k: v[rows] for k, v in stt.grads.items()}, n_mb=cat["n_mb"][:, mi],
                        m_b=ms_b, last=cat["last"], corners=corners) if loop.on_demand else None
            peaks = combine(stt.static[rows], stt.comm_z[rows], stt.step[rows], ba.const, ba,
                            cat["l_dense"][:, mi], cat["l_moe"][:, mi], cat["first_mb"][:, mi],
                            cat["last_mb"][:, mi], cat["n_moe"], seg, rcs, rt, cat["n_dense"],
                            stt.units_z[rows], life)
            terms = {} if out.parts is not None else None
            secs = block_seconds(spec, pf, bubble[:, mi], tp, cp, dp, ep, etp, bs, ms_b, zs,
                                 stt.grads0[rows], stt.weights0[rows], seg, terms, split=True,
                                 layers=cache)
            block = Block(g.world, g.pp, tp, cp, dp, ep, etp, pipe_cols, np.asarray(zs), bs, ms_b,
                          np.array([PLAN_RECOMPUTE.index(x) for x in rcs]),
                          (len(g.pipes), len(sel), len(zs), len(bs), len(rcs)))
            out.seconds_eval += time.perf_counter() - t0
            work = partial(_assemble_timed, peaks, secs, runs[:, mi], seg, n_ranks, block.shape,
                           spec.limit_bytes, rt, keep_all, prune, cache["sink"], terms)
            lane.submit(work, partial(_report, out, block, tick, n_block),
                        background=n_block >= LANE_MIN and compiled(peaks, keep_all, prune, terms))


def _assemble_timed(*args):
    t0 = time.perf_counter()
    kept = assemble(*args)
    return kept, time.perf_counter() - t0


def _report(out, block, tick, n_block, done) -> None:
    kept, seconds = done
    out.seconds_eval += seconds
    kept.add_to(out, block)
    tick(n_block)


def _pipe_columns(pipes):
    return {"vpp": np.array([p.vpp for p in pipes]),
            "schedule": np.array([SCHEDULE_CODES.index(p.schedule) for p in pipes]),
            "balanced": np.array([p.layout is not None for p in pipes])}


def _finish(out: Evaluated, sink: Sink | None = None) -> Evaluated:
    for k, v in (sink or Sink(0)).result().items():
        setattr(out, k, v)
    if out.parts is not None:
        out.parts = {k: np.concatenate(v) for k, v in out.parts.items()}
    return out
