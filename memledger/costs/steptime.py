"""First-order step-time helpers: link choice, ring shares, selective-recompute FLOPs, and the
monotone step assembly. The planner ranks layouts with `memledger.costs.stepmodel` (GEMM
efficiency by shape, alpha–beta collectives, overlap per framework; docs/step-time.md), which
reuses `selective_flops_per_token` from here; the byte counts below are the textbook first-order
model it refines.

step = m · (compute + recompute + layer communication) / (1 − bubble) + data-parallel sync

- compute: 3 × the forward FLOPs of the slowest pipeline rank per micro-batch (`memledger.model.flops`:
  2 × active matmul params + causal attention per token; backward = 2 × forward, Narayanan et
  al. 2021 eq. 3), ÷ (tp·cp), at bf16 peak × MFU. A DualPipe rank runs each micro-batch through
  one of its two mirrored stages, so it counts half its layers per micro-batch.
- recompute: selective re-creates the dropped tensors (their inventory `flops`); full re-runs
  each layer's forward once (Chen et al. 2016). Never negative, and selective's tensors are part
  of the forward, so none ≤ selective ≤ full: more recompute is never faster.
- layer communication, per layer per micro-batch, exposed (no overlap), on the link the group
  implies — NVLink when the group's span of consecutive ranks fits in a node, else the network
  (Megatron rank order: tp innermost, then cp, dp; experts etp then ep):
  TP with sequence parallel: 4 all-gathers + 4 reduce-scatters of b·s/cp·h activations;
  CP ring attention: K and V passed cp − 1 times forward, twice that backward;
  EP: dispatch + combine all-to-alls forward and backward, T·K rows of h each;
  ETP: the expert-tensor-parallel all-gather of the routed rows before the experts and the
  reduce-scatter after, forward and backward (Megatron-Core MoE with expert TP).
- bubble: `schedules.bubble_fraction` of the schedule; a bigger bubble is never faster.
- data-parallel sync: ring all-reduce of the gradients, 2(d − 1)/d of the rank's gradient bytes
  (reduce-scatter + all-gather under ZeRO-1/2 moves the same); ZeRO-3 adds an all-gather of the
  weights forward and backward for every micro-batch.
Ignores: overlap of communication with compute, latency and message sizes, congestion and
topology beyond node / network, pipeline send/recv, optimizer-step time, MoE load imbalance,
separate expert-data-parallel groups (all gradients sync over dp·cp), the communication a
recomputed forward repeats, and kernel efficiency differences between layouts — one MFU for
all, so a larger micro-batch is never faster here except by saving ZeRO-3 gathers, and context
parallelism costs only its K/V traffic.
"""
from __future__ import annotations

import numpy as np

from memledger.costs.collectives import inside_node
from memledger.specs.hardware import Hardware
from memledger.specs.model import ModelSpec

TP_COLLECTIVES = 8  # SP: all-gather + reduce-scatter around attention and MLP, fwd and bwd
CP_PASSES = 3  # K,V ring: once forward, twice backward (dK, dV travel with them)
EP_ALL_TO_ALLS = 4  # dispatch + combine, forward and backward


def link_bw(hw: Hardware, span, gpus_per_node: int):
    """Bytes/s of a group whose consecutive ranks span `span` GPUs: NVLink when every such
    group lies inside a node (`collectives.inside_node`)."""
    return np.where(inside_node(span, gpus_per_node), hw.intra_node_bw, hw.network_bw)


def ring_share(n):
    """(n − 1)/n: the fraction of a buffer each rank sends in a ring collective of n."""
    n = np.asarray(n, dtype=np.float64)
    return (n - 1) / n


def tp_bytes_per_layer(m: ModelSpec, tokens, tp, act_bytes: int):
    """TP traffic per layer per micro-batch; tokens = b·s/cp on the rank."""
    return TP_COLLECTIVES * ring_share(tp) * tokens * m.hidden * act_bytes


def cp_bytes_per_layer(m: ModelSpec, tokens, tp, cp, act_bytes: int):
    """CP traffic per layer per micro-batch: this rank's K and V heads, cp − 1 hops."""
    if m.mla is not None:
        kv = m.n_heads * (m.mla.qk_dim + m.mla.v_dim)
    else:
        kv = 2 * m.n_kv_heads * m.head_dim
    return CP_PASSES * ring_share(cp) * tokens * kv / tp * act_bytes


def ep_bytes_per_moe_layer(m: ModelSpec, tokens, tp, ep, act_bytes: int):
    """EP traffic per MoE layer per micro-batch: T = tokens/tp rows leave, K copies each."""
    k = m.moe.top_k if m.moe else 0
    return EP_ALL_TO_ALLS * ring_share(ep) * tokens / tp * k * m.hidden * act_bytes


def etp_bytes_per_moe_layer(m: ModelSpec, tokens, tp, etp, act_bytes: int):
    """ETP traffic per MoE layer per micro-batch: 4 collectives over the etp·T·K routed rows."""
    k = m.moe.top_k if m.moe else 0
    return EP_ALL_TO_ALLS * ring_share(etp) * tokens / tp * k * etp * m.hidden * act_bytes


def dp_sync_seconds(grad_bytes, weight_bytes, d, zero, micro_batches, bw):
    """Gradient all-reduce once per step; ZeRO-3 also gathers weights twice per micro-batch."""
    share = ring_share(d)
    gather = np.where(np.asarray(zero) == 3, 2 * np.asarray(micro_batches) * weight_bytes, 0)
    return share * (2 * np.asarray(grad_bytes) + gather) / bw


def selective_flops_per_token(m: ModelSpec, tensors, dropped) -> int:
    """Forward FLOPs per token to re-create the tensors selective recompute drops (a routed
    tensor has K rows per token)."""
    k = m.moe.top_k if m.moe else 0
    return sum(x.flops * (k if x.per == "routed" else 1) for x in tensors if x.cls in dropped)


def stage_flops_per_token(fwd, recompute):
    """Per-token FLOPs of the slowest rank (last axis = ranks): forward, backward, recompute."""
    return np.max(3 * np.asarray(fwd) + recompute, axis=-1)


def step_seconds(*, compute_s, comm_s, bubble, micro_batches, dp_sync_s):
    """Seconds per optimizer step; monotone non-decreasing in every argument. compute_s is one
    micro-batch's forward + backward + recompute on the slowest rank; comm_s its exposed
    per-layer communication."""
    per_micro_batch = np.asarray(compute_s) + comm_s
    return np.asarray(micro_batches) * per_micro_batch / (1.0 - np.asarray(bubble)) + dp_sync_s
