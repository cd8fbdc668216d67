"""The static rows under PyTorch's engines (memledger.ledger.static.engines): DTensor's full-size
embedding gradient and ZeroRedundancyOptimizer's sorted-greedy whole-tensor partition. The
measured side is tests/test_engine.py; here the rules themselves."""
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memledger import build_ledger, model
from memledger.cli import main
from memledger.errors import SpecError
from memledger.ledger.build import dp_optimizer_rows
from memledger.ledger.static.engines import partition
from memledger.specs import ParallelSpec, TrainSpec
from memledger.specs.runtime import RuntimeSpec

GREEDY = RuntimeSpec(zero1_partition="greedy-params")
DTENSOR = RuntimeSpec(tp_engine="dtensor")


def torch_partition(numels, d):
    """ZeroRedundancyOptimizer._partition_parameters as written in torch 2.13 (one group)."""
    sizes, owned = [0] * d, [[] for _ in range(d)]
    for k, n in sorted(enumerate(numels), key=lambda kn: kn[1], reverse=True):
        r = sizes.index(min(sizes))
        owned[r].append(k)
        sizes[r] += n
    return owned


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=0, max_size=40), st.integers(1, 9))
def test_partition_is_torchs_sorted_greedy_and_owns_every_tensor_once(numels, d):
    owned = partition(numels, d)
    assert owned == torch_partition(numels, d)
    assert sorted(k for ks in owned for k in ks) == list(range(len(numels)))


def test_partition_gives_the_largest_tensor_to_rank_0_and_ties_to_the_lowest_rank():
    assert partition([5, 9, 9, 1], 3) == [[1], [2], [0, 3]]


def _ledger(rt, m="llama3-8b", **par):
    return build_ledger(model(m), ParallelSpec(**par), TrainSpec(), rt)


def test_greedy_row_is_the_most_loaded_dp_rank_and_the_dp_ranks_sum_to_the_whole_state():
    greedy, even = _ledger(GREEDY, dp=8, zero=1), _ledger(RuntimeSpec(), dp=8, zero=1)
    per_dp = dp_optimizer_rows(greedy.model, greedy.parallel, greedy.train, greedy.runtime, 0)
    assert len(per_dp) == 8 and len(set(per_dp)) > 1
    assert greedy.ranks[0].rows["optimizer"] == max(per_dp) > even.ranks[0].rows["optimizer"]
    assert sum(per_dp) == 8 * even.ranks[0].rows["optimizer"]  # every tensor's states, once
    same = ("weights", "gradients", "activations", "communication")  # runtime: slack of the peak
    assert [greedy.ranks[0].rows[k] for k in same] == [even.ranks[0].rows[k] for k in same]


@pytest.mark.parametrize("par", [dict(dp=8, zero=0), dict(dp=8, zero=2), dict(dp=8, zero=3),
                                 dict(dp=1, zero=1)])
def test_greedy_partition_only_changes_zero_1_over_more_than_one_dp_rank(par):
    assert _ledger(GREEDY, **par).ranks == _ledger(RuntimeSpec(), **par).ranks
    led = _ledger(GREEDY, **par)
    assert dp_optimizer_rows(led.model, led.parallel, led.train, led.runtime, 0) is None


def test_greedy_refuses_experts_in_their_own_zero_group():
    with pytest.raises(SpecError) as e:
        _ledger(GREEDY, m="mixtral-8x7b", dp=8, ep=8, zero=1)
    assert e.value.field == "zero1_partition" and "ep=8" in str(e.value)
    assert _ledger(GREEDY, m="mixtral-8x7b", dp=8, zero=1).ranks[0].rows["optimizer"] > 0


def test_dtensor_embedding_gradient_is_full_vocab_on_every_tp_rank_below_zero_2():
    padded_vocab, h = 128512, 4096  # 128256 padded to a multiple of 128·tp (Megatron recipe)
    for zero in (0, 1):
        dt, mg = _ledger(DTENSOR, tp=4, dp=2, zero=zero), _ledger(RuntimeSpec(), tp=4, dp=2, zero=zero)
        extra = dt.ranks[0].rows["gradients"] - mg.ranks[0].rows["gradients"]
        assert extra == 4 * padded_vocab * h * 3 // 4  # fp32 grads: the other 3/4 of V·h
        emb = [{i.name: i.bytes for i in led.ranks[0].items if i.row == "gradients"}
               ["embedding / embedding"] for led in (dt, mg)]
        assert emb[0] == 4 * emb[1] == 4 * padded_vocab * h
        assert dt.ranks[0].rows["weights"] == mg.ranks[0].rows["weights"]
    for par in (dict(tp=4, dp=2, zero=2), dict(tp=4, dp=2, zero=3), dict(tp=1, dp=8, zero=0)):
        assert _ledger(DTENSOR, **par).ranks == _ledger(RuntimeSpec(), **par).ranks


def test_dtensor_adds_nothing_on_pipeline_ranks_without_the_embedding():
    dt, mg = _ledger(DTENSOR, tp=2, pp=4), _ledger(RuntimeSpec(), tp=2, pp=4)
    diff = [a.rows["gradients"] - b.rows["gradients"] for a, b in zip(dt.ranks, mg.ranks)]
    assert diff[0] > 0 and diff[1:] == [0, 0, 0]


@pytest.mark.parametrize("field, value", [("tp_engine", "nemo"), ("zero1_partition", "random")])
def test_runtime_refuses_unknown_engine_knobs(field, value):
    with pytest.raises(SpecError) as e:
        replace(RuntimeSpec(), **{field: value})
    assert e.value.field == field


def test_cli_flags_set_the_knobs_and_the_planner_refuses_them(capsys):
    import json
    out = {}
    for flags in ([], ["--zero1-partition", "greedy-params"]):
        assert main(["ledger", "--model", "llama3-8b", "--dp", "8", "--zero", "1", "--json",
                     *flags]) == 0
        out[len(flags)] = json.loads(capsys.readouterr().out)["ranks"][0]["rows"]["optimizer"]
    assert out[2] > out[0]
    code = main(["plan", "--model", "llama3-8b", "--gpu", "h100", "--world", "8", "--seq", "4096",
                 "--global-batch", "64", "--tp-engine", "dtensor"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "tp_engine=megatron only" in err
