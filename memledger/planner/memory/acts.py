"""Per-micro-batch activation quantities of the planner, from the core's own rules.

For one (tp, cp), over every candidate etp (rows) and micro-batch size b (columns): each layer
kind's bytes kept per layer-micro-batch under recompute none / selective — each tensor's GPU
bytes as `activations.policy` decides them (selective drops the profile's selective classes that have a
producer to re-run) — one layer's whole inventory (the full-recompute transient), the
checkpointed layer input, the first / last stage tensors, the largest last-stage transient, the
MoE all-to-all buffers per ep (`comm.moe_items`), and the autocast weight casts of the `amp`
recipe (`activations.row.autocast_copies`, probed with unit counts: it is linear in them).
Everything is evaluated on `VecTrain` / `VecParallel` arrays; a profile whose inventory branches
on the micro-batch (the `hf` profiles) is evaluated one (etp, b) at a time instead.

Mirrors memledger/ledger/activations/ (held.py, policy.py, row.py, transients.py); held equal by
tests/test_planner_equality.py::test_vectorised_peak_equals_scalar_ledger_byte_for_byte.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from memledger.errors import SpecError
from memledger.ledger import communication as comm
from memledger.ledger.activations import get_profile
from memledger.ledger.activations.held import held_activations
from memledger.ledger.activations.inventory import tensor_bytes
from memledger.ledger.activations.policy import _decision
from memledger.ledger.activations.row import autocast_copies
from memledger.ledger.activations.transients import autocast_cache, dense_backward_bytes
from memledger.ledger.pipeline.placement import probe
from memledger.model.params import layer_kind
from memledger.planner.memory.vec import VecParallel, VecTrain, quiet
from memledger.specs.parallel import ParallelSpec

decision = _decision.__wrapped__  # the storage rule without its cache (arrays are not hashable)
KINDS = ("dense", "moe")


@dataclass
class ActArrays:
    etps: np.ndarray
    bs: np.ndarray
    keep: dict  # (kind, "none" | "selective") -> [etp, b] kept bytes per layer-micro-batch
    full: dict  # kind -> [etp, b] one layer's whole inventory
    layer_input: np.ndarray  # [b] checkpoint kept per layer-micro-batch under full recompute
    first: np.ndarray  # [b] first-stage tensors per micro-batch
    last: np.ndarray  # [b]
    logits: np.ndarray  # [b] largest last-stage backward transient
    logits_fwd: np.ndarray  # [b] last-stage forward working set (logits + their upcast)
    bwd: np.ndarray  # [b] a dense layer's backward working set (transients.layer_backward_set)
    a2a: dict  # ep -> [b] MoE dispatch + combine buffers
    autocast: dict  # recompute -> (per dense, per MoE layer-micro-batch, per last-stage mb)
    cast_cache: tuple  # (per dense, per MoE layer held): amp's cast cache under full recompute


def _vp(tp, cp, etp, sp: bool) -> VecParallel:
    return VecParallel(tp=tp, cp=cp, etp=etp, sp=sp)


def _gpu(x, m, tv, pv, in_layer: bool):
    """GPU bytes of one copy of x as the core's storage rule keeps it."""
    return decision(x, m, tv, pv, in_layer)[3]


def _columns(m, t, tp, cp, etp, b, loss: str = "materialized", *, sp: bool) -> dict:
    """Every quantity for one etp (column vector) and b (row vector) — or arrays of them."""
    prof = get_profile(t.profile)
    pv = _vp(tp, cp, etp, sp)
    out = {}
    for rc in ("none", "selective"):
        tv = VecTrain(t, micro_batch=b, recompute=rc)
        for kind in KINDS:
            tensors = prof.layer(m, kind, tv, pv) if kind == "dense" or m.moe else ()
            out["keep", kind, rc] = sum((_gpu(x, m, tv, pv, True) for x in tensors), 0)
            if rc == "none":
                out["full", kind] = sum((tensor_bytes(x, m, tv, pv) for x in tensors), 0)
    tv = VecTrain(t, micro_batch=b, recompute="none")
    out["layer_input"] = _gpu(prof.layer_input(m, tv, pv), m, tv, pv, False)
    out["first"] = sum((_gpu(x, m, tv, pv, False) for x in prof.first_stage(m, tv, pv)), 0)
    out["last"] = sum((_gpu(x, m, tv, pv, False) for x in prof.last_stage(m, tv, pv)
                       if loss == "materialized" or x.cls != "logits"), 0)  # chunked: no logits
    out["bwd"] = dense_backward_bytes(m, tv, pv) if getattr(prof, "autograd_layers", False) else 0
    out["logits"], out["logits_fwd"] = 0, 0
    for x in prof.transients(m, tv, pv) if loss == "materialized" else ():  # chunked: no logits
        if x.cls == "forward":  # summed into the forward working set (activations.transients)
            out["logits_fwd"] = out["logits_fwd"] + tensor_bytes(x, m, tv, pv)
        else:
            out["logits"] = np.maximum(out["logits"], tensor_bytes(x, m, tv, pv))
    return out


def act_arrays_by_cp(m, t, rt, tp: int, cps, etps, eps, bs,
                     shared: dict | None = None, *, sp: bool) -> dict[int, ActArrays]:
    """cp -> `ActArrays` of (tp, cp) for every cp in `cps`, evaluated as one [cp, etp, b]
    array (cp is a plain factor of the core's formulas, like etp and b: the same numbers as
    one call per cp — tests/test_planner_fixed_costs.py — with one call of the core's
    inventory instead of one per cp); per cp where the inventory branches on it. `shared`: a
    dict kept across one search's calls, where the amp coefficients, which depend on tp alone,
    are computed once per tp; `sp`: sequence parallelism at this tp
    (`PlanSpec.sequence_parallel`)."""
    shared = {} if shared is None else shared
    if ("autocast", tp) not in shared:
        shared["autocast", tp] = (autocast_coefficients(m, t, tp, sp),
                                  cast_cache_coefficients(m, t, tp, sp))
    autocast, cast_cache = shared["autocast", tp]
    cps = np.asarray(cps, np.int64)
    etps, bs = np.asarray(etps, np.int64), np.asarray(bs, np.int64)
    shape = (len(cps), len(etps), len(bs))
    from memledger.specs.loop import resolve_loop
    loss = resolve_loop(rt, t.profile).loss
    try:
        cols = _columns(m, t, tp, cps[:, None, None], etps[None, :, None], bs[None, None, :],
                        loss, sp=sp)
    except (ValueError, TypeError):  # branches on cp (or etp, b): one cp at a time
        per = [_one_cp(m, t, tp, cp, etps, bs, loss, sp) for cp in cps.tolist()]
        cols = {k: np.stack([c[k] for c in per]) for k in per[0]}
    cols = {k: np.broadcast_to(v, shape) for k, v in cols.items()}
    a2a = {e: _a2a(m, t, rt, tp, cps, e, bs, sp) for e in sorted(set(eps) - {1}) if m.moe}
    return {cp: ActArrays(
        etps, bs, keep={(k, rc): cols["keep", k, rc][i] for k in KINDS
                        for rc in ("none", "selective")},
        full={k: cols["full", k][i] for k in KINDS}, layer_input=cols["layer_input"][i, 0],
        first=cols["first"][i, 0], last=cols["last"][i, 0], logits=cols["logits"][i, 0],
        logits_fwd=cols["logits_fwd"][i, 0], bwd=cols["bwd"][i, 0],
        a2a={e: v[i] for e, v in a2a.items()}, autocast=autocast, cast_cache=cast_cache)
        for i, cp in enumerate(cps.tolist())}


def _one_cp(m, t, tp, cp, etps, bs, loss, sp) -> dict:
    """`_columns` of one cp as [etp, b] arrays; one (etp, b) pair at a time where the
    inventory branches on b or etp (the hf profiles)."""
    shape = (len(etps), len(bs))
    try:
        cols = _columns(m, t, tp, cp, etps[:, None], bs[None, :], loss, sp=sp)
        return {k: np.broadcast_to(v, shape) for k, v in cols.items()}
    except (ValueError, TypeError):
        cells = [[_columns(m, t, tp, cp, int(e), int(b), loss, sp=sp) for b in bs] for e in etps]
        return {k: np.array([[c[k] for c in row] for row in cells], np.int64)
                for k in cells[0][0]}


def _a2a(m, t, rt, tp, cps, ep, bs, sp: bool) -> np.ndarray:
    """[cp, b] MoE dispatch + combine buffers (`comm.moe_items`)."""
    shape = (len(cps), len(bs))
    try:  # moe_items prints the rows into its note: quiet arrays
        p = VecParallel(tp=tp, cp=quiet(cps)[:, None], ep=ep, sp=sp)
        tv = VecTrain(t, micro_batch=quiet(bs)[None, :])
        return np.broadcast_to(sum(i.bytes for i in comm.moe_items(m, p, tv, rt)),
                               shape).astype(np.int64)
    except ValueError:  # a sizing rule that branches on the token count (DeepEP)
        return np.array([[sum(i.bytes for i in comm.moe_items(
            m, VecParallel(tp=tp, cp=c, ep=ep, sp=sp), VecTrain(t, micro_batch=int(b)), rt))
            for b in bs] for c in cps.tolist()], np.int64)


def _one_layer(m, kind: str, tp: int, sp: bool) -> ParallelSpec | None:
    """A probe layout whose middle stage (stage 1) is a single layer of `kind`."""
    i = next((i for i in range(m.n_layers) if layer_kind(m, i) == kind), None)
    if i is None:
        return None
    return ParallelSpec(tp=tp, sp=sp, pp=3, layout=(i, 1, m.n_layers - i - 1))


def autocast_coefficients(m, t, tp: int, sp: bool) -> dict:
    """recompute -> bytes of `autocast_copies` per dense layer-micro-batch, per MoE one and per
    last-stage micro-batch: the core's function on a layout whose middle stage is one layer of
    the kind, with one micro-batch in flight (and on the last stage alone)."""
    out = {}
    for rc in ("none", "selective", "full"):
        tr = replace(t, recompute=rc)
        per = []
        for kind in KINDS:
            p = _one_layer(m, kind, tp, sp)
            one, two = (0, 0) if p is None else (
                _bytes(autocast_copies(held_activations(m, p, tr, probe(m, p, ((1, n),)))))
                for n in (1, 2))
            if two != 2 * one:
                raise SpecError("precision", f"the planner assumes autocast casts scale with "
                                             f"the copies in flight ({one} vs {two})")
            per.append(one)
        p = ParallelSpec(tp=tp, sp=sp)
        per.append(_bytes(autocast_copies(held_activations(m, p, tr, probe(m, p, (), last=1)))))
        out[rc] = tuple(per)
    return out


def cast_cache_coefficients(m, t, tp: int, sp: bool) -> tuple:
    """Bytes of `activations.transients.autocast_cache` per dense and per MoE layer held, under full
    recompute (the only recompute mode the planner searches that has one)."""
    tr = replace(t, recompute="full")
    probes = ((kind, _one_layer(m, kind, tp, sp)) for kind in KINDS)
    return tuple(0 if p is None else
                 _bytes(autocast_cache(held_activations(m, p, tr, probe(m, p, ((1, 1),)))))
                 for _, p in probes)


def _bytes(item) -> int:
    return item.bytes if item is not None else 0
