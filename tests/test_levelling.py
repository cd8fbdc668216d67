"""Remote offload across pipeline ranks (seed 1's fourth way): levelling the staircase."""
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from memledger import ParallelSpec, TrainSpec, build_ledger, gpu, model
from memledger.advisor import all_remote
from memledger.ledger.pipeline.levelling import RankLoad, level_min, level_to

loads_st = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6)).map(
        lambda x: RankLoad(phase=x[0], movable=min(x[1], x[0]), floor=x[2])),
    min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(loads_st)
def test_levelling_conserves_bytes_moves_forward_and_never_raises_the_maximum(loads):
    lev = level_min(loads)
    assert lev.feasible
    assert max(lev.after) <= max(lev.before)
    assert lev.level == max(lev.after) or max(lev.after) <= lev.level
    assert sum(lev.sent(r) for r in range(len(loads))) == sum(lev.received(r) for r in range(len(loads)))
    phases_after = [x.phase - lev.sent(r) + lev.received(r) for r, x in enumerate(loads)]
    assert sum(phases_after) == sum(x.phase for x in loads)  # bytes are moved, not made or lost
    for tr in lev.transfers:
        assert tr.src < tr.dst and tr.bytes > 0
    for r, x in enumerate(loads):
        assert lev.sent(r) <= x.movable


@settings(max_examples=200, deadline=None)
@given(loads_st)
def test_the_minimum_level_is_tight(loads):
    lev = level_min(loads)
    if lev.level > 0 and lev.transfers:
        assert not level_to(loads, lev.level - 1).feasible


def test_a_1f1b_staircase_levels_flat():
    """Four ranks holding 8, 6, 4, 2 units of activations on 10 units of static memory:
    60 units over 4 ranks is 15 each; rank 1 sends 1 to rank 2 (nearest first), rank 0 sends 3
    to rank 3."""
    loads = [RankLoad(phase=10 + a, movable=a) for a in (8, 6, 4, 2)]
    lev = level_min(loads)
    assert lev.after == (15, 15, 15, 15) and lev.moved_bytes == 4
    assert [(x.src, x.dst, x.bytes) for x in lev.transfers] == [(0, 3, 3), (1, 2, 1)]
    assert not level_to(loads, 14).feasible


def test_levelling_makes_llama3_70b_fit_an_h100():
    """tp 8 · pp 4 · dp 2, 16k tokens: rank 0 needs 84.9 GiB (over an H100's 79.6 GiB);
    moving activations to ranks 2 and 3 brings every rank under 69 GiB."""
    m, p, hw = model("llama3-70b"), ParallelSpec(tp=8, pp=4, dp=2, sp=True), gpu("h100")
    t = TrainSpec(seq=16384, micro_batches=8)
    before = build_ledger(m, p, t, hardware=hw)
    after = build_ledger(m, p, replace(t, policy=all_remote(t.policy)), hardware=hw)
    assert before.peak.peak_total_bytes > hw.hbm_bytes >= after.peak.peak_total_bytes
    total = lambda led: sum(r.rows["activations"] for r in led.ranks)  # noqa: E731
    staging = sum(i.bytes for r in after.ranks for i in r.row_items("activations") if "staging" in i.name)
    assert total(after) - staging == total(before)
    senders = {x.src for r in after.ranks for x in r.transfers}
    receivers = {x.dst for r in after.ranks for x in r.transfers}
    assert senders == {0, 1} and receivers == {2, 3}
    hosted = [i for i in after.ranks[3].items if i.name.startswith("hosted for pp rank")]
    assert hosted and all(i.row == "activations" for i in hosted)


def test_without_pipeline_offload_pp_moves_nothing_and_costs_nothing():
    m, t = model("llama3-8b"), TrainSpec(seq=4096)
    p = ParallelSpec()
    keep = build_ledger(m, p, t).ranks[0]
    pp = build_ledger(m, p, replace(t, policy=all_remote(t.policy))).ranks[0]
    assert pp.rows == keep.rows and pp.transfers == ()
