"""Coefficient arrays of the planner, each computed by the core's own functions.

`static_tables`: for one (world, pp, tp), the static rows, ZeRO-3 buffers, optimizer-step
temporaries (incl. Muon's gather and Newton-Schulz workspace) and unsharded weight / gradient bytes of every candidate rank, over every width
(cp, dp, ep, etp) and ZeRO stage — `static.ROW_FUNCS` evaluated on `VecParallel` arrays for each
(parameter group, instances) pair the ranks hold, then summed per rank
(ranks with the same held list share one column).

`block_arrays`: for one (pp, tp, cp, dp) block, its slice of the activation arrays
(`planner.memory.acts`, shared by every pipeline depth) plus what depends on pp and dp: pipeline
send/recv (`comm.pp_items`) and the per-width NCCL / gradient buffers (`comm.nccl_items`,
`comm.grad_bucket_items`).

Mirrors memledger/ledger/static/rows.py, communication.py and runtime.py; held equal by
tests/test_planner_equality.py::test_vectorised_peak_equals_scalar_ledger_byte_for_byte.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memledger.ledger import communication as comm
from memledger.ledger.fsdp2 import expert_sharding, layer_unit_params, root_unit_params
from memledger.ledger.runtime import step_temporaries
from memledger.ledger.static.rows import ROW_FUNCS, Held
from memledger.ledger.static.sharding import ZERO_SHARDED
from memledger.planner.memory.lifetimes import section_grads
from memledger.planner.memory.vec import VecGroup, VecParallel, VecTrain, quiet
from memledger.specs.loop import resolve_loop


def _vp(tp, pp, cp, dp, ep, etp, zero=0, *, sp: bool) -> VecParallel:
    return VecParallel(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, etp=etp, sp=sp, zero=zero)


def _col(a) -> np.ndarray:
    return np.asarray(a, dtype=np.int64)[:, None]


@dataclass
class StaticTables:
    static: np.ndarray  # [W, R, z] weights + gradients + optimizer
    comm_z: np.ndarray  # [W, R, z] ZeRO-3 gather/reduce-scatter buffers
    step: np.ndarray  # [W, R, z] optimizer-step temporaries
    weights0: np.ndarray  # [W, R] unsharded weights row (time model)
    grads0: np.ndarray  # [W, R] unsharded gradients row (time model)
    units_z: np.ndarray | None = None  # [W, R, z] the FSDP layer-unit part of comm_z
    grads: dict | None = None  # section -> [W, R, z] gradient bytes (planner.memory.lifetimes)


def _pairs(helds):
    """Distinct (group, instances) pairs, and for each held list its pairs' columns."""
    index, entries, starts = {}, [], []
    for held in helds:
        starts.append(len(entries))
        entries += [index.setdefault((h.group, h.instances), len(index)) for h in held]
    return index, np.array(entries, dtype=np.int64), np.array(starts, dtype=np.int64)


def _row_tables(index, widths, t, zs, sp: bool, pad3: str = ""):
    """{(row, zero): [W, pairs]} bytes of every (group, instances) pair; `pad3`: FSDP2's expert
    sharding at ZeRO-3 (ledger.fsdp2.expert_sharding), which gives z = 3 tables of their own."""
    tp, pp, cp, dp, ep, etp = widths
    # groups of one kind (what the row functions branch on) side by side: one call per kind
    # with their counts and shapes as arrays (`vec.VecGroup`), not one per group
    by_kind: dict = {}
    for (g, inst), col in index.items():
        by_kind.setdefault(VecGroup.kind(g), []).append((g, inst, col))
    kinds = [(VecGroup.of([g for g, _, _ in lst]),
              np.array([i for _, i, _ in lst], dtype=np.int64)[None, :], [c for _, _, c in lst])
             for lst in by_kind.values()]
    out = {}
    for row, fn in ROW_FUNCS.items():
        # the stages that shard this row share one table (zero_divisor is 1 or the zero group)
        share = lambda z: (row in ZERO_SHARDED[z], bool(pad3) and z == 3)  # noqa: E731
        for key in {share(z) for z in zs}:
            z = next(z for z in zs if share(z) == key)
            p = _vp(tp, pp, cp, dp, ep, etp, zero=z, sp=sp)
            table = np.zeros((len(cp), len(index)), dtype=np.int64)
            for g, inst, cols in kinds:
                table[:, cols] = fn(Held("", g, inst), p, t, pad3 if z == 3 else "")[0]
            for zz in zs:
                if share(zz) == key:
                    out[row, zz] = table
    return out


def _largest_layer_params(held, p, pad3: str = "") -> np.ndarray:
    """comm_items' ZeRO-3 unit: the largest per-layer parameter count among held sections."""
    per_layer = layer_unit_params(held, p, pad3)
    return np.maximum.reduce([np.broadcast_to(v, (len(p.cp), 1)) for v in per_layer.values()]
                             or [np.zeros((len(p.cp), 1), np.int64)])[:, 0]


def static_tables(m, t, rt, helds, widths, zs, sections: bool = True, *,
                  sp: bool) -> StaticTables:
    """Tables for the held lists `helds` (one per candidate rank) over the widths;
    sections=False leaves out the gradient bytes by section (only on-demand gradients read
    them); `sp`: sequence parallelism at this tp (`PlanSpec.sequence_parallel`)."""
    tp, pp, cp, dp, ep, etp = widths
    by_id: dict = {}  # rank_held hands out one list per signature: key each list once
    of_id = np.array([by_id.setdefault(id(held), len(by_id)) for held in helds], np.int64)
    lists = list({id(held): held for held in helds}.values())  # first-seen order
    keys = [tuple((h.section, h.group, h.instances) for h in held) for held in lists]
    first: dict = {}
    inverse = np.array([first.setdefault(k, len(first)) for k in keys], np.int64)[of_id]
    at: dict = {}
    for held, k in zip(lists, keys):
        at.setdefault(k, held)
    unique = [at[k] for k in first]
    index, entries, starts = _pairs(unique)
    pad3 = expert_sharding(_vp(tp, pp, cp, dp, ep, etp, zero=3, sp=sp), t, rt,
                           resolve_loop(rt, t.profile))
    raw = _row_tables(index, widths, t, sorted({0, *zs}), sp, pad3)  # z = 0: the time model's rows
    summed: dict = {}  # stages that share a table share its sums
    rows = {k: summed[id(v)] if id(v) in summed else summed.setdefault(
        id(v), np.add.reduceat(v[:, entries], starts, axis=1)) for k, v in raw.items()}
    n_w, n_u, n_z = len(cp), len(unique), len(zs)
    static = np.stack([sum(rows[row, z] for row in ROW_FUNCS) for z in zs], -1)
    z0 = 0  # the time model's rows are unsharded, whichever stages are searched
    comm_z, step = np.zeros((n_w, n_u, n_z), np.int64), np.zeros((n_w, n_u, n_z), np.int64)
    units_z = np.zeros((n_w, n_u, n_z), np.int64)
    p3 = _vp(tp, pp, cp, dp, ep, etp, zero=3, sp=sp)
    for j, held in enumerate(unique):
        largest = _largest_layer_params(held, p3, pad3)
        for k, z in enumerate(zs):
            step[:, j, k] = over_widths(lambda p: step_temporaries(held, p, t, rt).bytes,
                                        widths, z, sp=sp)
            if z == 3:
                units = _zero3_bytes(largest, t, rt)
                comm_z[:, j, k] = units + _root_bytes(held, widths, t, rt, sp)
                units_z[:, j, k] = units if rt.zero3_impl == "fsdp" else 0  # runtime.fsdp_unit_bytes
    grads = {k: v[:, inverse] for k, v in section_grads(raw, index, unique, zs).items()} \
        if sections else None
    return StaticTables(static[:, inverse], comm_z[:, inverse], step[:, inverse],
                        rows["weights", z0][:, inverse], rows["gradients", z0][:, inverse],
                        units_z[:, inverse], grads)


def over_widths(fn, widths, zero: int = 0, *, sp: bool) -> np.ndarray:
    """fn(parallel) for every width at once on `VecParallel` arrays (quiet: the core prints
    numbers into its formulas); where the core branches on a per-width value (numpy's "truth
    value of an array is ambiguous"), one width at a time — slower, the same numbers."""
    tp, pp, cp, dp, ep, etp = widths
    n = len(cp)
    try:
        out = fn(_vp(tp, pp, quiet(cp), quiet(dp), quiet(ep), quiet(etp), zero=zero, sp=sp))
        return np.broadcast_to(np.asarray(out, dtype=np.int64), (n, 1))[:, 0].copy()
    except ValueError:
        cols = [np.broadcast_to(a, (n, 1))[:, 0].tolist() for a in (cp, dp, ep, etp)]
        return np.array([fn(_vp(tp, pp, c, d, e, x, zero=zero, sp=sp))
                         for c, d, e, x in zip(*cols)],
                        dtype=np.int64)


def _zero3_bytes(largest: np.ndarray, t, rt) -> np.ndarray:
    values, inverse = np.unique(largest, return_inverse=True)
    per = [sum(i.bytes for i in comm.zero3_items(int(v), None, t, rt)) for v in values]
    return np.array(per, dtype=np.int64)[inverse]


def _root_bytes(held, widths, t, rt, sp: bool) -> np.ndarray:
    """comm_items' FSDP root unit (embedding, final norm, head unsharded), per width."""
    return over_widths(lambda p: sum(i.bytes for i in comm.fsdp_root_items(
        root_unit_params(held, p), t, rt)), widths, 3, sp=sp)


def width_buffers(t, rt, tp, pp, cp, dp, ep, etp, sp: bool) -> np.ndarray:
    """Gradient buckets + NCCL channel buffers per width. The core's functions branch on sizes
    (scalar calls), and their bytes read a width only through which communicators have more
    than one rank (`comm.communicators`: NCCL buffers per communicator; gradient buckets: dp·cp
    > 1): one scalar call per distinct pattern, on its first width, stands for the widths that
    share it (tests/test_planner_fixed_costs.py compares every width with its own call)."""
    v = _vp(tp, pp, cp, dp, np.asarray(ep), np.asarray(etp), sp=sp)
    flags = (v.tp > 1, v.cp > 1, v.dense_dp > 1, v.pp > 1, v.ep > 1, v.etp > 1,
             (v.ep * v.etp > 1) & (v.expert_dp > 1))
    pattern = sum(np.asarray(f, np.int64) << i for i, f in enumerate(flags))  # one int each
    pattern = np.broadcast_to(pattern, (len(ep),))
    _, first, inverse = np.unique(pattern, return_index=True, return_inverse=True)
    per = [buffer_bytes(_vp(tp, pp, cp, dp, int(ep[i]), int(etp[i]), sp=sp), t, rt)
           for i in first.tolist()]
    return np.array(per, np.int64)[inverse.reshape(-1)]


def buffer_bytes(p, t, rt) -> int:
    """Gradient buckets + NCCL channel buffers of one width (the core's scalar functions)."""
    return sum(it.bytes for it in comm.grad_bucket_items(p, t, rt) + comm.nccl_items(p, rt))


@dataclass
class BlockArrays:
    keep: dict  # (kind, recompute) -> [W, b] kept bytes per layer per micro-batch
    full: dict  # kind -> [W, b] one layer's whole inventory (full-recompute transient)
    layer_input: np.ndarray  # [b]
    first: np.ndarray  # [b] first-stage tensors per micro-batch
    last: np.ndarray  # [b]
    logits: np.ndarray  # [b] largest last-stage transient
    logits_fwd: np.ndarray  # [b] last-stage forward working set
    bwd: np.ndarray  # [b] a dense layer's backward working set
    pp_buf: np.ndarray  # [b]
    a2a: np.ndarray  # [W, b] MoE dispatch + combine (0 where ep = 1)
    const: np.ndarray  # [W] NCCL + gradient buckets
    autocast: dict  # recompute -> (per dense, per MoE layer-micro-batch, per last-stage mb)
    cast_cache: tuple  # (per dense, per MoE layer held) under full recompute
    etp_row: np.ndarray | None = None  # [W] the etp of each width: equal keep / full rows


def block_arrays(aa, m, t, rt, tp, pp, cp, dp, ep, etp, bs, *, sp: bool) -> BlockArrays:
    """The block's slice of `aa` (its etp rows, its micro-batch sizes) plus what depends on
    pp and dp: pipeline send/recv buffers and the per-width NCCL / gradient buffers."""
    ie, ib = np.searchsorted(aa.etps, etp), np.searchsorted(aa.bs, bs)
    pick = lambda a: a[ie][:, ib]  # noqa: E731
    a2a = np.zeros((len(ep), len(bs)), np.int64)
    for e, row in aa.a2a.items():
        a2a[ep == e] = row[ib]
    tv = VecTrain(t, micro_batch=np.asarray(bs, np.int64)[None, :])
    pp_buf = sum((i.bytes for i in comm.pp_items(m, _vp(tp, pp, cp, dp, 1, 1, sp=sp), tv)),
                 np.zeros((1, len(bs)), np.int64))[0]
    return BlockArrays(
        keep={k: pick(v) for k, v in aa.keep.items()}, full={k: pick(v) for k, v in aa.full.items()},
        layer_input=aa.layer_input[ib], first=aa.first[ib], last=aa.last[ib],
        logits=aa.logits[ib], logits_fwd=np.broadcast_to(aa.logits_fwd, aa.logits.shape)[ib],
        bwd=aa.bwd[ib], pp_buf=pp_buf, a2a=a2a, autocast=aa.autocast, cast_cache=aa.cast_cache,
        const=width_buffers(t, rt, tp, pp, cp, dp, np.asarray(ep), np.asarray(etp), sp), etp_row=ie)
