"""A search's result is freed the moment it is dropped: nothing in it sits in a reference cycle
that would keep its arrays (hundreds of MB for a full DeepSeek-V3 sweep) alive until Python's
garbage collector happens to run — on a server that re-plans on every slider move, results
would pile up. The cycle this guards against: the space's memoised checks kept each SpecError
with its traceback, whose frames reach up to the search's own locals (planner/question/space.py)."""
import gc
import weakref

from memledger import gpu, model
from memledger.planner import PlanSpec, plan
from memledger.planner.question.space import _Checks

SPEC = PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(64,), seq=4096,
                global_batch=512)


def test_a_dropped_search_frees_its_arrays_without_the_garbage_collector():
    gc.collect()
    gc.disable()
    try:
        result = plan(SPEC)
        result.rows(result.top(5))
        assert result.n_invalid > 0  # the checks refused layouts: the path that made cycles
        refs = [weakref.ref(result), weakref.ref(result.evaluated)]
        del result
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def test_a_memoised_refusal_keeps_its_message_not_its_traceback():
    checks = _Checks(SPEC)
    err = checks.pipe(64, 1, "1f1b")  # 64 stages for 32 layers
    assert err is not None and "pp" in str(err)
    assert err.__traceback__ is None
