"""Step-time arrays for the planner's blocks: `memledger.costs.steptime` (which documents the model and
what it ignores) evaluated over widths × pipeline shapes × ZeRO × micro-batch × recompute."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memledger.costs import steptime as st
from memledger.ledger.activations import get_profile
from memledger.model.flops import head_forward_flops_per_token, layer_forward_flops_per_token
from memledger.model.params import padded_vocab
from memledger.planner.vec import VecParallel
from memledger.units import format_bytes


@dataclass
class PipeFlops:
    stage: np.ndarray  # [P, RC] slowest rank's FLOPs per token, before ÷ tp·cp
    rank_dense: np.ndarray  # [all ranks of all pipes] dense layers run per micro-batch
    rank_moe: np.ndarray
    seg: np.ndarray  # start of each pipe in the rank arrays


def pipe_flops(m, t, tp: int, tables, rcs) -> PipeFlops:
    seq = t.seq
    f_d = layer_forward_flops_per_token(m, "dense", seq)
    f_m = layer_forward_flops_per_token(m, "moe", seq) if m.moe else 0
    f_h = head_forward_flops_per_token(m, padded_vocab(m, tp, t.pad_multiple())) if m.vocab else 0
    prof = get_profile(t.profile)
    p = VecParallel(tp=tp, sp=tp > 1)
    sel = [st.selective_flops_per_token(m, prof.layer(m, k, t, p), prof.selective)
           if (k == "dense" or m.moe) else 0 for k in ("dense", "moe")]
    rec = {"none": (0, 0), "selective": tuple(sel), "full": (f_d, f_m)}
    stage, dense, moe = [], [], []
    for tb in tables:
        visits = 0.5 if tb.pipe.schedule == "dualpipe" else 1.0
        d, mo = visits * tb.all_dense, visits * tb.all_moe
        fwd = d * f_d + mo * f_m + tb.all_last * f_h
        stage.append([st.stage_flops_per_token(fwd, d * rec[rc][0] + mo * rec[rc][1]) for rc in rcs])
        dense.append(d)
        moe.append(mo)
    seg = np.cumsum([0] + [len(x) for x in dense[:-1]])
    return PipeFlops(np.array(stage, np.float64), np.concatenate(dense), np.concatenate(moe), seg)


def block_seconds(spec, pf: PipeFlops, bubble, tp, cp, dp, ep, etp, bs, ms_b, zs,
                  grads0, weights0, seg) -> np.ndarray:
    """[P, W, Z, B, RC] estimated seconds per step. grads0 / weights0: [W, R] unsharded rows of
    the memory-candidate ranks (segments `seg`); bubble: [P, B]."""
    hw, m, gpn = spec.hardware, spec.model, spec.node_size
    rate = hw.bf16_flops * spec.mfu_pct / 100
    act = format_bytes(spec.base_train().recipe.act_fmt, 1)
    tokens = np.asarray(bs, np.float64) * spec.seq / cp  # on the rank, per micro-batch
    compute = pf.stage[:, None, None, None, :] * (tokens / tp)[:, None] / rate  # [P,1,1,B,RC]
    per_dense = (st.tp_bytes_per_layer(m, tokens, tp, act) / st.link_bw(hw, tp, gpn)
                 + st.cp_bytes_per_layer(m, tokens, tp, cp, act) / st.link_bw(hw, tp * cp, gpn))
    ep_col, etp_col = np.asarray(ep)[:, None], np.asarray(etp)[:, None]
    per_moe = (per_dense + st.ep_bytes_per_moe_layer(m, tokens, tp, ep_col, act)
               / st.link_bw(hw, ep_col * etp_col, gpn)
               + st.etp_bytes_per_moe_layer(m, tokens, tp, etp_col, act)
               / st.link_bw(hw, etp_col, gpn))
    layer = (pf.rank_dense[:, None, None] * per_dense[None, None, :]
             + pf.rank_moe[:, None, None] * per_moe[None])  # [all ranks, W, B]
    comm = np.maximum.reduceat(layer, pf.seg, axis=0)[:, :, None, :, None]
    grads = np.maximum.reduceat(grads0.T, seg, axis=0)[:, :, None, None]  # [P, W, 1, 1]
    weights = np.maximum.reduceat(weights0.T, seg, axis=0)[:, :, None, None]
    sync = st.dp_sync_seconds(grads, weights, dp * cp, np.asarray(zs)[:, None],
                              np.asarray(ms_b), st.link_bw(hw, tp * cp * dp, gpn))[..., None]
    return st.step_seconds(compute_s=compute, comm_s=comm, bubble=bubble[:, None, None, :, None],
                           micro_batches=np.asarray(ms_b)[:, None], dp_sync_s=sync)
