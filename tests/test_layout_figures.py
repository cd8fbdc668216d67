"""The step-time model orders the configurations Narayanan et al. 2021 (arXiv 2104.04473)
measured side by side as they found them (costs/published.LAYOUT_FIGURES; docs/step-time.md,
"Layout comparisons"): Fig. 12 (GPT 175B on 96 A100) faster interleaved at every batch, the gap
closing as the batch grows (§5.3.2); Fig. 13 (GPT 162.2B, tp × pp = 64, dp 1) fastest at
tp = 8, the GPUs of a node; Fig. 14 (GPT 5.9B, tp 1, pp × dp = 64) and Fig. 15 (GPT 5.9B,
pp 1, tp × dp = 64) slower at every step up in pp or tp, at every batch size the paper ran;
Fig. 16 (GPT 91B, tp 8 × pp 8) fastest at micro-batch 2 (§5.5) — which the model reproduces at
batch 512 and not at 128 (a strict expected failure with the numbers)."""
from dataclasses import replace

import pytest

from memledger.costs.published import LAYOUT_FIGURES, Layout
from memledger.planner.answer.reference import figure_agrees, figure_seconds

FIGS = {f.name.split(":")[0]: f for f in LAYOUT_FIGURES}
CASES = [(fig, b) for fig in LAYOUT_FIGURES for b in fig.global_batches]
MISSES = {("Fig. 16", 128): "micro-batch 1 predicted fastest: 159 against 156 TFLOP/s at mb 2 "
                            "(docs/step-time.md, 'Micro-batch size and interleaving')"}


@pytest.mark.parametrize("fig, global_batch", CASES,
                         ids=[f"{f.name.split(':')[0]}-batch{b}" for f, b in CASES])
def test_the_predicted_order_of_the_papers_layouts_is_the_measured_one(fig, global_batch,
                                                                       request):
    miss = MISSES.get((fig.name.split(":")[0], global_batch))
    if miss:
        request.applymarker(pytest.mark.xfail(strict=True, reason=miss))
    assert figure_agrees(fig, global_batch), figure_seconds(fig, global_batch)


def test_fig12s_interleaving_gain_shrinks_as_the_batch_grows():
    """§5.3.2: the gap closes as the batch grows (a smaller 1F1B bubble, and send/recv per
    sample that interleaving multiplies)."""
    fig = FIGS["Fig. 12"]
    gains = []
    for b in fig.global_batches:
        plain, interleaved = figure_seconds(fig, b)
        gains.append(plain / interleaved)
    assert all(g > 1 for g in gains)
    assert gains == sorted(gains, reverse=True) and gains[0] > gains[-1]


def test_the_figures_are_the_run_scripts_layouts():
    """run_figure_12.sh: 96 layers, h 12288, tp 8, pp 12 on 96 GPUs, 2 layers per virtual stage;
    run_figure_13.sh: 32 layers, h 20480, 128 heads, tp = 64 / pp; run_figure_14/15.sh: 32
    layers, h 3840, 32 heads, tp 1 (14) or pp 1 (15); run_figure_16.sh: 32 layers, h 15360,
    128 heads, tp 8 × pp 8, micro-batch 1–8; all but Fig. 12 on 64 GPUs."""
    f12, f13, f14, f15, f16 = (FIGS[f"Fig. {n}"] for n in (12, 13, 14, 15, 16))
    assert (f12.model.n_layers, f12.model.hidden, f12.world) == (96, 12288, 96)
    assert {x.vpp for x in f12.layouts} == {1, 96 // 12 // 2}
    assert (f13.model.n_layers, f13.model.hidden, f13.model.n_heads) == (32, 20480, 128)
    assert (f14.model.hidden, f15.model.hidden) == (3840, 3840)
    assert [x.tp * x.pp for x in f13.layouts] == [64] * 5
    assert {x.tp for x in f14.layouts} == {1} and {x.pp for x in f15.layouts} == {1}
    assert (f16.model.n_layers, f16.model.hidden, f16.model.n_heads) == (32, 15360, 128)
    assert [x.micro_batch for x in f16.layouts] == [1, 2, 4, 8]
    run = f14.run(Layout(1, 8), 512)
    assert run.layout["dp"] == 8 and run.layout["micro_batch"] == 1
    assert run.layout["recompute"] == "full" and run.framework == "megatron-2021"
    run = f12.run(Layout(8, 12, vpp=4), 36)
    assert run.layout["schedule"] == "interleaved" and run.layout["dp"] == 1


def test_an_order_the_model_does_not_reproduce_is_reported_as_such():
    """The check can fail: Fig. 13 claimed fastest at tp = 2 (the model, like the paper,
    puts tp 2 × pp 32 far behind); Fig. 14 reversed; Fig. 12 claimed faster without
    interleaving."""
    assert not figure_agrees(replace(FIGS["Fig. 13"], fastest=Layout(2, 32)), 32)
    reversed_fig14 = replace(FIGS["Fig. 14"], layouts=FIGS["Fig. 14"].layouts[::-1])
    assert not figure_agrees(reversed_fig14, 512)
    assert not figure_agrees(replace(FIGS["Fig. 12"], fastest=Layout(8, 12)), 60)
