"""The communication-buffer row of one pipeline rank (DESIGN.md §7).

- MoE all-to-all dispatch and combine, one MoE layer at a time: T = b·s/cp (÷tp with SP)
  tokens leave the rank. Rows received: dynamic (balanced routing) T·K; static capacity C·T·K;
  dropless worst case ep·T·min(K, E/ep) — every EP rank sending all its tokens here.
- ZeRO-3: the unsharded working set, current layer + `zero3_prefetch_layers` prefetched, and a
  reduce-scatter bucket.
- Gradient buckets: Megatron buckets are views of the grad buffer (0 extra); DeepSpeed with
  overlap_comm keeps ≈ 4.5 × bucket (reduce + all-gather buckets, double-buffered).
- NCCL: channels × 2 ring peers × NCCL_BUFFSIZE per communicator of size > 1.
- Pipeline send/recv: one b·s/cp·h activation each way.
- Muon: the full fp32 matrix gathered for orthogonalisation, largest matrix on the rank.
Ignores: NCCL's LL/LL128 protocol buffers and NVLS/SHARP buffers (platform dependent).
"""
from __future__ import annotations

from .items import Item
from .params import ParamGroup
from .specs.model import ModelSpec
from .specs.parallel import ParallelSpec
from .specs.runtime import RuntimeSpec
from .specs.train import TrainSpec
from .units import ceil_div, format_bytes

SRC_A2A = "seed 1 (通信缓冲); DeepEP / Megatron-Core alltoall dispatcher"


def a2a_rows(m: ModelSpec, p: ParallelSpec, t: TrainSpec, mode: str, cap_pct: int) -> int:
    k, e = m.moe.top_k, m.moe.n_experts
    tokens = ceil_div(ceil_div(t.micro_batch * t.seq, p.cp), p.tp if p.sp else 1)
    if mode == "worst-case":
        return p.ep * tokens * min(k, e // p.ep)
    if mode == "capacity":
        return ceil_div(cap_pct * tokens * k, 100)
    return tokens * k


def moe_items(m, p, t, rt: RuntimeSpec) -> list[Item]:
    fmt = t.recipe.act_fmt
    rows = a2a_rows(m, p, t, rt.a2a, rt.capacity_factor_pct)
    worst = a2a_rows(m, p, t, "worst-case", rt.capacity_factor_pct)
    one = format_bytes(fmt, rows * m.hidden)
    note = (f"{rows} rows × h={m.hidden} × {fmt} ({rt.a2a}); dropless worst case would be "
            f"{worst} rows = ep·T·min(K, E/ep)")
    return [Item("communication", "moe all-to-all / dispatch", one, note, SRC_A2A),
            Item("communication", "moe all-to-all / combine", one, note, SRC_A2A)]


def zero3_items(largest_layer_params: int, p, t, rt: RuntimeSpec) -> list[Item]:
    units = 1 + rt.zero3_prefetch_layers
    w = format_bytes(t.recipe.weight_fmt, largest_layer_params * units)
    rs = format_bytes(t.recipe.grad_fmt, min(rt.bucket_params, largest_layer_params))
    return [Item("communication", "zero-3 gather + prefetch", w,
                 f"{units} × largest layer ({largest_layer_params} params on this rank) × "
                 f"{t.recipe.weight_fmt}", "ZeRO-3 / FSDP unit prefetch"),
            Item("communication", "zero-3 reduce-scatter bucket", rs,
                 f"min(bucket, layer) params × {t.recipe.grad_fmt}", "ZeRO-3 / FSDP")]


def grad_bucket_items(p, t, rt: RuntimeSpec) -> list[Item]:
    if rt.grad_buckets == "megatron" or p.dense_dp == 1:
        return [Item("communication", "gradient buckets", 0,
                     "views of the contiguous grad buffer: 0 extra", "Megatron-Core DDP")]
    b = ceil_div(9 * format_bytes(t.recipe.grad_fmt, rt.bucket_params), 2)
    return [Item("communication", "gradient buckets", b,
                 f"4.5 × bucket ({rt.bucket_params} params × {t.recipe.grad_fmt})",
                 "DeepSpeed ZeRO overlap_comm (reduce + all-gather buckets)")]


def communicators(p: ParallelSpec) -> list[tuple[str, int]]:
    groups = [("tp", p.tp), ("cp", p.cp), ("dp", p.dense_dp), ("pp", p.pp), ("ep", p.ep),
              ("etp", p.etp), ("expert-dp", p.expert_dp if p.ep * p.etp > 1 else 1)]
    return [(n, s) for n, s in groups if s > 1]


def nccl_items(p, rt: RuntimeSpec) -> list[Item]:
    comms = communicators(p)
    per = rt.nccl_channels * 2 * rt.nccl_buffer_bytes
    names = ", ".join(f"{n}={s}" for n, s in comms) or "none"
    return [Item("communication", "nccl channel buffers", per * len(comms),
                 f"{len(comms)} communicators ({names}) × {rt.nccl_channels} channels × 2 peers × "
                 f"{rt.nccl_buffer_bytes} B", "NCCL defaults (NCCL_BUFFSIZE = 4 MiB)")]


def pp_items(m, p, t) -> list[Item]:
    if p.pp == 1:
        return []
    tokens = ceil_div(ceil_div(t.micro_batch * t.seq, p.cp), p.tp if p.sp else 1)
    one = format_bytes(t.recipe.act_fmt, tokens * m.hidden)
    return [Item("communication", "pipeline send/recv", 2 * one,
                 "2 × b·s/cp(/tp with SP) × h × act (one send, one recv)", "Megatron p2p")]


def muon_items(largest: ParamGroup | None, p, t) -> list[Item]:
    if t.optimizer != "muon" or largest is None or (p.zero == 0 and p.tp == 1):
        return []
    return [Item("communication", "muon full-matrix gather", format_bytes("fp32", largest.rows * largest.cols),
                 f"largest matrix {largest.rows}×{largest.cols} in fp32, gathered for Newton-Schulz",
                 "Muon (Jordan et al. 2024; Moonlight, arXiv 2502.16982)")]
