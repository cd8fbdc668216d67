"""The communication-buffer row of one pipeline rank (docs/design.md §7).

- MoE all-to-all dispatch and combine, one MoE layer at a time: T = b·s/cp (÷tp with SP)
  tokens leave the rank. Rows received per buffer: dynamic (sized after a count exchange,
  balanced routing) T·K; static capacity C·T·K; dropless worst case ep·T·min(K, E/ep) — every EP
  rank sending all its tokens here, ep times the balanced size (seed 1, 通信缓冲).
  DeepEP low-latency mode instead registers one RDMA buffer sized by
  `get_low_latency_rdma_size_hint(T_max, h, ep, E)` (deepseek-ai/DeepEP csrc/config.hpp,
  LowLatencyLayout: odd/even send, receive and signalling buffers, 128-byte aligned).
- ZeRO-3: FSDP keeps the unsharded current unit + `zero3_prefetch_layers` prefetched units and
  the unit's unsharded gradient for its reduce-scatter; DeepSpeed keeps the current layer plus
  `stage3_prefetch_bucket_size` params, capped at `stage3_max_live_parameters`, and a
  reduce bucket of `reduce_bucket_size` (4.5x with overlap_comm).
- FSDP's root unit: `fully_shard(model)` groups what no layer owns (embedding, final norm,
  head) in the root, which FSDP2 keeps unsharded from forward to backward by default
  (torch 2.13 fsdp/_fully_shard/_fsdp_state.py _lazy_init: reshard_after_forward=None on the
  root) — on the ranks holding them, the unsharded embedding/head next to their shards.
  Measured by `memledger validate --engine torch` (docs/engine-validation.md).
- Gradient buckets (ZeRO 0-2): Megatron buckets are views of the grad buffer (0 extra);
  DeepSpeed keeps allgather + reduce buckets in the 16-bit dtype, 4.5x with overlap_comm
  ("5e8 × 2 bytes × 2 × 4.5 = 9 GB", DeepSpeed / HF transformers DeepSpeed docs).
- NCCL: channels × 2 ring peers × (Simple + LL + LL128 buffer) per communicator of size > 1.
- Pipeline send/recv: one b·s/cp(/tp)·h activation each way.
Muon's gathered matrices are optimizer-step transients (memledger.ledger.static.moves), not here.
Ignores: NVLS/SHARP buffers and NCCL's proxy/host-side buffers (platform dependent).
"""
from __future__ import annotations

from memledger.ledger.fsdp2 import (PP_GRADS_ITEM, RULES, UNITS_KEPT, expert_sharding, fsdp2, last_block_kept, layer_unit_params,
                                    pp_unsharded_grads, reshard_after_forward, root_unit_params,
                                    tied_weight_copies, torchtitan_units, unit_params,
                                    units_kept)
from memledger.ledger.items import Item
from memledger.ledger.torchtitan_eras import float8_gather_params
from memledger.ledger.static.rows import Held
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.runtime import RuntimeSpec
from memledger.specs.train import TrainSpec
from memledger.units import ceil_div, format_bytes

SRC_A2A = "seed 1 (通信缓冲); Megatron-Core alltoall token dispatcher"
SRC_DEEPEP = "DeepEP csrc/config.hpp get_low_latency_rdma_size_hint (commit 3861241)"
SRC_FP8_GATHER = ("torchao float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor "
                  "(fsdp_pre_all_gather casts the shard to float8 e4m3)")
SRC_DS = "DeepSpeed ZeRO config docs: overlap_comm uses 4.5x allgather/reduce bucket sizes"
DS_BUCKET_FMT = "bf16"  # DeepSpeed buckets hold the 16-bit gradients / params


def tokens_leaving(m: ModelSpec, p: ParallelSpec, t: TrainSpec) -> int:
    """T: tokens one rank dispatches per MoE layer and micro-batch (b·s/cp, ÷tp with SP)."""
    return ceil_div(ceil_div(t.micro_batch * t.seq, p.cp), p.tp if p.sp else 1)


def a2a_rows(m: ModelSpec, p: ParallelSpec, t: TrainSpec, mode: str, cap_pct: int) -> int:
    k, e = m.moe.top_k, m.moe.n_experts
    tokens = tokens_leaving(m, p, t)
    if mode == "worst-case":
        return p.ep * tokens * min(k, e // p.ep)
    if mode == "capacity":
        return ceil_div(cap_pct * tokens * k, 100)
    return tokens * k


def deepep_ll_bytes(max_tokens: int, hidden: int, ep: int, n_experts: int) -> int:
    """DeepEP's low-latency RDMA buffer (both dispatch and combine, double-buffered)."""
    scales = hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + scales * 4)  # int4 header + bf16 or fp8+scales
    combine_msg = scales * 4 + hidden * 2  # per-128-channel min/max (bf16x2) + bf16 payload
    send = max(max_tokens * dispatch_msg, n_experts * max_tokens * combine_msg)
    recv = max(n_experts * max_tokens * dispatch_msg, n_experts * max_tokens * combine_msg)
    signal = ceil_div(n_experts * 4, 128) * 128
    total = 2 * (send + recv + signal)
    return (total + 128) // 128 * 128  # DeepEP rounds (n + 128) down to a multiple of 128


def a2a_table(m, p, t, rt: RuntimeSpec) -> dict[str, int]:
    """Bytes of the MoE all-to-all buffers (dispatch + combine) under every sizing rule."""
    fmt, h = t.recipe.act_fmt, m.hidden
    out = {mode: 2 * format_bytes(fmt, a2a_rows(m, p, t, mode, rt.capacity_factor_pct) * h)
           for mode in ("dynamic", "capacity", "worst-case")}
    out["deepep-ll"] = deepep_ll_bytes(rt.deepep_max_tokens or tokens_leaving(m, p, t), h, p.ep,
                                       m.moe.n_experts)
    return out


def moe_items(m, p, t, rt: RuntimeSpec) -> list[Item]:
    fmt = t.recipe.act_fmt
    if rt.a2a == "deepep-ll":
        tmax = rt.deepep_max_tokens or tokens_leaving(m, p, t)
        return [Item("communication", "moe all-to-all / deepep low-latency buffer",
                     deepep_ll_bytes(tmax, m.hidden, p.ep, m.moe.n_experts),
                     f"2 × (send + recv + signal) for T_max={tmax}, h={m.hidden}, ep={p.ep}, "
                     f"E={m.moe.n_experts}", SRC_DEEPEP)]
    rows = a2a_rows(m, p, t, rt.a2a, rt.capacity_factor_pct)
    worst = a2a_rows(m, p, t, "worst-case", rt.capacity_factor_pct)
    one = format_bytes(fmt, rows * m.hidden)
    note = (f"{rows} rows × h={m.hidden} × {fmt} ({rt.a2a}); dropless worst case would be "
            f"{worst} rows = ep·T·min(K, E/ep)")
    return [Item("communication", "moe all-to-all / dispatch", one, note, SRC_A2A),
            Item("communication", "moe all-to-all / combine", one, note, SRC_A2A)]


def zero3_items(largest_layer_params: int, p, t, rt: RuntimeSpec) -> list[Item]:
    w, g = t.recipe.weight_fmt, t.recipe.grad_fmt
    if rt.zero3_impl == "deepspeed":
        live = min(largest_layer_params + rt.zero3_prefetch_params, rt.zero3_max_live_params)
        mult = 9 if rt.overlap_comm else 2  # 4.5x or 1x, in halves
        rs = ceil_div(mult * format_bytes(DS_BUCKET_FMT, rt.reduce_bucket_params), 2)
        return [Item("communication", "zero-3 gather + prefetch", format_bytes(w, live),
                     f"min(layer {largest_layer_params} + prefetch bucket {rt.zero3_prefetch_params}, "
                     f"max live {rt.zero3_max_live_params}) params × {w}",
                     "DeepSpeed stage3_prefetch_bucket_size / stage3_max_live_parameters"),
                Item("communication", "zero-3 reduce bucket", rs,
                     f"{'4.5' if rt.overlap_comm else '1'} × reduce_bucket_size "
                     f"{rt.reduce_bucket_params} × {DS_BUCKET_FMT}", SRC_DS)]
    units = 1 + rt.zero3_prefetch_layers
    w = t.recipe.param_fmt or w  # FSDP2 MixedPrecisionPolicy.param_dtype: the all-gather output
    rs = unit_rs_bytes(largest_layer_params, t)
    gw = gather_fmt(t, rt)
    rs_note = f"one unit's unsharded gradient: {largest_layer_params} params × {g}"
    if t.recipe.reduce_fmt:
        rs_note = (f"one unit's unsharded gradient: {largest_layer_params} params × ({w} "
                   f"gradient + {t.recipe.reduce_fmt} reduce-scatter input)")
    return [Item("communication", "zero-3 gather + prefetch",
                 format_bytes(gw, largest_layer_params * units),
                 f"{units} units (current + {rt.zero3_prefetch_layers} prefetched) × largest layer "
                 f"({largest_layer_params} params on this rank) × {gw}" + (
                     " (float8 all-gather)" if gw != w else ""),
                 "PyTorch FSDP unit prefetch" + (f"; {SRC_FP8_GATHER}" if gw != w else "")),
            Item("communication", "zero-3 reduce-scatter input", rs, rs_note,
                 "PyTorch FSDP (reduce-scatter of the unit's flat gradient; FSDP2 foreach_reduce "
                 "in reduce_dtype)")]


def unit_rs_bytes(params: int, t) -> int:
    """An FSDP unit's reduce-scatter buffers: its unsharded gradient, and with a reduce dtype the
    param-dtype gradient copied into a reduce-dtype input (FSDP2 `foreach_reduce`)."""
    if not t.recipe.reduce_fmt:
        return format_bytes(t.recipe.grad_fmt, params)
    w = t.recipe.param_fmt or t.recipe.weight_fmt
    return format_bytes(w, params) + format_bytes(t.recipe.reduce_fmt, params)


def gather_fmt(t, rt: RuntimeSpec) -> str:
    """The dtype of a layer unit's all-gather output: FSDP2's param_dtype, or float8 for the
    layers' Linear weights under float8.enable_fsdp_float8_all_gather (their norms' few
    parameters counted at one byte too; the root unit — embedding, output — is not float8)."""
    if float8_gather_params(rt):
        return "fp8"
    return t.recipe.param_fmt or t.recipe.weight_fmt


ROOT_UNIT_ITEM = "zero-3 root unit unsharded (embedding, final norm, head)"


def fsdp_root_items(root_params, t, rt: RuntimeSpec) -> list[Item]:
    """ZeRO-3 under FSDP: the root unit's parameters on this rank, unsharded (embedding, final
    norm and head after the tp split); none under DeepSpeed or where the rank holds none."""
    if rt.zero3_impl != "fsdp":
        return []
    w = t.recipe.param_fmt or t.recipe.weight_fmt
    return [Item("communication", ROOT_UNIT_ITEM,
                 format_bytes(w, root_params),
                 f"{root_params} params (what no layer owns, after tp) × {w}, kept from forward "
                 "to backward", "PyTorch FSDP2 root (reshard_after_forward=None)")]


def grad_bucket_items(p, t, rt: RuntimeSpec) -> list[Item]:
    if rt.grad_buckets == "megatron" or p.dp * p.cp == 1:
        return [Item("communication", "gradient buckets", 0,
                     "views of the contiguous grad buffer: 0 extra", "Megatron-Core DDP")]
    n = rt.reduce_bucket_params + rt.allgather_bucket_params
    mult = 9 if rt.overlap_comm else 2
    b = ceil_div(mult * format_bytes(DS_BUCKET_FMT, n), 2)
    return [Item("communication", "gradient buckets", b,
                 f"{'4.5' if rt.overlap_comm else '1'} × (reduce {rt.reduce_bucket_params} + "
                 f"allgather {rt.allgather_bucket_params}) params × {DS_BUCKET_FMT}", SRC_DS)]


def communicators(p: ParallelSpec) -> list[tuple[str, int]]:
    groups = [("tp", p.tp), ("cp", p.cp), ("dp", p.dense_dp), ("dp-replicate", p.dp_replicate),
              ("pp", p.pp), ("ep", p.ep), ("etp", p.etp),
              ("expert-dp", p.expert_dp if p.ep * p.etp > 1 else 1)]
    return [(n, s) for n, s in groups if s > 1]


def nccl_items(p, rt: RuntimeSpec) -> list[Item]:
    comms = communicators(p)
    proto = rt.nccl_buffer_bytes + rt.nccl_ll_buffer_bytes + rt.nccl_ll128_buffer_bytes
    per = rt.nccl_channels * 2 * proto
    names = ", ".join(f"{n}={s}" for n, s in comms) or "none"
    return [Item("communication", "nccl channel buffers", per * len(comms),
                 f"{len(comms)} communicators ({names}) × {rt.nccl_channels} channels × 2 peers × "
                 f"(Simple {rt.nccl_buffer_bytes} + LL {rt.nccl_ll_buffer_bytes} + LL128 "
                 f"{rt.nccl_ll128_buffer_bytes}) B",
                 "NCCL defaults: NCCL_BUFFSIZE 4 MiB, LL 512 KiB, LL128 4.69 MiB (src/init.cc)")]


def boundary_bytes(m, p, t) -> int:
    """One stage-boundary activation (or its gradient) of one micro-batch on this rank."""
    return format_bytes(t.recipe.act_fmt, tokens_leaving(m, p, t) * m.hidden)


def pp_items(m, p, t) -> list[Item]:
    if p.pp == 1:
        return []
    one = boundary_bytes(m, p, t)
    return [Item("communication", "pipeline send/recv", 2 * one,
                 "2 × b·s/cp(/tp with SP) × h × act (one send, one recv)", "Megatron p2p")]


def comm_items(m, p, t, rt, held: list[Held], pp: list[Item] | None = None,
               loop=None) -> list[Item]:
    """The communication row of a rank holding `held`: buckets, NCCL, PP, MoE a2a, ZeRO-3.
    `pp`: the pipeline buffers when not Megatron's send + recv (ledger.torch_pipelining);
    `loop`: the resolved training loop (FSDP2's rules depend on it: ledger.fsdp2)."""
    items = grad_bucket_items(p, t, rt) + nccl_items(p, rt) + (pp_items(m, p, t) if pp is None
                                                              else pp)
    if m.moe is not None and any(h.section == "moe layers" for h in held) and p.ep > 1:
        items += moe_items(m, p, t, rt)
    if p.zero == 3:
        per_layer = layer_unit_params(held, p, expert_sharding(p, t, rt, loop))
        z3 = zero3_items(max(per_layer.values(), default=0), p, t, rt)
        root = root_unit_params(held, p, torchtitan_units(p, t, rt, loop, m.tied_embeddings),
                                tied_weight_copies(m, p, t, loop))
        items += z3 + (fsdp_root_items(root, t, rt) if root else [])
        items += param_offload_items(max(per_layer.values(), default=0), p, t, rt)
        if fsdp2(p, rt):
            items += fsdp2_held_items(held, p, t, rt, loop, z3[0].bytes, root)
            items += last_block_items(max(per_layer.values(), default=0), p, t, rt, loop)
    return items


def param_offload_items(largest_layer_params: int, p, t, rt: RuntimeSpec) -> list[Item]:
    """FSDP with its shards in host memory (rt.param_offload; specs.runtime requires the
    optimizer there too): each gathered unit's shard copied to the GPU before the all-gather
    (FSDP2 `FSDPParam.all_gather_inputs`: `.to(device)`, then the cast to param_dtype, both
    alive until copied into the all-gather input), and one unit's reduce-scatter output before
    its copy to the CPU (`foreach_reduce`). DeepSpeed's offload_param fetches into its gather
    buffer and drains gradients through its reduce bucket, both counted above.
    Ignores: a MoE unit's experts shard over fewer ranks than the dense group used here."""
    if not rt.param_offload or rt.zero3_impl != "fsdp" or largest_layer_params == 0:
        return []
    shard = ceil_div(largest_layer_params, p.dense_dp)
    units = 1 + rt.zero3_prefetch_layers
    w, cast = t.recipe.weight_fmt, t.recipe.param_fmt
    up = units * (format_bytes(w, shard) + (format_bytes(cast, shard) if cast and cast != w else 0))
    g = t.recipe.reduce_fmt or t.recipe.grad_fmt
    src = "torch fsdp/_fully_shard/_fsdp_param.py (all_gather_inputs), _fsdp_collectives.py"
    return [Item("communication", "param offload: gathered units' shards copied up", up,
                 f"{units} units × ⌈{largest_layer_params} / dp·cp {p.dense_dp}⌉ = {shard} "
                 f"params × {w}" + (f" + its {cast} cast" if cast and cast != w else ""), src),
            Item("communication", "param offload: reduce-scatter output before its copy down",
                 format_bytes(g, shard), f"one unit's gradient shard: {shard} params × {g}",
                 src)]


def fsdp2_held_items(held, p, t, rt, loop, gathered: int, root: int) -> list[Item]:
    """FSDP2 copies alive across the step: every unit's unsharded parameters when it does not
    reshard after forward (beside the gather buffers already counted), and under PP every
    unit's unsharded gradient until the last micro-batch (ledger.fsdp2)."""
    pad = expert_sharding(p, t, rt, loop)
    layers = sum(unit_params(h, p, pad) * h.instances for h in held if h.section.endswith("layers"))
    w = gather_fmt(t, rt)
    out = []
    if units_kept(p, t, rt, loop):
        why = ("reshard_after_forward=False" if not reshard_after_forward(p, t, rt, loop) else
               "PP: a non-last backward reshards nothing")
        out.append(Item("communication", f"{UNITS_KEPT} ({why})",
                        max(0, format_bytes(w, layers) - gathered),
                        f"every layer unit unsharded from its forward to its backward: {layers} "
                        f"params × {w}, less the gather buffers above", RULES["reshard"][1]))
    if pp_unsharded_grads(p, t, rt, loop):
        g = t.recipe.reduce_fmt or t.recipe.grad_fmt
        out.append(Item("communication", PP_GRADS_ITEM,
                        format_bytes(g, layers + root),
                        f"no gradient sync before the last micro-batch: {layers + root} params × "
                        f"{g} accumulated unsharded", RULES["PP grad sync"][1]))
    return out


def last_block_items(largest_layer_params: int, p, t, rt, loop) -> list[Item]:
    """torchtitan 2024-12 without PP: the last block's unit is not resharded after forward, so
    its unsharded parameters (in the gather dtype) are alive through the loss, beside the
    resharded units' buffers. Held in the communication row for the whole step: exact at the
    loss, one unit high in the other blocks' forward and backward (not itemised per event)."""
    if not last_block_kept(p, t, rt, loop) or largest_layer_params == 0:
        return []
    w = gather_fmt(t, rt)
    return [Item("communication", "FSDP2 last block kept unsharded (2024-12)",
                 format_bytes(w, largest_layer_params),
                 f"one layer unit: {largest_layer_params} params × {w}, reshard_after_forward="
                 "False for the last block", RULES["2024-12 units"][1])]
