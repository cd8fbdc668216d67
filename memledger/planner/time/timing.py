"""Step-time arrays for the planner's blocks: `memledger.costs.stepmodel` (which documents every
term, docs/step-time.md its sources) evaluated over widths × pipeline shapes × ZeRO ×
micro-batch × recompute. Per-layer times are [W, B] arrays (widths × micro-batch sizes), per
rank [all ranks, W, B, RC], the slowest rank of each pipeline shape a segmented max; the
per-step terms (DP sync, ZeRO-3 gathers, optimizer) add the ZeRO axis; gradient accumulation
is per (pipe, width, micro-batch size).
For speed (docs/planner-speed.md): the per-layer terms are computed once per (tp, cp) over every
micro-batch size and width of the search (`_layers_from`; element-wise, so bit for bit), and
a rank's micro-batch is summed with the terms that do not depend on the width first
(`StepTerms`): equal to the term-by-term sum (`_rank_parts`, which the breakdown still reads)
to rounding (≤ 1e-15 relative measured), with the same order of every configuration
(tests/test_planner_timing_fast.py). The search gets the pieces (`block_seconds(split=True)`)
and adds them only for what it keeps; the compiled pass does so per configuration.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from memledger.costs import stepmodel as sm
from memledger.costs import steptime as st
from memledger.costs.overlap import framework
from memledger.ledger.activations import get_profile
from memledger.model.params import padded_vocab
from memledger.planner.memory.segmax import segment_max
from memledger.planner.memory.vec import VecParallel

PARTS = sm.PARTS


@dataclass
class PipeFlops:
    """Per rank of every pipe (concatenated, `seg` starts): layers run per micro-batch."""

    dense: np.ndarray
    moe: np.ndarray
    last: np.ndarray
    chunks: np.ndarray  # stage boundaries a micro-batch crosses on the rank (send/recv)
    dualpipe: np.ndarray  # per rank: its pipe runs DualPipe
    seg: np.ndarray
    sel: tuple  # selective recompute FLOPs per token (dense, moe)
    rcs: tuple
    vocab: int
    pp: int  # pipeline stages of the group (every table shares it)


def pipe_flops(m, t, tp: int, tables, rcs, *, sp: bool) -> PipeFlops:
    prof = get_profile(t.profile)
    p = VecParallel(tp=tp, sp=sp)
    sel = tuple(st.selective_flops_per_token(m, prof.layer(m, k, t, p), prof.selective)
                if (k == "dense" or m.moe) else 0 for k in ("dense", "moe"))
    dense, moe, last, chunks, dual = [], [], [], [], []
    for tb in tables:
        pipe = tb.pipe
        visits = 0.5 if pipe.schedule == "dualpipe" else 1.0
        # ranks with the same layers run the same time: the slowest of a pipe is the slowest
        # of its distinct rows (exact; most stages hold the same layers)
        sig = np.unique(np.stack([tb.all_dense, tb.all_moe, tb.all_last], 1), axis=0)
        dense.append(visits * sig[:, 0])
        moe.append(visits * sig[:, 1])
        last.append(visits * sig[:, 2])
        n_chunks = 0 if pipe.pp == 1 else (2 if pipe.schedule == "dualpipe" else pipe.vpp)
        chunks.append(np.full(len(sig), n_chunks, np.float64))
        dual.append(np.full(len(sig), pipe.schedule == "dualpipe"))
    seg = np.cumsum([0] + [len(x) for x in dense[:-1]])
    vocab = padded_vocab(m, tp, t.pad_multiple()) if m.vocab else 0
    cat = np.concatenate
    return PipeFlops(cat(dense), cat(moe), cat(last), cat(chunks), cat(dual), seg, sel,
                     tuple(rcs), vocab, tables[0].pipe.pp)


def _layers(su, pf: PipeFlops, tokens, ep, etp):
    """Per-layer forward compute and per-micro-batch communication, [W, B] or [B]."""
    d = sm.layer_forward(su, "dense", tokens)
    f_d = d["gemm"] + d["attn"] + d["elem"]
    tp_l, cp_l = sm.tp_seconds(su, tokens), sm.cp_seconds(su, tokens, d["attn"])
    out = {"f_d": f_d, "f_m": 0.0, "tp": tp_l, "cp": cp_l, "ep": 0.0, "ep_dual": 0.0,
           "head": sm.head_forward(su, tokens, pf.vocab) if pf.vocab else 0.0}
    rate_attn = lambda flops: sm.gemm.attention_seconds(su.hw, flops, tokens)  # noqa: E731
    sel_d = rate_attn(pf.sel[0] * tokens / su.tp)
    rec = {"none": (0.0, 0.0), "selective": (sel_d, 0.0), "full": (f_d + tp_l / 2, 0.0)}
    if su.m.moe is not None:
        mo = sm.layer_forward(su, "moe", tokens, ep, etp)
        f_m = mo["gemm"] + mo["attn"] + mo["elem"]
        a2a, etp_s = sm.ep_seconds(su, tokens, ep, etp)
        hidden = 3 * f_m if su.fw.dualpipe_hides_ep else 0.0
        out |= {"f_m": f_m, "ep": a2a + etp_s, "ep_dual": np.maximum(a2a + etp_s - hidden, 0)}
        rec = {"none": (0.0, 0.0), "selective": (sel_d, rate_attn(pf.sel[1] * tokens / su.tp)),
               "full": (f_d + tp_l / 2, f_m + tp_l / 2)}
    out["rec"] = rec
    return out


def _layers_from(cache: dict, su, pf: PipeFlops, seq: int, bs, ep, etp):
    """`_layers` of one block taken from one evaluation per (tp, cp) over every micro-batch
    size (cache["bs"]) and every (ep, etp) pair (cache["eps"] × cache["etps"]) of the search:
    the terms are element-wise in tokens and widths, so the numbers are the same, and the
    blocks of other pipeline depths (and data-parallel sizes) reuse them. Nothing in
    `_layers` reads pp, dp or the pipeline shapes (pf gives the vocabulary and the selective
    recompute FLOPs, both fixed by tp)."""
    eps, etps, all_bs = (np.asarray(cache[k]) for k in ("eps", "etps", "bs"))
    key = ("layers", su.tp, su.cp)
    if key not in cache:
        e, t = (x.reshape(-1, 1) for x in np.meshgrid(eps, etps, indexing="ij"))
        cache[key] = _layers(su, pf, all_bs.astype(np.float64) * seq / su.cp, e, t)
    bi = np.searchsorted(all_bs, bs)
    wi = np.searchsorted(eps, ep) * len(etps) + np.searchsorted(etps, etp)
    take = lambda v: v if np.ndim(v) == 0 else v[bi] if np.ndim(v) == 1 else \
        v[wi[:, None], bi]  # noqa: E731
    out = {k: take(v) for k, v in cache[key].items() if k != "rec"}
    out["rec"] = {rc: tuple(map(take, v)) for rc, v in cache[key]["rec"].items()}
    return out


def _rank_parts(pf: PipeFlops, L, p2p):
    """Per-micro-batch parts of every rank: [R, W, B] (recompute: one per mode)."""
    d, mo, last = (x[:, None, None] for x in (pf.dense, pf.moe, pf.last))
    ep = np.where(pf.dualpipe[:, None, None], L["ep_dual"], L["ep"])
    rec = [d * L["rec"][rc][0] + mo * L["rec"][rc][1] for rc in pf.rcs]
    return {"compute": 3 * (d * L["f_d"] + mo * L["f_m"] + last * L["head"]),
            "recompute": rec, "tp": (d + mo) * L["tp"], "cp": (d + mo) * L["cp"],
            "ep": mo * ep, "pp_p2p": p2p[:, None, :]}


@dataclass(kw_only=True)
class StepTerms:
    """A block's step time in pieces: seconds[p, w, z, b, rc] = pipeline[p, w, b, rc] +
    per_step[p, w, z, b] (`arrays()`; the compiled pass, planner/sweep/fused.py, evaluates the same
    operations per kept configuration instead).
    The slowest rank's micro-batch is, per pass k (k = 0: its compute alone; k = 1 + i:
    recompute mode i), the max over the pipe's ranks r of
        mo[r] · g[k, w, b] + fixed[k, r, b]      (g_dual for DualPipe ranks)
    — the MoE layers' time per width as one product, every width-free term (dense layers,
    head, TP, CP, send/recv, dense recompute) in `fixed`; equal to `_rank_parts`' sum up to
    rounding, in the same order (tests/test_planner_timing_fast.py). pipeline = that ×
    scale[p, b] (micro-batches ÷ (1 − bubble)); per_step = the data-parallel terms
    (`stepmodel.DPTerms`, hidden by the compute pass) + the optimizer + the gradient
    accumulation."""

    mo: np.ndarray  # [R] MoE layers a micro-batch runs on the rank
    dual: np.ndarray  # [R] bool
    g: np.ndarray  # [1 + RC, W, B]
    g_dual: np.ndarray  # [1 + RC, W, B]
    fixed: np.ndarray  # [1 + RC, R, B]
    seg: np.ndarray  # [P] each pipe's first rank
    n_ranks: np.ndarray  # [P]
    scale: np.ndarray  # [P, B]
    dp: sm.DPTerms  # x, y: [Z, P, W]
    opt: np.ndarray  # [P, W, Z]
    acc: np.ndarray  # [P, W, B] gradient accumulation per step
    m: np.ndarray  # [B] micro-batches per step

    def passes(self):
        """[1 + RC, P, W, B]: each pass's slowest rank (k = 0 the compute, then per mode)."""
        n_r, (n_k, n_w, n_b) = len(self.mo), self.g.shape
        mo, dual = self.mo[:, None, None], np.flatnonzero(self.dual)
        buf = np.empty((n_r, n_w, n_b))
        out = np.empty((n_k, len(self.seg), n_w, n_b))
        for k in range(n_k):
            np.multiply(mo, self.g[k], out=buf)
            if len(dual):
                buf[dual] = mo[dual] * self.g_dual[k]
            out[k] = segment_max(np.add(buf, self.fixed[k][:, None, :], out=buf), self.seg)
        return out

    def exposed_dp(self, comp):
        """[Z, P, W, B] each ZeRO stage's exposed data-parallel seconds, hidden by the compute
        pass `comp` [P, W, B] (its backward 2/3, its forward 1/3)."""
        window, fwd = (2.0 / 3.0) * comp, comp / 3
        d = replace(self.dp, x=self.dp.x[..., None], y=self.dp.y[..., None])  # [Z, P, W, 1]
        out = np.empty((len(d.hide),) + comp.shape)
        for k in range(len(d.hide)):  # a stage hidden by nothing, once a step: [P, W, 1]
            out[k] = sm.exposed_seconds(d, k, self.m, window, fwd)
        return out

    def arrays(self):
        """(pipeline [P, W, B, RC], per_step [P, W, Z, B]) in seconds."""
        per = self.passes()
        comp, pipeline = per[0], np.moveaxis(per[1:], 0, -1)
        pipeline *= self.scale[:, None, :, None]
        exposed = self.exposed_dp(comp)
        per_step = np.empty(comp.shape[:2] + (len(exposed), comp.shape[2]))
        for k in range(len(exposed)):
            per_step[:, :, k] = exposed[k] + self.opt[:, :, k, None] + self.acc
        return pipeline, per_step


def step_terms(pf: PipeFlops, L, p2p, scale, dp: sm.DPTerms, opt, acc, m_b,
               n_w: int) -> StepTerms:
    """The pieces of `StepTerms` from a block's per-layer terms (`_layers`) and send/recv."""
    d, mo, last = (x[:, None] for x in (pf.dense, pf.moe, pf.last))
    own = 3 * (d * L["f_d"] + last * L["head"])  # [R, B]
    fixed = own + (d + mo) * (L["tp"] + L["cp"]) + p2p
    moe3 = 3 * np.asarray(L["f_m"], np.float64)
    n_b = np.shape(p2p)[-1]
    g, g_dual, fx = [moe3], [moe3], [own]
    for rc in pf.rcs:
        rec_d, rec_m = L["rec"][rc]
        g.append(moe3 + L["ep"] + rec_m)
        g_dual.append(moe3 + L["ep_dual"] + rec_m)
        fx.append(fixed + d * rec_d)
    full = lambda xs, shape: np.ascontiguousarray(  # noqa: E731
        np.stack([np.broadcast_to(x, shape) for x in xs]), np.float64)
    ends = np.append(pf.seg[1:], len(pf.dense))
    return StepTerms(mo=np.ascontiguousarray(pf.moe, np.float64), dual=pf.dualpipe.astype(bool),
                     g=full(g, (n_w, n_b)), g_dual=full(g_dual, (n_w, n_b)),
                     fixed=full(fx, (len(pf.dense), n_b)), seg=pf.seg.astype(np.int64),
                     n_ranks=(ends - pf.seg).astype(np.int64),
                     scale=np.ascontiguousarray(scale, np.float64), dp=dp,
                     opt=np.ascontiguousarray(opt, np.float64),
                     acc=np.ascontiguousarray(acc, np.float64),
                     m=np.ascontiguousarray(m_b, np.float64))


def block_seconds(spec, pf: PipeFlops, bubble, tp, cp, dp, ep, etp, bs, ms_b, zs,
                  grads0, weights0, seg, parts: dict | None = None, split: bool = False,
                  layers: dict | None = None):
    """[P, W, Z, B, RC] estimated seconds per step. grads0 / weights0: [W, R] unsharded rows of
    the memory-candidate ranks (segments `seg`); bubble: [P, B]. `parts`, when given, receives
    every term per step at the slowest rank (PARTS). split=True returns the pieces instead
    (`StepTerms`): the evaluator adds them only for the configurations it keeps
    (planner.sweep.cells, planner.sweep.fused). `layers`: a cache shared by the blocks of one search
    (`_layers_from`)."""
    t = spec.base_train()
    su = sm.setup(spec.model, spec.hardware, framework(spec.framework), t, tp, cp, dp,
                  spec.node_size, pf.pp)
    tokens = np.asarray(bs, np.float64) * spec.seq / cp
    ep_c, etp_c = np.asarray(ep)[:, None], np.asarray(etp)[:, None]
    L = _layers(su, pf, tokens, ep_c, etp_c) if layers is None else \
        _layers_from(layers, su, pf, spec.seq, bs, ep, etp)
    p2p = sm.p2p_seconds(su, tokens, pf.chunks[:, None])
    m_b = np.asarray(ms_b, np.float64)
    grads = segment_max(grads0.T, seg)  # [P, W]
    weights = segment_max(weights0.T, seg)
    opt = sm.optimizer_seconds(su, t, weights[..., None], np.asarray(zs))  # [P, W, Z]
    acc = sm.accumulation_seconds(su, grads[..., None], m_b)  # [P, W, B]
    terms = step_terms(pf, L, p2p, m_b / (1.0 - bubble), sm.dp_terms(su, grads, weights, zs),
                       opt, acc, m_b, len(ep_c))
    if split and parts is None:
        return terms
    pipeline, step = terms.arrays()
    shape = step.shape + (pipeline.shape[-1],)
    if parts is not None:  # term by term (a breakdown): every rank's parts
        exposed = terms.exposed_dp(terms.passes()[0])  # [Z, P, W, B]; a stage's is its row
        sync, z3 = (np.moveaxis(np.where(mask[:, None, None, None], exposed, 0.0), 0, 2)
                    for mask in (~terms.dp.zero3, terms.dp.zero3))  # [P, W, Z, B]
        rp = _rank_parts(pf, L, p2p)
        per_rank = sum(rp[k] for k in ("compute", "tp", "cp", "ep", "pp_p2p"))  # [R, W, B]
        rp = rp | {"recompute": np.stack(np.broadcast_arrays(*rp["recompute"], per_rank), -1)
                   [..., :-1]}
        t_rank = per_rank[..., None] + rp["recompute"]
        _fill_parts(parts, rp, t_rank, pf.seg, m_b, bubble[:, None, :, None], sync, z3,
                    opt[..., None], acc[:, :, None], shape)
    if split:
        return terms
    total = np.empty(shape)
    for i in range(pipeline.shape[-1]):
        np.add(pipeline[:, :, None, :, i], step, out=total[..., i])
    return total


def _fill_parts(parts, rp, t_rank, seg, m_b, b, sync, z3, opt, acc, shape):
    """Each term per step at the slowest rank of each pipe, broadcast to `shape`."""
    ends = np.append(seg[1:], len(t_rank))
    pick = np.stack([s + np.argmax(t_rank[s:e], axis=0) for s, e in zip(seg, ends)])
    take = lambda a: np.take_along_axis(  # noqa: E731
        np.broadcast_to(a[..., None] if a.ndim == 3 else a, t_rank.shape), pick, axis=0)
    per_mb = {k: take(rp[k]) for k in ("compute", "recompute", "tp", "cp", "ep", "pp_p2p")}
    t_mb = sum(per_mb.values())
    for k, v in per_mb.items():
        parts[k] = np.broadcast_to((m_b[:, None] * v)[:, :, None], shape)
    parts["bubble"] = np.broadcast_to((m_b[:, None] * t_mb * b / (1.0 - b))[:, :, None], shape)
    for k, v in (("dp_sync", sync), ("zero3", z3), ("optimizer", opt), ("grad_accum", acc)):
        parts[k] = np.broadcast_to(np.broadcast_to(v, shape[:4])[..., None], shape)
