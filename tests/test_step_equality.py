"""The planner's vectorised step times (planner/time/timing.py) equal the scalar step model
(costs/stepscalar.py) term by term, on seeded random samples of fitting configurations: dense
and MoE models, ZeRO 0–3, every recompute mode, 1F1B / interleaved / DualPipe, context
parallelism, and every framework (megatron-core; megatron-2021 with its DP overlap only
without pipelining and scatter/gather send/recv; megatron-2022, that with SP and selective)."""
import random

import numpy as np
import pytest

from memledger import gpu, model
from memledger.costs.overlap import framework
from memledger.costs.published import KORTHIKANTI_2022, MEGATRON_2021
from memledger.costs.stepscalar import PARTS, step_parts
from memledger.planner import Constraints, PlanSpec, plan

SCENARIOS = {
    "llama3-8b, cp": dict(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(32,),
                          seq=8192, global_batch=64, constraints=Constraints(max_vpp=4)),
    "mixtral ep/etp": dict(model=model("mixtral-8x7b"), hardware=gpu("h100"), worlds=(32,),
                           seq=4096, global_batch=64, constraints=Constraints(max_vpp=2)),
    "deepseek-v3 dualpipe": dict(model=model("deepseek-v3"), hardware=gpu("h100"),
                                 worlds=(256,), seq=4096, global_batch=512,
                                 constraints=Constraints(max_vpp=2, max_cp=1)),
    "megatron-2021 GPT 18.4B": dict(model=MEGATRON_2021[3].model, hardware=gpu("a100-80gb"),
                                    worlds=(64,), seq=2048, global_batch=256,
                                    precision="fp16", framework="megatron-2021"),
    "fp8 recipe, mixtral ep (fp8 GEMMs but the router's)": dict(
        model=model("mixtral-8x7b"), hardware=gpu("h100"), worlds=(16,), seq=4096,
        global_batch=32, precision="fp8", constraints=Constraints(max_vpp=2)),
    "megatron-2022 GPT 22B (SP, selective, scatter/gather off under SP)": dict(
        model=KORTHIKANTI_2022[0].model, hardware=gpu("a100-80gb"), worlds=(16,), seq=2048,
        global_batch=32, precision="fp16", profile="paper", attention="eager",
        framework="megatron-2022"),
    "megatron-2021 GPT 7.5B, no pipeline": dict(
        model=MEGATRON_2021[2].model, hardware=gpu("a100-80gb"), worlds=(32,), seq=2048,
        global_batch=128, precision="fp16", framework="megatron-2021",
        constraints=Constraints(pp=1)),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_vectorised_step_time_equals_the_scalar_model_term_by_term(name):
    spec = PlanSpec(**SCENARIOS[name])
    result = plan(spec, parts=True)
    assert result.n_fits > 0
    rng = random.Random(13)
    picks = rng.sample(range(result.n_fits), min(12, result.n_fits))
    fw = framework(spec.framework)
    for i, row in zip(picks, result.rows(np.array(picks))):
        p, t = result.specs(row)
        scalar = step_parts(spec.model, spec.hardware, fw, p, t, spec.node_size, spec.runtime)
        for k in PARTS:
            assert result.evaluated.parts[k][i] == pytest.approx(scalar[k], rel=1e-9, abs=1e-12), (
                name, k, row)
        assert result.evaluated.seconds[i] == pytest.approx(sum(scalar.values()), rel=1e-9)
