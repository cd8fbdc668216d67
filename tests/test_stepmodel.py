"""The terms of the step-time model (memledger.costs.gemm, collectives, stepmodel) and the
planner's breakdown and throughput built on them."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memledger import gpu, model
from memledger.costs import collectives as co
from memledger.costs import gemm
from memledger.model.params import layer_groups
from memledger.planner import Constraints, PlanSpec, plan
from memledger.planner.answer.breakdown import breakdown
from memledger.planner.time.throughput import throughput
from memledger.planner.time.timing import PARTS

dims = st.integers(1, 1 << 16)


@given(dims, dims, dims, st.integers(1, 8))
def test_a_larger_gemm_never_runs_at_lower_efficiency(m, n, k, grow):
    hw = gpu("h100")
    assert gemm.gemm_efficiency(hw, m * grow, n, k) >= gemm.gemm_efficiency(hw, m, n, k)
    assert 0 < gemm.gemm_efficiency(hw, m, n, k) < gemm.curve(hw).e_max


def test_h100_square_gemm_curve_reproduces_its_benchmark_points_at_boost_clock():
    """CUTLASS 3.5 on H100: ≈ 58 / 70 / 75 % of peak at M=N=K = 1024 / 4096 / 8192."""
    c = gemm.curve(gpu("h100"))
    eff = [c.e_max * n / (n + c.n_half) for n in (1024, 4096, 8192)]
    assert eff == pytest.approx([0.58, 0.72, 0.75], abs=0.015)


def test_a_group_across_nodes_is_slower_and_all_reduce_moves_twice_a_gather():
    hw = gpu("h100")
    inside, across = co.link(hw, 8, 8), co.link(hw, 16, 8)
    buf = 1 << 30
    assert co.gather_seconds(buf, 8, *inside) < co.gather_seconds(buf, 8, *across)
    t_ag, t_ar = co.gather_seconds(buf, 8, *inside), co.all_reduce_seconds(buf, 8, *inside)
    assert t_ar == pytest.approx(2 * t_ag, rel=0.01)
    assert co.gather_seconds(buf, 1, *inside) == 0


@given(st.floats(1, 1e7), st.integers(1, 1024))
def test_topk_imbalance_is_at_least_one_and_shrinks_with_more_rows(rows, n):
    a, b = co.topk_imbalance(rows, n), co.topk_imbalance(rows * 4, n)
    assert a >= b >= 1.0
    assert co.topk_imbalance(rows, 1) == 1.0


def small_spec(**kw):
    return PlanSpec(model=model("mixtral-8x7b"), hardware=gpu("h100"), worlds=(32,), seq=4096,
                    global_batch=64, constraints=Constraints(max_vpp=2, **kw))


def test_the_breakdown_of_a_layout_sums_to_its_step_time():
    result = plan(small_spec())
    for row in result.rows(result.top(5)) + result.rows(result.pareto[-3:]):
        parts = breakdown(result.spec, row)
        assert set(parts) == set(PARTS) and min(parts.values()) >= 0
        assert sum(parts.values()) == pytest.approx(row["seconds"], rel=1e-9)


def test_throughput_is_tokens_over_seconds_and_mfu_is_tflops_over_peak():
    spec = small_spec()
    tps, tflops, mfu = throughput(spec, 2.0, 32)
    assert tps == 64 * 4096 / 2.0
    assert mfu == pytest.approx(100 * tflops * 1e12 / spec.hardware.bf16_flops)


def test_more_gpus_than_the_model_can_use_gives_an_empty_plan_with_the_reason():
    # 2^21 GPUs (the plausibility bound) for a 16-layer model, 128 tokens, one sequence per
    # step: tp·pp·cp cannot reach the world size without splitting a head, a layer or a token
    spec = PlanSpec(model=model("llama3.2-1b"), hardware=gpu("h100"), worlds=(1 << 21,),
                    seq=128, global_batch=1)
    result = plan(spec)
    assert result.n_fits == 0 and "no valid layout" in result.reason


def test_a_global_batch_no_data_parallel_size_divides_gives_an_empty_plan_with_the_reason():
    spec = PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(64,), seq=4096,
                    global_batch=7, constraints=Constraints(tp=1, pp=1, cp=1))
    result = plan(spec)
    assert result.n_fits == 0 and "global_batch" in result.reason


def test_an_expert_all_to_all_over_two_nodes_costs_less_than_every_row_on_the_nic():
    """DeepSeek-V3, ep 16 over two 8-GPU nodes: half the dispatched rows stay in the node
    (NVLink) while the other half cross the NIC, so the all-to-all costs well under the
    15/16-over-the-NIC charge — and above the ep 8 one inside a node."""
    from memledger.costs.overlap import framework
    from memledger.costs.stepmodel import Setup, ep_seconds
    m, hw = model("deepseek-v3"), gpu("h100")
    su = Setup(m, hw, framework("megatron-core"), 4096, 1, 1, 16, 8, 2)
    tokens = 4096.0
    a2a16, _ = ep_seconds(su, tokens, 16, 1)
    a2a8, _ = ep_seconds(su, tokens, 8, 1)
    rows = tokens * m.moe.top_k
    nic, alpha = co.link(hw, 16, 8)
    all_nic = 4 * co.all_to_all_seconds(rows * m.hidden * 2, 16, nic, alpha,
                                        co.topk_imbalance(rows, 16))
    assert a2a8 < a2a16 < 0.6 * all_nic


def test_megatron_2021_adds_every_micro_batchs_gradients_megatron_core_fuses_the_add():
    """Megatron-LM 2021's own DDP adds each micro-batch's fp16 gradients into its zeroed buffer
    (m adds of 3 × the gradient bytes at 80 % of HBM bandwidth), PyTorch DDP (no pipeline)
    from the second micro-batch on; Megatron-Core's weight-gradient GEMMs accumulate in place."""
    from memledger.costs import stepmodel as sm
    from memledger.costs.overlap import framework
    hw, grads = gpu("a100-80gb"), 4e9  # 2 G parameters' fp16 gradients
    def setup(fw, pp):
        return sm.Setup(model("llama3-8b"), hw, framework(fw), 2048, 8, 1, 6, 8, 2, pp)
    one_add = 3 * grads / (2039e9 * 0.8)  # 7.36 ms
    assert sm.accumulation_seconds(setup("megatron-2021", 64), grads, 512) == \
        pytest.approx(512 * one_add) == pytest.approx(3.7666, rel=1e-4)
    assert sm.accumulation_seconds(setup("megatron-2021", 1), grads, 4) == \
        pytest.approx(3 * one_add)
    assert sm.accumulation_seconds(setup("megatron-2021", 1), grads, 1) == 0
    assert sm.accumulation_seconds(setup("megatron-core", 64), grads, 512) == 0
    per_b = sm.accumulation_seconds(setup("megatron-2021", 4), np.array([[grads]]),
                                    np.array([1.0, 8.0]))
    np.testing.assert_allclose(per_b, [[one_add, 8 * one_add]])


def test_the_loss_moves_52_bytes_a_16_bit_logit_over_forward_and_backward():
    """Megatron's vocab-parallel cross-entropy: cast to fp32 (2 + 4), max 4, subtract 8, exp 8,
    sum 4, divide 8; backward multiply 8, cast back (4 + 2) = 52 bytes a logit, 40 without the
    casts; a step counts the head 3 × its forward, so the forward carries a third of them."""
    from memledger.costs import stepmodel as sm
    from memledger.costs.overlap import framework
    assert (sm.cross_entropy_bytes_per_logit(2), sm.cross_entropy_bytes_per_logit(4)) == (52, 40)
    m, hw = model("llama3-8b"), gpu("h100")
    su = sm.Setup(m, hw, framework("megatron-core"), 4096, 1, 1, 8, 8, 2, 1)
    tokens, vocab = 4096, m.vocab
    loss = 3 * (sm.head_forward(su, tokens, vocab) - gemm.gemm_seconds(hw, tokens, vocab,
                                                                       m.hidden))
    assert loss == pytest.approx(52 * tokens * vocab / (3350e9 * 0.8))  # 10.2 ms


def test_an_fp16_optimizer_step_moves_52_bytes_a_parameter_bf16_with_fp32_gradients_38():
    """Pass by pass (stepmodel.optimizer_bytes_per_param): fp16 — Adam on the fp32 master and
    states 2·(4 + 8) reading the fp32 main gradient 4, the master copied out to the fp16 weight
    4 + 2, the fp16 gradient copied to fp32 2 + 4 and unscaled in place 8, its norm read 4;
    Megatron bf16 — no copy of the (already fp32) gradient, no loss scaling; pure bf16 — the
    weight itself updated, bf16 states."""
    from memledger.costs.stepmodel import optimizer_bytes_per_param
    from memledger.specs.train import TrainSpec
    got = {r: optimizer_bytes_per_param(TrainSpec(precision=r))
           for r in ("fp16", "megatron", "mixed16", "bf16", "fp32")}
    assert got == {"fp16": 52, "megatron": 38, "mixed16": 34, "bf16": 16, "fp32": 32}


def test_an_fp8_recipe_runs_the_layers_linear_gemms_at_the_fp8_peak_and_nothing_else():
    """Transformer Engine fp8 (the `fp8` recipe): every linear GEMM of a layer at the GPU's dense
    fp8 peak, 1,979 against 989 TFLOP/s on H100, on the same efficiency curve — so a Llama 3
    layer's GEMM seconds scale by 989 / 1979; the MoE router, the attention core and the output
    head stay bf16; an A100, without fp8 tensor cores, runs it all at its bf16 rate."""
    from memledger.costs import stepmodel as sm
    from memledger.costs.overlap import framework

    def fwd(name, hw, fp8, kind="dense"):
        su = sm.Setup(model(name), gpu(hw), framework("megatron-core"), 4096, 4, 1, 8, 8, 2,
                      1, fp8)
        return sm.layer_forward(su, kind, 8192.0), sm.head_forward(su, 8192.0, 128256)

    (bf, head_bf), (f8, head_f8) = fwd("llama3-8b", "h100", False), fwd("llama3-8b", "h100", True)
    assert f8["gemm"] == pytest.approx(bf["gemm"] * 989 / 1979)
    assert (f8["attn"], f8["elem"], head_f8) == (bf["attn"], bf["elem"], head_bf)
    a100 = fwd("llama3-8b", "a100-80gb", False)[0], fwd("llama3-8b", "a100-80gb", True)[0]
    assert a100[0]["gemm"] == a100[1]["gemm"]
    su = sm.Setup(model("deepseek-v3"), gpu("h100"), framework("megatron-core"), 4096, 1, 1, 8,
                  8, 2, 1, True)
    router = next(g for g in layer_groups(model("deepseek-v3"), "moe", active=True)
                  if g.name == "moe.router")
    assert sm._gemm_group(su, router, 4096.0, 8, 1) == pytest.approx(
        gemm.gemm_seconds(su.hw, 4096.0, router.cols, router.rows, 1))
