"""A real torch.distributed step in the suite: two gloo CPU processes run pipelined 1F1B and
are measured per rank against the ledger; a failing or hanging rank is reported with its rank
and leaves no process behind. Marked `torch` (~40 s on two cores)."""
import multiprocessing

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from memledger.engine.cases import LLAMA, EngineCase  # noqa: E402
from memledger.engine.compare import compare_case  # noqa: E402
from memledger.engine.workers import EngineError, run_case  # noqa: E402

pytestmark = pytest.mark.torch
SMALL = EngineCase(name="test pp=2 1f1b m=3", config=LLAMA, pp=2, schedule="1f1b",
                   micro_batches=3, seq=32)


def test_two_rank_1f1b_step_matches_the_ledger_per_rank_and_holds_the_staircase():
    ranks = run_case(SMALL, timeout_s=120)
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [sum(r["held"].values()) for r in ranks] == [2, 1]  # min(P - r, m)
    recs = compare_case(SMALL, ranks)
    bad = [(r["rank"], r["row"], r["rel_error"]) for r in recs if not r["ok"]]
    assert not bad
    assert not multiprocessing.active_children()


def test_a_failing_rank_is_named_and_no_process_is_left():
    from engine_targets import fail_on_rank_1
    with pytest.raises(EngineError, match=r"rank 1 failed: RuntimeError: injected failure"):
        run_case(SMALL, timeout_s=60, target=fail_on_rank_1)
    assert not multiprocessing.active_children()


def test_a_hanging_run_times_out_and_every_rank_is_stopped():
    from engine_targets import hang
    with pytest.raises(EngineError, match="timed out after 3 s; all 2 ranks were stopped"):
        run_case(SMALL, timeout_s=3, target=hang)
    assert not multiprocessing.active_children()
