"""The step-time model against published trainings (memledger.costs.published): every published
layout fits, its predicted TFLOP/s per GPU is within ±15 % of the paper's, and it ranks in the
planner's fastest 10 % for the same model, GPUs, sequence and global batch — among the layouts
the planner lists (planner.answer.groups; `reference` says why, and reports the rank among
configurations too)."""
import pytest

from memledger import gpu, model
from memledger.costs.published import (DEEPSEEK_V3, KORTHIKANTI_2022, LLAMA3, MEGATRON_2021,
                                       megatron_eq3_flops, megatron_model_flops)
from memledger.planner import PlanSpec, plan
from memledger.planner.answer.reference import check, in_fastest_tenth

WITH_THROUGHPUT = MEGATRON_2021 + KORTHIKANTI_2022 + LLAMA3
# Measured (docs/step-time.md, "Rank misses"): with every documented Megatron-LM 2021 behaviour
# modelled (the run scripts' micro-batch and interleaving, PyTorch DDP overlap without
# pipelining, scatter/gather send/recv) and its memory as run (no sequence parallelism, the
# paper profile's dropout and eager attention), and the search bounded by what Megatron-LM 2021
# could run (costs.overlap: 1F1B or interleaved at pp > 2 with m % pp = 0, equal stages, no
# ZeRO or CP), and with the layout orderings of the paper's own Figs. 13-15 reproduced
# (tests/test_layout_figures.py), the model prefers tp=2-4 with deeper interleaved pipelines to
# the published tp=8 for 18.4B, 39.1B and 145.6B, a deeper pipeline for 529.6B and the
# interleaved schedule for 1T, where only 6-14 layouts fit; with the 2021 framework's separate
# gradient-accumulation add (stepmodel.accumulation_seconds, ~1/micro-batch size) the published
# axes at a larger micro-batch (another row of the Planner's table) also edge ahead for 76.1B
# (by 0.2 %), 145.6B and 529.6B. No sourced term was found that makes the published layouts
# faster (docs/step-time.md: Figs. 12 and 16 bound the one candidate, a fixed cost per
# send/recv, to 0-3.5 ms); strict: a fix shows up. Korthikanti et al. 2022's rows (dp 1) show
# the same preference: the published axes at micro-batch 2 or interleaved, or a narrower tp
# with a deeper interleaved pipeline (docs/step-time.md, "Korthikanti et al. 2022").
RANK_MISSES = {  # the published layout's rank among the planner's layouts (its table's rows)
    "Megatron-LM GPT 18.4B": "layout 17 / 95 (configuration 28 / 125): tp=2 pp=4 vpp=5 is "
                             "8.03 vs 8.82 s",
    "Megatron-LM GPT 39.1B": "layout 39 / 144 (configuration 94 / 236): pp=2 cannot "
                             "interleave; tp=4 pp=4 vpp=6 is 12.46 vs 14.40 s",
    "Megatron-LM GPT 76.1B": "layout 2 / 8: the same axes at micro-batch 7 (vpp=15) is 15.01 "
                             "vs 15.04 s (its vpp=5; the script's vpp=3: 15.15 s)",
    "Megatron-LM GPT 145.6B": "layout 6 / 45: tp=4 pp=16 vpp=5 is 22.84 vs 24.30 s; the "
                              "published axes at micro-batch 3-4 (vpp=10) also faster",
    "Megatron-LM GPT 529.6B": "layout 3 / 14: pp=21 vpp=5 is 53.78 vs 55.34 s; the "
                              "published axes at micro-batch 2 54.84 s",
    "Megatron-LM GPT 1008.0B": "layout 2 / 6: the same axes interleaved (vpp=2, another "
                               "schedule) is 104.28 vs 108.90 s",
    # Korthikanti et al. 2022 Table 5 (dp 1: 1-14 layouts fit, so only rank 1 is in the tenth)
    "Korthikanti 2022 GPT 22B, full recompute": "layout 2 / 13: tp=2 pp=4 vpp=12 inside the "
                                                "node is 1.35 vs 1.44 s",
    "Korthikanti 2022 GPT 175B, full recompute": "layout 4 / 14: tp=4 pp=16 vpp=6 mb=2 is "
                                                 "17.84 vs 19.38 s",
    "Korthikanti 2022 GPT 175B, SP + selective": "layout 2 / 5: the same axes at micro-batch "
                                                 "2 (vpp=12) is 13.71 vs 14.36 s",
    "Korthikanti 2022 GPT 530B, full recompute": "layout 2 / 4: the same axes at micro-batch "
                                                 "2 is 54.52 vs 55.02 s",
    "Korthikanti 2022 GPT 1T, full recompute": "layout 2 / 4: the same axes interleaved "
                                               "(vpp=2) is 103.95 vs 108.57 s",
}


@pytest.fixture(scope="module")
def checks():
    return {}


def _check(checks, run):
    if run.name not in checks:
        checks[run.name] = check(run)
    return checks[run.name]


# The megatron profile's selective recompute is Megatron-Core's default, core_attn only
# (transformer_config.py:1193-1194; measured by `memledger validate --engine megatron-core`): at
# tp 8, pp 16, 8,192 GPUs it keeps each layer's norm and SwiGLU outputs, and the 405B layout fits
# 80 GB only under full recompute (15.0 s; selective with the norm and activation outputs also
# recomputed: 11.2 s). Meta's stack is not Megatron-Core and its recompute set is not published.
TFLOPS_MISSES = {
    "Llama 3 405B, 8,192 GPUs, seq 8,192": "fits only under full recompute with Megatron-Core's "
                                           "default selective set: 344 vs 430 TFLOP/s",
}


@pytest.mark.parametrize("run", WITH_THROUGHPUT, ids=lambda r: r.name)
def test_published_layout_fits_and_its_predicted_tflops_are_within_15_percent(run, checks,
                                                                               request):
    if run.name in TFLOPS_MISSES:
        request.applymarker(pytest.mark.xfail(strict=True, reason=TFLOPS_MISSES[run.name]))
    c = _check(checks, run)
    assert c.fits
    assert abs(c.error) <= 0.15, f"{c.tflops_per_gpu:.0f} vs {run.tflops_per_gpu} TFLOP/s"


@pytest.mark.parametrize("run", WITH_THROUGHPUT, ids=lambda r: r.name)
def test_published_layout_ranks_in_the_planners_fastest_10_percent(run, checks, request):
    if run.name in RANK_MISSES:
        request.applymarker(pytest.mark.xfail(strict=True, reason=RANK_MISSES[run.name]))
    c = _check(checks, run)
    assert in_fastest_tenth(c.layout_rank, c.n_layouts), \
        f"layout {c.layout_rank} of {c.n_layouts} (configuration {c.rank} of {c.n_fits})"


@pytest.mark.parametrize("run", WITH_THROUGHPUT, ids=lambda r: r.name)
def test_a_layout_ranks_no_lower_than_its_configuration(run, checks):
    """Every layout faster than the published one has a configuration faster than it; a
    configuration may be faster and still the published layout (another vpp)."""
    c = _check(checks, run)
    assert 1 <= c.layout_rank <= c.rank and c.n_layouts <= c.n_fits


def test_the_fastest_tenth_always_holds_the_first_and_no_more_than_a_tenth():
    assert in_fastest_tenth(1, 6) and in_fastest_tenth(1, 1) and in_fastest_tenth(4, 45)
    assert not in_fastest_tenth(2, 14) and not in_fastest_tenth(5, 45)
    assert in_fastest_tenth(10, 100) and not in_fastest_tenth(11, 100)


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


def test_korthikanti_table5_steps_are_the_mfu_megatron_lm_prints():
    """Korthikanti et al. 2022 Table 5's selective-recompute steps (1.10 / 13.75 / 37.83 / 71.49 s
    on 8 / 64 / 280 / 512 A100, as calculon-ai/calculon transcribes them with Table 3's batches)
    give, by the paper's model-FLOP count, the MFU NVIDIA/Megatron-LM's README prints for the
    22B / 175B / 530B / 1T runs: 41.5 / 51.4 / 56.0 / 56.3 % of 312 TFLOP/s (to 0.15 point)."""
    selective = [r for r in KORTHIKANTI_2022 if r.layout["recompute"] == "selective"]
    mfu = [r.tflops_per_gpu / 312 * 100 for r in selective]
    assert mfu == pytest.approx([41.5, 51.4, 56.0, 56.3], abs=0.16)
    run = selective[-1]  # 1T: 72·512·2048·128·25600²·(1 + 2048/153600 + 51200/39321600)
    assert megatron_model_flops(run.model, run.seq, run.global_batch) == pytest.approx(
        72 * 512 * 2048 * 128 * 25600**2 * (1 + 2048 / 153600 + 51200 / 39321600))
    assert [r.framework for r in KORTHIKANTI_2022[:2]] == ["megatron-2021", "megatron-2022"]


def test_llama_405b_on_1024_h100_at_8k_uses_tensor_parallelism_inside_the_node():
    spec = PlanSpec(model=model("llama3.1-405b"), hardware=gpu("h100"), worlds=(1024,), seq=8192,
                    global_batch=2048)
    result = plan(spec)
    top = result.rows(result.top(20))
    assert len(top) == 20
    assert all(1 < r["tp"] <= spec.node_size for r in top), [r["tp"] for r in top]


def _megatron(name):
    return next(r for r in MEGATRON_2021 if r.name == f"Megatron-LM GPT {name}")


def _published_parts(name) -> dict:
    """The step breakdown of a Megatron row's published configuration (fastest with its axes)."""
    from memledger.planner.answer.reference import _spec
    from memledger.planner.answer.breakdown import breakdown
    run = _megatron(name)
    result = plan(_spec(run, **run.layout))
    return breakdown(result.spec, result.rows(result.top(1))[0])


def test_megatron_rows_pin_the_micro_batch_and_interleaving_of_the_papers_run_script():
    """NVIDIA/Megatron-LM examples/sc21/run_table_1.sh: 18B MBS=8, no interleaving; 76B MBS=2
    with 5 layers per virtual stage (60 layers / pp 4 / 5 = 3 chunks)."""
    lay = _megatron("18.4B").layout
    assert (lay["micro_batch"], lay["vpp"], lay["schedule"]) == (8, 1, "1f1b")
    lay = _megatron("76.1B").layout
    assert (lay["micro_batch"], lay["vpp"], lay["schedule"]) == (2, 3, "interleaved")


def test_megatron_2021_hides_the_dp_all_reduce_only_without_pipelining():
    """PyTorch DDP (pp = 1 rows) reduces during the last backward; Megatron's local DDP
    (pp > 1 rows) after the flush: the 18.4B step shows no DP sync, the 39.1B step all of it."""
    for name, hidden in (("18.4B", True), ("39.1B", False)):
        parts = _published_parts(name)
        assert (parts["dp_sync"] == 0) == hidden, (name, parts["dp_sync"])
        assert parts["dp_sync"] >= 0


def test_megatron_2021_runs_at_one_sequence_a_micro_batch_spend_4_percent_adding_gradients():
    """The 2021 framework adds each micro-batch's fp16 gradients in a kernel of its own
    (stepmodel.accumulation_seconds): none at 1.7B (one micro-batch under PyTorch DDP), 0.3 %
    at 18.4B (m = 4, three adds), 3.8 % of 1T's step (m = 512, every add a pass over the rank's
    2.1 G parameters' gradients)."""
    for name, low, high in (("1.7B", 0, 0), ("18.4B", 0.002, 0.004), ("1008.0B", 0.036, 0.040)):
        parts = _published_parts(name)
        share = parts["grad_accum"] / sum(parts.values())
        assert low <= share <= high, (name, share)


def test_the_planners_send_recv_term_equals_the_scalar_model_for_a_published_layout():
    """Vectorised (planner breakdown) and scalar (costs.stepmodel on one layout) agree: 76.1B,
    tp 8 pp 4 vpp 3, mb 2, m = 1792 / 32 / 2 = 28 micro-batches, each crossing 2·3 chunk
    boundaries with scatter/gather (1/8 of b·s·h over the NIC, all-gathered over NVLink)."""
    from memledger.costs import stepmodel as sm
    from memledger.costs.overlap import framework
    from memledger.planner.answer.reference import _spec
    from memledger.planner.answer.breakdown import breakdown
    run = _megatron("76.1B")
    result = plan(_spec(run, **run.layout))
    row = result.rows(result.top(1))[0]
    hw = gpu(run.gpu)
    su = sm.Setup(run.model, hw, framework("megatron-2021"), run.seq, 8, 1, 32,
                  hw.gpus_per_node, 2, 4)
    tokens = 2 * run.seq
    scalar = row["micro_batches"] * float(sm.p2p_seconds(su, tokens, 3))
    assert row["micro_batches"] == 28
    assert breakdown(result.spec, row)["pp_p2p"] == pytest.approx(scalar, rel=1e-9)
    whole = sm.p2p_seconds(sm.Setup(run.model, hw, framework("megatron-core"), run.seq, 1, 1,
                                    256, hw.gpus_per_node, 2, 4), tokens, 3)
    assert float(sm.p2p_seconds(su, tokens, 3)) < float(whole) / 4  # tp = 8 ranks share it


def test_megatron_2021_runs_are_planned_with_their_memory_as_run():
    """Eager attention with dropout (the paper profile, Korthikanti et al. 2022 §4) and no
    sequence parallelism: the published 18.4B layout's row has sp False, and its peak is the
    scalar ledger's for that row — above the same layout's peak with SP switched on."""
    from dataclasses import replace

    from memledger import build_ledger
    from memledger.planner.answer.reference import _spec
    run = _megatron("18.4B")
    spec = _spec(run, **run.layout)
    assert (spec.profile, spec.attention, spec.framework) == ("paper", "eager", "megatron-2021")
    result = plan(spec)
    row = result.rows(result.top(1))[0]
    assert (row["tp"], row["sp"]) == (8, False)
    p, t = result.specs(row)
    assert build_ledger(spec.model, p, t, spec.runtime).peak.peak_total_bytes == row["peak_bytes"]
    with_sp = build_ledger(spec.model, replace(p, sp=True), t, spec.runtime)
    assert with_sp.peak.peak_total_bytes < row["peak_bytes"]
