"""One configuration's step time, term by term, with plain scalars: the reference the planner's
vectorised arrays (`memledger.planner.time.timing`) are checked against (tests/test_step_equality.py).

The inputs come from the core, not from the planner's tables: every pipeline rank's layers from
`ledger.pipeline.schedules.stage_layers` / `rank_stages`, the last stage's rank, the schedule's
bubble fraction, and the unsharded weight and gradient rows of a ZeRO-0 ledger of the same
layout (the data-parallel terms move unsharded bytes; `stepmodel.dp_seconds`). The terms are
`memledger.costs.stepmodel`'s (docs/step-time.md); the assembly is the one the planner runs:
  t_mb  = max over pipeline ranks of compute + recompute + TP + CP + EP + PP send/recv
  step  = m · t_mb / (1 − bubble) + DP sync + ZeRO-3 traffic + optimizer + gradient accumulation
with the DP window one micro-batch's backward of the rank with the most compute, and each part
reported at the slowest rank (bubble = m · t_mb · b / (1 − b)). A DualPipe rank runs each
micro-batch through one of its two stages (half its layers per micro-batch).
Ignores what the planner ignores (docs/step-time.md).
"""
from __future__ import annotations

from dataclasses import replace

from memledger.costs import gemm
from memledger.costs import stepmodel as sm
from memledger.costs import steptime as st
from memledger.costs.overlap import Framework
from memledger.ledger.activations import get_profile
from memledger.ledger.build import build_ledger
from memledger.ledger.pipeline.schedules import bubble_fraction, last_stage_rank, stage_layers
from memledger.model.params import layer_kind, padded_vocab
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec

PARTS = sm.PARTS


def _rank_layers(m, p: ParallelSpec):
    """(dense, moe, holds the last stage) per pipeline rank, layers run per micro-batch."""
    stages = stage_layers(m, p)
    visits = 0.5 if p.schedule == "dualpipe" else 1.0
    last = last_stage_rank(p)
    out = []
    for r in range(p.pp):
        ids = [i for s in p.rank_stages(r) for i in stages[s]]
        dense = sum(layer_kind(m, i) == "dense" for i in ids)
        out.append((visits * dense, visits * (len(ids) - dense), visits * (r == last)))
    return out


def _selective(m, t: TrainSpec, tp: int) -> tuple[float, float]:
    prof = get_profile(t.profile)
    p = ParallelSpec(tp=tp, sp=tp > 1)
    return tuple(float(st.selective_flops_per_token(m, prof.layer(m, k, t, p), prof.selective))
                 if (k == "dense" or m.moe) else 0.0 for k in ("dense", "moe"))


def _layer_terms(su: sm.Setup, t: TrainSpec, tokens: float, ep: int, etp: int, vocab: int):
    """Per layer per micro-batch: forward compute (dense, MoE), TP, CP, EP (plain and under
    DualPipe), the head, and the recompute of each mode (dense, MoE)."""
    fl = lambda x: float(x)  # noqa: E731
    d = sm.layer_forward(su, "dense", tokens)
    f_d = fl(d["gemm"] + d["attn"] + d["elem"])
    tp_l, cp_l = fl(sm.tp_seconds(su, tokens)), fl(sm.cp_seconds(su, tokens, d["attn"]))
    sel = _selective(su.m, t, su.tp)
    attn = lambda flops: fl(gemm.attention_seconds(su.hw, flops * tokens / su.tp, tokens))  # noqa: E731
    out = {"f_d": f_d, "f_m": 0.0, "tp": tp_l, "cp": cp_l, "ep": 0.0, "ep_dual": 0.0,
           "head": fl(sm.head_forward(su, tokens, vocab)) if vocab else 0.0}
    rec = {"none": (0.0, 0.0), "selective": (attn(sel[0]), 0.0), "full": (f_d + tp_l / 2, 0.0)}
    if su.m.moe is not None:
        mo = sm.layer_forward(su, "moe", tokens, ep, etp)
        f_m = fl(mo["gemm"] + mo["attn"] + mo["elem"])
        a2a, etp_s = (fl(x) for x in sm.ep_seconds(su, tokens, ep, etp))
        hidden = 3 * f_m if su.fw.dualpipe_hides_ep else 0.0
        out |= {"f_m": f_m, "ep": a2a + etp_s, "ep_dual": max(a2a + etp_s - hidden, 0.0)}
        rec |= {"selective": (attn(sel[0]), attn(sel[1])),
                "full": (f_d + tp_l / 2, f_m + tp_l / 2)}
    return out, rec


def step_parts(m, hw, fw: Framework, p: ParallelSpec, t: TrainSpec, gpus_per_node: int,
               runtime=None) -> dict[str, float]:
    """Seconds per step of each term (PARTS) of the layout `p` running `t`; they sum to the
    step time."""
    su = sm.setup(m, hw, fw, t, p.tp, p.cp, p.dp, gpus_per_node, p.pp, p.dp_replicate)
    tokens = t.micro_batch * t.seq / p.cp
    vocab = padded_vocab(m, p.tp, t.pad_multiple()) if m.vocab else 0
    L, rec = _layer_terms(su, t, tokens, p.ep, p.etp, vocab)
    chunks = 0 if p.pp == 1 else (2 if p.schedule == "dualpipe" else p.vpp)
    p2p = float(sm.p2p_seconds(su, tokens, chunks))
    ranks = []
    for dense, moe, last in _rank_layers(m, p):
        ep = L["ep_dual"] if p.schedule == "dualpipe" else L["ep"]
        ranks.append({"compute": 3 * (dense * L["f_d"] + moe * L["f_m"] + last * L["head"]),
                      "recompute": dense * rec[t.recompute][0] + moe * rec[t.recompute][1],
                      "tp": (dense + moe) * L["tp"], "cp": (dense + moe) * L["cp"],
                      "ep": moe * ep, "pp_p2p": p2p})
    slowest = max(ranks, key=lambda r: sum(r.values()))
    t_mb = sum(slowest.values())
    comp = max(r["compute"] for r in ranks)
    n_mb, b = t.micro_batches, bubble_fraction(p, t.micro_batches)
    rows = build_ledger(m, replace(p, zero=0), t, runtime).ranks
    grads = max(r.rows["gradients"] for r in rows)
    weights = max(r.rows["weights"] for r in rows)
    sync, z3 = (float(x[0]) for x in sm.dp_seconds(su, grads, weights, (p.zero,), n_mb,
                                                    (2.0 / 3.0) * comp, comp / 3))
    out = {k: n_mb * v for k, v in slowest.items()}
    out |= {"bubble": n_mb * t_mb * b / (1.0 - b), "dp_sync": sync, "zero3": z3,
            "optimizer": float(sm.optimizer_seconds(su, t, weights, p.zero)),
            "grad_accum": float(sm.accumulation_seconds(su, grads, n_mb))}
    return {k: out[k] for k in PARTS}
