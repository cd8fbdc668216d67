"""torchtitan 0.3's CUDA-graph step (memledger.ledger.titan_graphs): where it runs, what it keeps.
The harness measures it as the graph replays it, with the gradients zeroed in place
(`--engine-config ... grads=kept`, validation/engine-torchtitan.json)."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from memledger import build_ledger, model
from memledger.engine.titan_compare import case_from_dict, compare
from memledger.errors import SpecError
from memledger.specs import ParallelSpec, TrainSpec
from memledger.specs.runtime import RuntimeSpec

STORED = {e["case"]: e for e in json.loads(
    (Path(__file__).parent.parent / "validation" / "engine-torchtitan.json").read_text())[
        "measurements"]}
TRAIN = TrainSpec(seq=4096, precision="fsdp2-mixed", profile="hf", vocab_pad=1, recompute="op")


def _rank0(p, **rt):
    return build_ledger(model("llama3-8b"), p, TRAIN, RuntimeSpec(loop="torchtitan", **rt)).ranks[0]


def test_the_graph_keeps_every_gradient_from_the_steps_start():
    """Under the graph the sharded gradients are zeroed, not freed: alive at the loss, where
    the eager step has none yet. 8B FSDP 8: the whole gradient row, 4,015,130,624 B, more."""
    p = ParallelSpec(dp=8, zero=3)
    graph, eager = _rank0(p), _rank0(p, cuda_graphs="off")
    assert graph.rows["gradients"] == eager.rows["gradients"] == 4_015_130_624
    loss = lambda r: next(e for e in r.timeline if e.phase == "loss-backward")  # noqa: E731
    assert loss(graph).gradients == 4_015_130_624 and loss(eager).gradients == 0
    assert graph.peak_allocated_bytes > eager.peak_allocated_bytes


@pytest.mark.parametrize("p, rt, runs", [
    (ParallelSpec(dp=8, zero=3), {}, True),
    (ParallelSpec(dp=4, pp=2, zero=3), {}, False),  # torchtitan refuses the graph under PP
    (ParallelSpec(dp=8, zero=3), {"torchtitan_version": "0.2"}, False),  # no graph before 0.3
    (ParallelSpec(dp=8, zero=3), {"cuda_graphs": "off"}, False)])
def test_auto_runs_the_graph_where_torchtitan_03_does(p, rt, runs):
    from memledger.ledger.titan_graphs import graphs_run
    from memledger.specs.loop import resolve_loop
    r = RuntimeSpec(loop="torchtitan", **rt)
    assert graphs_run(p, TRAIN, r, resolve_loop(r, TRAIN.profile)) == runs


@pytest.mark.parametrize("p, rt", [(ParallelSpec(dp=4, pp=2, zero=3), {}),
                                   (ParallelSpec(dp=8, ep=8, zero=3), {}),
                                   (ParallelSpec(dp=8, zero=3), {"torchtitan_version": "0.2"})])
def test_on_where_torchtitan_refuses_names_the_field(p, rt):
    m = model("qwen3-30b-a3b") if p.ep > 1 else model("llama3-8b")
    t = replace(TRAIN, micro_batches=4) if p.pp > 1 else TRAIN
    with pytest.raises(SpecError) as e:
        build_ledger(m, p, t, RuntimeSpec(loop="torchtitan", cuda_graphs="on", **rt))
    assert e.value.field == "cuda_graphs"


def test_torchtitans_own_step_with_kept_gradients_is_predicted():
    kept = [e for name, e in STORED.items() if e["spec"].get("keep_grads")]
    assert len(kept) >= 4
    for e in kept:
        rec = next(r for r in compare(case_from_dict(e["spec"]), e["measured"])
                   if r["row"] == "peak_allocated")
        assert abs(rec["rel_error"]) < 0.005, e["case"]
