"""The planner sweeps Megatron-style layouts only: every runtime knob it does not vectorise is
refused by name (SpecError naming the field), never silently swept as if it were the default."""
from __future__ import annotations

import pytest

from memledger.errors import SpecError
from memledger import gpu, model
from memledger.planner import PlanSpec
from memledger.specs.runtime import RuntimeSpec

KNOBS = [("tp_engine", "dtensor"), ("zero1_partition", "greedy-params"),
         ("fsdp_reshard_after_forward", "never"), ("torch_compile", True),
         ("fsdp_expert_shard", "dim0"), ("compile_loss", "on"), ("float8", "tensorwise"),
         ("pp_engine", "pytorch")]


@pytest.mark.parametrize("field, value", KNOBS)
def test_a_knob_the_sweep_does_not_vectorise_is_refused_by_name(field, value):
    with pytest.raises(SpecError) as e:
        PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(64,), seq=4096,
                 global_batch=64, runtime=RuntimeSpec(**{field: value}))
    assert e.value.field == field, (e.value.field, str(e.value))


def test_torchtitan_pipelines_are_torchs_so_the_sweep_refuses_them_unless_told_megatron():
    base = dict(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(64,), seq=4096,
                global_batch=64)
    with pytest.raises(SpecError) as e:
        PlanSpec(**base, runtime=RuntimeSpec(loop="torchtitan"))
    assert e.value.field == "pp_engine" and "torch.distributed.pipelining" in str(e.value)
    PlanSpec(**base, runtime=RuntimeSpec(loop="torchtitan", pp_engine="megatron"))


def test_the_defaults_are_accepted():
    PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(64,), seq=4096,
             global_batch=64, runtime=RuntimeSpec())
