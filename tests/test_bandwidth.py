"""Offload feasibility (docs/design.md §8) on Llama-3 70B, tp 8 · pp 4 · dp 2, 16k tokens, 8
micro-batches, rank 0 (20 layers), fc1 output (bf16) offloaded to the host.

Bytes per micro-batch: 20 layers × 16384 tokens × 57344/8 values × 2 B = 4,697,620,480.
Forward FLOPs: per token per layer 2 × 855,638,016 matrix params + 64·16384·256 attention
= 1,979,711,488; × 16384 tokens × 20 layers ÷ tp 8 = 81,087,982,944,256 →
÷ (989 TFLOP/s × 40 % MFU) = 0.20498 s; backward = 2 × forward.
"""
from dataclasses import replace

import pytest

from memledger import ParallelSpec, TrainSpec, build_ledger, gpu, model
from memledger.costs.bandwidth import (compute_time, cpu_offload_verdicts, remote_offload_verdicts,
                                       same_node, smaller_micro_batch)
from memledger.specs.policy import ActivationPolicy

M, P = model("llama3-70b"), ParallelSpec(tp=8, pp=4, dp=2, sp=True)
T = TrainSpec(seq=16384, micro_batches=8, policy=ActivationPolicy.from_mapping({"mlp_fc1": "offload-cpu"}))
PER_MB = 20 * 16384 * (57344 // 8) * 2
FWD_FLOPS = 1_979_711_488 * 16384 * 20 // 8


def _rank0(hw):
    return next(v for v in cpu_offload_verdicts(build_ledger(M, P, T, hardware=hw), hw) if v.pp_rank == 0)


def test_compute_window_from_flops_and_mfu():
    led = build_ledger(M, P, T, hardware=gpu("h100"))
    ct = compute_time(led, 0, gpu("h100"))
    assert ct.forward_flops == FWD_FLOPS
    assert ct.forward_s == pytest.approx(FWD_FLOPS / (989e12 * 0.40))
    assert ct.backward_s == pytest.approx(2 * ct.forward_s)


def test_fc1_offload_hides_behind_compute_on_pcie_gen5():
    v = _rank0(gpu("h100"))
    assert v.bytes_per_micro_batch == PER_MB and v.bytes_per_step == 8 * PER_MB
    assert v.required_out_bytes_per_s == pytest.approx(PER_MB / (FWD_FLOPS / 395.6e12))  # 22.9 GB/s
    assert v.required_out_bytes_per_s < 64e9 and v.hidden and v.link == "PCIe"


def test_fc1_offload_over_a_16_gbs_link_is_exposed_for_0p71_s_per_step():
    hw = replace(gpu("h100"), pcie_bw=16 * 10**9)
    v = _rank0(hw)
    move = PER_MB / 16e9  # 0.2936 s each way
    fwd = FWD_FLOPS / (989e12 * 0.40)
    assert not v.hidden
    assert v.exposed_s_per_step == pytest.approx(8 * (move - fwd))  # backward (0.41 s) hides it
    assert v.exposed_s_per_step == pytest.approx(0.709, abs=0.001)
    # the alternative: recompute fc1 instead, 2·h·2f/tp per token per layer, 8 micro-batches
    assert v.alt_recompute_flops_per_step == 2 * 8192 * 57344 * 16384 // 8 * 20 * 8


def test_pipeline_neighbours_share_a_node_only_when_tp_cp_dp_is_small():
    hw = gpu("h100")
    assert not same_node(P, hw, 0, 1)  # 16 GPUs per pipeline rank: always another node
    small = ParallelSpec(tp=2, pp=4)
    assert same_node(small, hw, 0, 3)  # 2 GPUs per rank: all four ranks in one 8-GPU node


def test_remote_offload_verdict_uses_nvlink_inside_a_node():
    m, p = model("llama3-8b"), ParallelSpec(tp=2, pp=4, sp=True)
    t = TrainSpec(seq=8192, micro_batches=8, policy=ActivationPolicy.from_mapping(
        {c: "offload-pp" for c in ("mlp_fc1", "mlp_act", "qkv", "norm_in")}))
    hw = gpu("h100")
    verdicts = remote_offload_verdicts(build_ledger(m, p, t, hardware=hw), hw)
    assert verdicts and all(v.link == "NVLink" and v.link_bytes_per_s == 450 * 10**9 for v in verdicts)


def test_the_smaller_micro_batch_alternative_fits_without_offload_at_the_same_tokens_per_step():
    """Micro-batch 2 × 8k with fc1 offloaded; without offload, micro-batch 1 × 16 per step fits."""
    hw = gpu("h100")
    t = replace(T, seq=8192, micro_batch=2)
    alt = smaller_micro_batch(build_ledger(M, P, t, hardware=hw), hw.hbm_bytes)
    assert (alt.micro_batch, alt.micro_batches) == (1, 16)
    direct = build_ledger(M, P, replace(t, micro_batch=1, micro_batches=16, policy=ActivationPolicy()),
                          hardware=hw)
    assert alt.peak_bytes == direct.peak.peak_total_bytes <= hw.hbm_bytes
    assert smaller_micro_batch(build_ledger(M, P, T, hardware=hw), hw.hbm_bytes) is None  # already 1


def test_ledger_json_reports_the_payments_per_micro_batch_and_per_step():
    d = build_ledger(M, P, T, hardware=gpu("h100")).to_dict()["ranks"][0]
    pay = d["payments"]
    assert pay["host_bytes_per_micro_batch"] == PER_MB
    assert pay["host_bytes_per_step"] == 8 * PER_MB
    assert pay["host_bytes"] == 4 * PER_MB  # four micro-batches in flight on rank 0 at the peak
    assert {m["tensor"] for m in d["moves"]} == {"mlp.fc1_out"}
