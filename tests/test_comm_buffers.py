"""Communication buffers (docs/design.md §7, seed 1 通信缓冲) on worked examples."""
from dataclasses import replace

from memledger import ParallelSpec, RuntimeSpec, TrainSpec, build_ledger, model
from memledger.ledger.communication import (a2a_table, deepep_ll_bytes, grad_bucket_items,
                                            nccl_items, zero3_items)
from memledger.specs.runtime import NCCL_LL128_DEFAULT_BYTES, NCCL_LL_DEFAULT_BYTES

DSV3 = model("deepseek-v3")
P = ParallelSpec(tp=8, pp=16, ep=64, dp=16, sp=True, layout=(3,) + (4,) * 13 + (3, 3))
T = TrainSpec(seq=8192, micro_batches=32)


def test_worst_case_all_to_all_is_32x_the_static_shape_for_deepseek_v3_at_ep64():
    """T = 8192 tokens / tp 8 = 1024 leave each rank; K = 8; each rank hosts E/ep = 4 experts.
    Balanced / capacity 1.0: T·K = 8192 rows; worst case: ep·T·min(K, E/ep) = 64·1024·4 =
    262,144 rows — 32× (not 64×: a rank can take at most 4 of a token's 8 experts).
    Rows × h 7168 × 2 B, dispatch + combine."""
    table = a2a_table(DSV3, P, T, RuntimeSpec())
    assert table["capacity"] == table["dynamic"] == 2 * 8192 * 7168 * 2  # 234,881,024 B
    assert table["worst-case"] == 2 * 262_144 * 7168 * 2  # 7,516,192,768 B = 7.0 GiB
    assert table["worst-case"] // table["capacity"] == 32
    worst = build_ledger(DSV3, P, T, RuntimeSpec(a2a="worst-case")).ranks[1]
    static = build_ledger(DSV3, P, T, RuntimeSpec(a2a="capacity")).ranks[1]
    saved = worst.rows["communication"] - static.rows["communication"]
    assert saved == table["worst-case"] - table["capacity"]  # 6.78 GiB back on every MoE rank


def test_capacity_factor_scales_the_static_shape():
    table = a2a_table(DSV3, P, T, RuntimeSpec(capacity_factor_pct=125))
    assert table["capacity"] == 2 * 10240 * 7168 * 2


def test_deepep_low_latency_hint_for_128_tokens_7168_hidden_256_experts():
    """DeepEP LowLatencyLayout: dispatch msg 16 + max(2h, h + h/128·4) = 14352 B, combine msg
    h/128·4 + 2h = 14560 B; send = max(128·14352, 256·128·14560) = 477,102,080; receive =
    max(256·128·14352, 256·128·14560) = 477,102,080; signalling 256·4 → 1024 (128-aligned);
    2 × (send + recv + signal) = 1,908,410,368, rounded (n + 128) // 128 · 128."""
    assert deepep_ll_bytes(128, 7168, 64, 256) == 1_908_410_496


def test_deepspeed_overlap_comm_keeps_4p5x_both_buckets():
    """DeepSpeed docs: 5e8-element buckets with overlap_comm need 5e8 × 2 B × 2 × 4.5 = 9 GB."""
    p, t = ParallelSpec(dp=8), TrainSpec()
    ds = grad_bucket_items(p, t, RuntimeSpec(grad_buckets="deepspeed"))[0]
    assert ds.bytes == 9_000_000_000
    plain = grad_bucket_items(p, t, RuntimeSpec(grad_buckets="deepspeed", overlap_comm=False))[0]
    assert plain.bytes == 2_000_000_000
    assert grad_bucket_items(p, t, RuntimeSpec())[0].bytes == 0  # Megatron: views of the buffer


def test_nccl_buffers_per_communicator_with_every_protocol():
    """8 channels × 2 ring peers × (Simple 4 MiB + LL 512 KiB + LL128 4.69 MiB) per communicator."""
    p = ParallelSpec(tp=8, pp=4, dp=2)
    simple = nccl_items(p, RuntimeSpec())[0].bytes
    assert simple == 3 * 8 * 2 * 4 * 1024**2
    full = nccl_items(p, RuntimeSpec(nccl_ll_buffer_bytes=NCCL_LL_DEFAULT_BYTES,
                                     nccl_ll128_buffer_bytes=NCCL_LL128_DEFAULT_BYTES))[0].bytes
    assert full == 3 * 8 * 2 * (4_194_304 + 524_288 + 4_915_200)


def test_zero3_working_set_fsdp_vs_deepspeed():
    """One Llama-3 8B layer on a rank: 218,112,000 params (tp 1)."""
    p, t, layer = ParallelSpec(dp=8, zero=3), TrainSpec(), 218_112_000
    fsdp = zero3_items(layer, p, t, RuntimeSpec())
    assert fsdp[0].bytes == 2 * layer * 2  # current + one prefetched unit, bf16
    assert fsdp[1].bytes == layer * 4  # the unit's unsharded fp32 gradient
    ds = zero3_items(layer, p, t, RuntimeSpec(zero3_impl="deepspeed"))
    assert ds[0].bytes == (layer + 50_000_000) * 2
    assert ds[1].bytes == 9 * 500_000_000 * 2 // 2
    capped = zero3_items(layer, p, t, RuntimeSpec(zero3_impl="deepspeed", zero3_max_live_params=10**8))
    assert capped[0].bytes == 10**8 * 2


def test_deepep_mode_replaces_dispatch_and_combine_in_the_ledger():
    rt = RuntimeSpec(a2a="deepep-ll", deepep_max_tokens=128)
    r = build_ledger(DSV3, P, T, rt).ranks[1]
    names = {i.name for i in r.row_items("communication")}
    assert "moe all-to-all / deepep low-latency buffer" in names
    assert "moe all-to-all / dispatch" not in names
    led2 = build_ledger(DSV3, replace(P), T, replace(rt, deepep_max_tokens=256))
    assert led2.ranks[1].rows["communication"] > r.rows["communication"]
