"""The step-time model: seconds of one layer, one micro-batch and one optimizer step of a layout,
term by term (docs/step-time.md explains every term and its source).

Per layer per micro-batch on one rank (tokens = b·s/cp):
  compute = Σ GEMMs at their shape's efficiency (`gemm`) + attention core + element-wise traffic;
            backward = 2 × forward (Narayanan et al. 2021 eq. 3), so × 3 per step
  TP  = 4 all-gathers + 4 reduce-scatters of tokens·h (SP; 4 all-reduces without it), exposed
        unless the framework hides them (`overlap`)
  CP  = ring attention: cp − 1 hops of this rank's K/V forward, twice that backward, each hop
        hidden behind one block's attention where the framework overlaps them
  EP  = dispatch + combine all-to-alls forward and backward, T·K rows of h per rank, × the
        busiest rank's top-k imbalance (`collectives.topk_imbalance`), its rows in the GEMMs too
  ETP = all-gather before / reduce-scatter after the experts over etp·T·K rows
Per micro-batch: pipeline send/recv of tokens·h (÷ tp under SP; without SP, scatter/gather: ÷ tp
over the NIC + an NVLink all-gather) per chunk boundary, forward and backward (blocking in
Megatron's 1F1B). Per step: step = m · t_mb / (1 − bubble) + DP sync (exposed) + ZeRO-3 traffic
(exposed) + optimizer + gradient accumulation, with t_mb the slowest rank's micro-batch; DP sync
hidden behind one micro-batch's backward when the framework overlaps it (Megatron-LM 2021: only
without pipelining, `overlap`; ZeRO-2/3 reduce-scatter every micro-batch, each behind its own
backward; ZeRO-3's gathers behind the prefetching compute); the optimizer and, where the
framework does not fuse it into the weight-gradient GEMMs, the gradient accumulation are
memory-bound passes (`optimizer_bytes_per_param`, `accumulation_seconds`).
`costs/stepscalar.py` assembles one configuration from these terms with scalars.
Ignores: expert-data-parallel groups (all gradients sync over dp·cp), the communication a
recomputed forward repeats except TP's, router skew beyond sampling, kernel launch gaps; that the
gradient adds run inside each micro-batch's backward (the bubble stretching with them: b/(1 − b)
of a few-per-cent term); the tied word-embedding gradients' all-reduce between the first and
last stages (5–15 ms a step for the Megatron 2021 models, ≤ 0.5 %).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memledger.costs import collectives as co
from memledger.costs import gemm
from memledger.costs.overlap import Framework
from memledger.model.flops import attention_flops_per_token
from memledger.model.params import layer_groups
from memledger.units import format_bytes

TP_COLLECTIVES = 8  # SP: all-gather + reduce-scatter around attention and MLP, fwd and bwd
# the terms of a step, each at the slowest rank; they sum to the step time
PARTS = ("compute", "recompute", "tp", "cp", "ep", "pp_p2p", "bubble", "dp_sync", "zero3",
         "optimizer", "grad_accum")


@dataclass(frozen=True)
class Setup:
    """The scalars of one (tp, cp, dp) block."""
    m: object  # ModelSpec
    hw: object  # Hardware
    fw: Framework
    seq: int
    tp: int
    cp: int
    dp: int
    gpn: int  # GPUs per node
    act: int  # bytes per activation value
    pp: int = 1  # pipeline stages (what the framework overlaps can depend on it)
    fp8: bool = False  # the layers' linear GEMMs run in fp8 (the recipe's `fp8_matrices`)
    dp_replicate: int = 1  # HSDP: copies of the ZeRO shard group (ParallelSpec.dp_replicate)


def setup(m, hw, fw: Framework, t, tp: int, cp: int, dp: int, gpn: int, pp: int = 1,
          dp_replicate: int = 1) -> Setup:
    """The Setup of a layout running `t`: its seq; its recipe's activation bytes and fp8 GEMMs."""
    return Setup(m, hw, fw, t.seq, tp, cp, dp, gpn, format_bytes(t.recipe.act_fmt, 1), pp,
                 t.recipe.fp8_matrices, dp_replicate)


def _kv_dim(m) -> int:
    if m.mla is not None:
        return m.n_heads * (m.mla.qk_dim + m.mla.v_dim)
    return 2 * m.n_kv_heads * m.head_dim


def _gemm_group(su: Setup, g, rows, ep, etp):
    """Forward seconds of one parameter group's GEMMs on `rows` token rows."""
    h, tp = su.m.hidden, su.tp
    n_mats = g.count // (g.rows * g.cols)
    if g.shard == "expert":
        x = su.m.moe
        per_expert = n_mats // x.top_k
        t_r = rows / tp  # SP: each tp rank routes its own sequence shard
        imb = co.topk_imbalance(etp * t_r * x.top_k, ep)
        rows_e = ep * etp * t_r * x.top_k / x.n_experts * imb
        n, k = (g.cols / etp, g.rows) if g.rows == h else (g.cols, g.rows / etp)
        return x.n_experts / ep * gemm.gemm_seconds(su.hw, rows_e, n, k, per_expert, su.fp8)
    if g.shard == "tp":
        n, k = (g.cols / tp, g.rows) if g.rows == h else (g.cols, g.rows / tp)
    else:
        n, k = g.cols, g.rows
    router = g.name == "moe.router"  # a plain linear in bf16 / fp32, even under fp8
    if router:
        rows = rows / tp
    return gemm.gemm_seconds(su.hw, rows, n, k, n_mats, su.fp8 and not router)


def layer_forward(su: Setup, kind: str, tokens, ep=1, etp=1) -> dict:
    """Forward seconds of one layer per micro-batch: GEMMs, attention core, element-wise."""
    m, hw = su.m, su.hw
    gemms = sum(_gemm_group(su, g, tokens, ep, etp)
                for g in layer_groups(m, kind, active=True) if g.matrix)
    causal = attention_flops_per_token(m, su.seq) * tokens / su.tp
    if su.fw.flash:
        attn = gemm.attention_seconds(hw, causal, tokens)
        scores = 0
    else:  # full s×s square as two batched GEMMs (QKᵀ, AV), softmax traffic element-wise
        d = m.mla.qk_dim if m.mla is not None else m.head_dim
        attn = gemm.gemm_seconds(hw, tokens, su.seq, d, 1) * 2 * causal / (
            2.0 * tokens * su.seq * d)
        scores = m.n_heads
    elem = gemm.elementwise_seconds(hw, gemm.layer_elementwise_bytes(
        tokens, m.hidden, su.tp, su.fw.sp, scores, su.seq))
    return {"gemm": gemms, "attn": attn, "elem": elem}


def cross_entropy_bytes_per_logit(act: int) -> int:
    """Bytes the unfused vocab-parallel cross-entropy (Megatron's `_VocabParallelCrossEntropy`,
    fp32) moves per logit, forward and backward: max 4, subtract 4 + 4, exp 4 + 4, sum 4, divide
    4 + 4 (the softmax kept), backward scaling 4 + 4; 16-bit logits add both casts, act + 4 each."""
    return 40 + (2 * (act + 4) if act < 4 else 0)


def head_forward(su: Setup, tokens, vocab: int):
    """Output head GEMM, and a third of the cross-entropy's traffic: a step counts 3 × a
    forward (backward = 2 × forward), which the loss's passes are not shaped like, so its
    forward-and-backward bytes (`cross_entropy_bytes_per_logit`) enter as a third here."""
    g = gemm.gemm_seconds(su.hw, tokens, vocab / su.tp, su.m.hidden)
    ce = cross_entropy_bytes_per_logit(su.act) / 3.0
    return g + gemm.elementwise_seconds(su.hw, ce * tokens * vocab / su.tp)


def tp_seconds(su: Setup, tokens):
    """TP communication per layer per micro-batch (fwd + bwd), exposed share."""
    beta, alpha = co.link(su.hw, su.tp, su.gpn, stride=1)
    buf = tokens * su.m.hidden * su.act
    one = co.gather_seconds(buf, su.tp, beta, alpha)  # AG ≡ RS; an all-reduce = RS + AG
    return TP_COLLECTIVES * one * (1.0 - su.fw.tp_hidden)


def cp_seconds(su: Setup, tokens, attn_fwd):
    """Ring attention per layer per micro-batch: K/V hops not hidden behind a block."""
    if su.cp == 1:
        return np.zeros_like(np.asarray(tokens, np.float64))
    beta, alpha = co.link(su.hw, su.tp * su.cp, su.gpn)
    hop = co.p2p_seconds(tokens * _kv_dim(su.m) / su.tp * su.act, beta, alpha)
    block = attn_fwd / su.cp if su.fw.cp_overlap else 0.0
    fwd = np.maximum(hop - block, 0)
    bwd = np.maximum(2 * hop - 2 * block, 0)  # K, V and dK, dV travel; backward ≈ 2× attention
    return (su.cp - 1) * (fwd + bwd)


def ep_seconds(su: Setup, tokens, ep, etp):
    """(all-to-all, ETP gather) seconds per MoE layer per micro-batch, fwd + bwd."""
    x, h = su.m.moe, su.m.hidden
    rows = tokens / su.tp * x.top_k
    beta, alpha = co.link(su.hw, ep * etp, su.gpn)
    imb = co.topk_imbalance(etp * rows, ep)
    # across nodes, the rows for the ep group's members in the same node go over NVLink
    local = np.where(co.inside_node(ep * etp, su.gpn), 1, co.rails(ep * etp, etp, su.gpn))
    a2a = 4 * co.all_to_all_seconds(rows * h * su.act, ep, beta, alpha, imb, local,
                                    co.link(su.hw, 1, su.gpn)[0])
    beta_e, alpha_e = co.link(su.hw, etp, su.gpn, stride=1)
    etp_s = 4 * co.gather_seconds(etp * rows * h * su.act, etp, beta_e, alpha_e)
    return a2a, etp_s


def p2p_seconds(su: Setup, tokens, chunks):
    """Pipeline send/recv per micro-batch on one rank: activations out, gradients back, per
    chunk (vpp) boundary; the neighbours sit tp·cp·dp ranks apart. Under SP each tp rank holds
    1/tp of the activation; without it, scatter/gather (Narayanan et al. 2021 §4.1) sends 1/tp
    per rank and the receivers all-gather the whole over their tp group."""
    beta, alpha = co.link(su.hw, 2 * su.tp * su.cp * su.dp, su.gpn)
    full = tokens * su.m.hidden * su.act
    split = su.fw.sp or su.fw.pp_scatter_gather
    one = co.p2p_seconds(full / (su.tp if split else 1), beta, alpha)
    if su.fw.pp_scatter_gather and not su.fw.sp and su.tp > 1:
        one = one + co.gather_seconds(full, su.tp, *co.link(su.hw, su.tp, su.gpn, stride=1))
    return 2 * np.asarray(chunks) * one


# what hides a data-parallel term (`dp_terms`): nothing, one micro-batch's backward (2/3 of its
# compute), or its forward (1/3, what ZeRO-3's prefetch overlaps)
HIDE_NONE, HIDE_BACKWARD, HIDE_FORWARD = 0, 1, 2


@dataclass(frozen=True, kw_only=True)
class DPTerms:
    """The data-parallel traffic of each ZeRO stage in one form (leading axis: the stages):
        exposed = [m ·] max(x − h, 0) + max(y − h, 0)
    m the micro-batches (where `per_mb`), h the window that hides it (`hide`: HIDE_*); y is
    −inf where a stage has one term (max(−inf − h, 0) adds an exact 0). The planner's
    compiled pass evaluates the same form per configuration (planner/sweep/fused.py)."""

    x: np.ndarray  # [Z, ...] seconds
    y: np.ndarray  # [Z, ...] seconds, −inf: no second term
    per_mb: np.ndarray  # [Z] bool
    hide: np.ndarray  # [Z] HIDE_*
    zero3: np.ndarray  # [Z] bool: the ZeRO-3 gathers (a row of their own in a breakdown)


def dp_terms(su: Setup, grads, weights, zs) -> DPTerms:
    """ZeRO-0 all-reduces and ZeRO-1 reduce-scatters the accumulated gradients once per step
    (+ all-gather of the updated weights); sharded gradients (ZeRO-2, 3) cannot accumulate, so
    they are reduce-scattered every micro-batch, and ZeRO-3 gathers the weights forward and
    backward as well. grads / weights: the rank's unsharded rows in bytes. HSDP (R copies):
    gathers inside a shard group of dp·cp/R neighbours, then the shard all-reduced over R
    (torch fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce)."""
    n, r = su.dp * su.cp // su.dp_replicate, su.dp_replicate
    beta, alpha = co.link(su.hw, su.tp * n, su.gpn, stride=su.tp)
    rs, ag = co.gather_seconds(grads, n, beta, alpha), co.gather_seconds(weights, n, beta, alpha)
    every = co.link(su.hw, su.tp * n * r, su.gpn, stride=su.tp)  # all of dp·cp (ZeRO-0)
    if r > 1:  # the reduced shard, all-reduced over the R copies
        rs = rs + co.all_reduce_seconds(np.asarray(grads, np.float64) / n, r,
                                        *co.link(su.hw, su.tp * n * r, su.gpn, stride=su.tp * n))
    overlap = su.fw.dp_overlap or (su.fw.dp_overlap_no_pipeline and su.pp == 1)
    hide = HIDE_BACKWARD if overlap else HIDE_NONE
    none = np.full(np.shape(rs), -np.inf)
    stage = {0: lambda: (co.all_reduce_seconds(grads, n * r, *every), none, False, hide),
             1: lambda: (rs + ag, none, False, hide),
             2: lambda: (rs, ag, True, hide),
             3: lambda: (rs + 2 * ag, none, True, HIDE_FORWARD if su.fw.prefetch else HIDE_NONE)}
    x, y, per_mb, hides = zip(*(stage[z]() for z in zs))
    return DPTerms(x=np.stack(np.broadcast_arrays(*x)), y=np.stack(y),
                   per_mb=np.array(per_mb), hide=np.array(hides),
                   zero3=np.array([z == 3 for z in zs]))


def exposed_seconds(d: DPTerms, k: int, micro_batches, window, compute_mb):
    """Stage k's exposed seconds (the form in `DPTerms`); window: one micro-batch's backward,
    compute_mb: its forward."""
    h = (0.0, window, compute_mb)[int(d.hide[k])]
    v = np.maximum(d.x[k] - h, 0)
    if d.per_mb[k]:
        v = np.asarray(micro_batches, np.float64) * v
    return v + np.maximum(d.y[k] - h, 0)


def dp_seconds(su: Setup, grads, weights, zs, micro_batches, window, compute_mb):
    """(exposed DP sync of ZeRO 0–2, exposed ZeRO-3 traffic) per step, each stacked over the
    ZeRO stages `zs` on a new leading axis (`dp_terms` says what each stage moves)."""
    d = dp_terms(su, grads, weights, zs)
    m = np.asarray(micro_batches, np.float64)
    shape = np.broadcast_shapes(d.x.shape[1:], np.shape(window), np.shape(compute_mb), m.shape)
    # each stage writes its own slice, the other stays 0 (no zero arrays stacked: they're large)
    sync, z3 = np.zeros((len(zs),) + shape), np.zeros((len(zs),) + shape)
    for k in range(len(zs)):
        (z3 if d.zero3[k] else sync)[k] = exposed_seconds(d, k, m, window, compute_mb)
    return sync, z3


def optimizer_bytes_per_param(t) -> int:
    """Bytes the optimizer step moves per parameter of the shard, pass by pass, as Megatron's
    mixed-precision optimizers run it (apex / TE fused Adam; `Float16OptimizerWithFloat16Params`,
    `DistributedOptimizer`):
      update      the parameter it updates (the fp32 master, else the weight) and the states
                  read and written, the gradient read at the precision the update reads (the
                  fp32 main gradient where there is one)
      copy-out    with a master: the master read again, the working weight written
      main grad   with a separate fp32 main gradient (the fp16 recipe): the 16-bit gradient
                  read, the copy written; fp16 weights also unscale it and check for inf/nan
                  in place (loss scaling: read + write)
      clip        the gradient norm: one read of the gradient (clip-grad 1.0, the default)
    e.g. fp16: 2·(4 + 8) + 4 + (4 + 2) + (2 + 4) + 8 + 4 = 52; megatron (bf16, fp32 main
    gradients): 24 + 4 + 6 + 4 = 38."""
    r, o = t.recipe, t.opt
    states = int(o.matrix_states[2:]) if o.matrix_states.startswith("n:") else 1
    state = format_bytes(o.fixed_fmt or r.state_fmt, 1) if states else 0
    weight, grad = format_bytes(r.weight_fmt, 1), format_bytes(r.grad_fmt, 1)
    master = format_bytes(r.master_fmt, 1) if r.master_fmt else 0
    main = format_bytes(r.main_grad_fmt, 1) if r.main_grad_fmt else grad
    update = 2 * ((master or weight) + states * state) + main
    copy_out = master + weight if master else 0
    main_grad = grad + main if r.main_grad_fmt else 0
    unscale = 2 * main if r.weight_fmt == "fp16" else 0
    return update + copy_out + main_grad + unscale + main


def optimizer_seconds(su: Setup, t, weights, zero):
    """Memory-bound optimizer step of the rank's parameter shard."""
    params = np.asarray(weights, np.float64) / format_bytes(t.recipe.weight_fmt, 1)
    shard = np.where(np.asarray(zero) >= 1, su.dp * su.cp // su.dp_replicate, 1)
    return gemm.elementwise_seconds(su.hw, params / shard * optimizer_bytes_per_param(t))


def accumulation_seconds(su: Setup, grads, micro_batches):
    """Per step, the weight gradients of each micro-batch added to the accumulated ones where
    the framework runs that as its own kernel (`Framework.grad_accum_fused` off): the sum and
    the new gradient read, the sum written — 3 × the rank's unsharded gradient bytes — m times
    into Megatron's zeroed buffer, m − 1 times in autograd's `.grad` under PyTorch DDP (the
    first micro-batch's gradient is written, not added; Megatron-LM 2021 without pipelining).
    grads: the rank's gradient rows in bytes."""
    m = np.asarray(micro_batches, np.float64)
    if su.fw.grad_accum_fused:
        return np.zeros(np.broadcast_shapes(np.shape(grads), m.shape))
    adds = m - 1 if su.pp == 1 and su.fw.dp_overlap_no_pipeline and not su.fw.dp_overlap else m
    return adds * gemm.elementwise_seconds(su.hw, 3 * np.asarray(grads, np.float64))
