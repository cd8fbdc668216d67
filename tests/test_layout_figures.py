"""The step-time model orders the layouts Narayanan et al. 2021 (arXiv 2104.04473) compared on
64 A100 as they measured (docs/step-time.md, "Layout comparisons"): Fig. 13 (GPT 162.2B, tp × pp
= 64, dp 1) peaks at tp = 8, the GPUs of a node; Fig. 14 (GPT 5.9B, tp 1, pp × dp = 64) and
Fig. 15 (GPT 5.9B, pp 1, tp × dp = 64) lose throughput at every step up in pp or tp, at every
batch size the paper ran. Layouts, batch sizes and micro-batch 1 with full recompute from the
paper's run scripts (NVIDIA/Megatron-LM examples/sc21/run_figure_13/14/15.sh)."""
import pytest

from memledger.costs.published import MEGATRON_2021_FEATURES, MEGATRON_SEQ, PublishedRun, gpt
from memledger.planner import plan
from memledger.planner.reference import _spec

GPT_162B = gpt("162.2", 128, 20480, 32)  # run_figure_13.sh: 32 layers, h 20480, 128 heads
GPT_5P9B = gpt("5.9", 32, 3840, 32)  # run_figure_14/15.sh: 32 layers, h 3840, 32 heads
DEGREES = (2, 4, 8, 16, 32)


def step_seconds(m, tp: int, pp: int, global_batch: int) -> float:
    run = PublishedRun(name=f"tp{tp} pp{pp}", model=m, gpu="a100-80gb", world=64,
                       seq=MEGATRON_SEQ, global_batch=global_batch,
                       layout=dict(tp=tp, pp=pp, cp=1, dp=64 // (tp * pp), zero=0,
                                   recompute="full", micro_batch=1, vpp=1, schedule="1f1b"),
                       tflops_per_gpu=None, flops_convention="megatron-eq3",
                       framework="megatron-2021", precision="fp16", profile="paper",
                       attention="eager", source="Narayanan et al. 2021 Figs. 13-15",
                       constraints=MEGATRON_2021_FEATURES)
    result = plan(_spec(run, **run.layout))
    assert result.n_fits, f"tp={tp} pp={pp} does not fit"
    return float(result.evaluated.seconds.min())


@pytest.mark.parametrize("global_batch", [32, 128])
def test_fig13_162b_on_64_gpus_is_fastest_at_tp_8_pp_8(global_batch):
    secs = {tp: step_seconds(GPT_162B, tp, 64 // tp, global_batch) for tp in DEGREES}
    assert min(secs, key=secs.get) == 8, secs


@pytest.mark.parametrize("global_batch", [32, 512])
def test_fig14_5p9b_slows_down_at_every_step_up_in_pipeline_depth(global_batch):
    secs = [step_seconds(GPT_5P9B, 1, pp, global_batch) for pp in DEGREES]
    assert secs == sorted(secs) and len(set(secs)) == len(secs), secs


@pytest.mark.parametrize("global_batch", [32, 128, 512])
def test_fig15_5p9b_slows_down_at_every_step_up_in_tensor_parallelism(global_batch):
    secs = [step_seconds(GPT_5P9B, tp, 1, global_batch) for tp in DEGREES]
    assert secs == sorted(secs) and len(set(secs)) == len(secs), secs
