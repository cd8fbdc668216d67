"""The assembly lane (planner/sweep/lane.py): a search whose blocks are assembled on a worker thread
keeps the one-lane search's answer — the same rows in the same order, counts and best — its
progress is reported on the calling thread, in order, an error on the worker reaches the caller
and leaves no thread behind, and no more blocks wait than the lane's depth."""
import sys
import threading

import numpy as np
import pytest

from memledger import gpu, model
from memledger.planner import Constraints, PlanSpec, plan
from memledger.planner.sweep import fused, lane
from memledger.planner.sweep.evaluate import evaluate
from memledger.planner.sweep.lane import Lane
from memledger.planner.question.space import enumerate_space

EVALUATE = sys.modules["memledger.planner.sweep.evaluate"]  # the package's name is the function
SPEC = PlanSpec(model=model("deepseek-v3"), hardware=gpu("h100"), worlds=(256,), seq=4096,
                global_batch=1024, constraints=Constraints(max_vpp=2, max_cp=2))


@pytest.fixture
def every_block_on_the_lane(monkeypatch):
    """Every block the compiled pass assembles goes to the worker; records each assembly's
    thread (a comparison in which the worker never ran proves nothing)."""
    fused.kernel()
    monkeypatch.setattr(EVALUATE, "LANE_MIN", 0)
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # a worker even on a one-core machine
    threads = []
    real = EVALUATE.assemble

    def recording(*args):
        threads.append(threading.get_ident())
        return real(*args)
    monkeypatch.setattr(EVALUATE, "assemble", recording)
    return threads


def test_two_lanes_keep_the_one_lane_answer(every_block_on_the_lane, monkeypatch):
    space = enumerate_space(SPEC)
    got = evaluate(SPEC, space)
    worker = [t for t in every_block_on_the_lane if t != threading.get_ident()]
    monkeypatch.setattr(lane, "ENABLED", False)
    want = evaluate(SPEC, space)
    assert len(worker) > 10 and got.n_fits > 10_000
    assert (got.n_evaluated, got.n_fits, got.n_pruned) == \
        (want.n_evaluated, want.n_fits, want.n_pruned)
    assert got.block_rows == want.block_rows
    assert [(b.tp, b.pp, b.cp, b.dp) for b in got.blocks] == \
        [(b.tp, b.pp, b.cp, b.dp) for b in want.blocks]
    for k in ("flat", "peak_bytes", "seconds"):
        assert np.array_equal(getattr(got, k), getattr(want, k)), k
    assert got.best == want.best


def test_progress_is_reported_on_the_calling_thread_in_order(every_block_on_the_lane):
    seen = []
    plan(SPEC, progress=lambda stage, done, total: seen.append(
        (threading.get_ident(), stage, done, total)))
    ticks = [(t, done, total) for t, stage, done, total in seen if stage == "configurations"]
    assert {t for t, _, _ in ticks} == {threading.get_ident()}
    done = [d for _, d, _ in ticks]
    assert done == sorted(done) and done[-1] == ticks[-1][2] > 0
    assert any(t != threading.get_ident() for t in every_block_on_the_lane)


def test_an_error_on_the_worker_reaches_the_caller_and_no_thread_is_left(
        every_block_on_the_lane, monkeypatch):
    calls = []
    real = EVALUATE.assemble

    def failing(*args):
        calls.append(threading.get_ident())
        if len(calls) == 3:
            raise RuntimeError("assembly failed on block 3")
        return real(*args)
    monkeypatch.setattr(EVALUATE, "assemble", failing)
    with pytest.raises(RuntimeError, match="block 3"):
        evaluate(SPEC, enumerate_space(SPEC))
    assert calls[2] != threading.get_ident()  # it was raised on the worker
    assert not [t for t in threading.enumerate() if t.name.startswith("memledger-assemble")]


def test_blocks_run_and_report_in_order_and_at_most_depth_wait(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    gate = threading.Event()
    ran, reported, waiting = [], [], []
    with Lane(depth=2, enabled=True) as ln:
        for i in range(8):
            def work(i=i):
                gate.wait(5)
                ran.append(i)
                return i
            ln.submit(work, reported.append, background=i != 5)
            waiting.append(len(ln._pending))
            gate.set()  # the first blocks waited for it: the queue filled up before
        ln.drain()
    assert ran == reported == list(range(8))
    assert max(waiting) == 2


def test_one_core_assembles_inline(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    where = []
    with Lane(enabled=True) as ln:
        ln.submit(lambda: where.append(threading.get_ident()), lambda _: None)
    assert where == [threading.get_ident()]


def test_a_lane_without_room_for_one_block_is_refused():
    with pytest.raises(ValueError, match="depth=0"):
        Lane(depth=0)


def test_a_search_stopped_from_its_progress_callback_leaves_no_thread(every_block_on_the_lane):
    """The app's session stops a run by raising from a Streamlit call — here, the progress
    callback — while blocks are queued on the worker."""
    class Stopped(Exception):
        pass

    def progress(stage, done, total):
        if stage == "configurations" and done > 0:
            raise Stopped
    with pytest.raises(Stopped):
        plan(SPEC, progress=progress)
    assert any(t != threading.get_ident() for t in every_block_on_the_lane)
    assert not [t for t in threading.enumerate() if t.name.startswith("memledger-assemble")]
