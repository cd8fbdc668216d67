"""A search runs with numpy's huge-page hint off and leaves it as it found it
(planner/sweep/memhint.py; docs/planner-speed.md, "small pages"): observed from inside the
search through its progress callback, with the hint on and off before, nested, and from threads
that overlap."""
import threading

import pytest
from numpy._core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage

from memledger import gpu, model
from memledger.planner import PlanSpec, plan
from memledger.planner.sweep import memhint

SPEC = PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(64,), seq=4096,
                global_batch=512)


@pytest.fixture(autouse=True)
def restore_hint():
    before = _get_madvise_hugepage()
    yield
    _set_madvise_hugepage(before)


def hint_during_search(spec=SPEC) -> set[bool]:
    seen = set()
    plan(spec, progress=lambda stage, done, total: seen.add(_get_madvise_hugepage()))
    return seen


@pytest.mark.parametrize("before", [True, False])
def test_the_search_runs_on_small_pages_and_restores_the_hint(before):
    _set_madvise_hugepage(before)
    assert hint_during_search() == {False}
    assert _get_madvise_hugepage() is before


def test_the_full_order_is_sorted_on_small_pages(monkeypatch):
    _set_madvise_hugepage(True)
    result = plan(SPEC)
    seen = []
    real = memhint.small_pages

    def watching():
        seen.append("entered")
        return real()
    monkeypatch.setattr("memledger.planner.answer.result.small_pages", watching)
    assert len(result.order) == result.n_fits
    assert seen == ["entered"] and _get_madvise_hugepage() is True


def test_nested_and_overlapping_searches_restore_the_hint_once_all_are_done():
    _set_madvise_hugepage(True)
    inside, release = threading.Event(), threading.Event()
    seen = []

    def slow_search():
        def progress(stage, done, total):
            seen.append(_get_madvise_hugepage())
            inside.set()
            release.wait(30)
        plan(SPEC, progress=progress)

    worker = threading.Thread(target=slow_search)
    worker.start()
    try:
        assert inside.wait(30)
        with memhint.small_pages():  # a second search starts and ends while the first runs
            with memhint.small_pages():
                assert _get_madvise_hugepage() is False
        assert _get_madvise_hugepage() is False, "the first search is still running"
    finally:
        release.set()
        worker.join(60)
    assert set(seen) == {False}
    assert _get_madvise_hugepage() is True


def test_an_error_inside_the_search_still_restores_the_hint():
    _set_madvise_hugepage(True)

    def admit(n):
        assert _get_madvise_hugepage() is False
        raise ValueError(f"{n:,} configurations is over this request's budget")
    with pytest.raises(ValueError, match="budget"):
        plan(SPEC, admit=admit)
    assert _get_madvise_hugepage() is True


def test_without_numpys_switch_the_search_runs_unchanged(monkeypatch):
    want = plan(SPEC)
    monkeypatch.setattr(memhint, "_set_hint", None)
    _set_madvise_hugepage(True)
    got = plan(SPEC)
    assert hint_during_search() == {True}
    assert got.n_fits == want.n_fits
    assert (got.evaluated.peak_bytes == want.evaluated.peak_bytes).all()
    assert (got.evaluated.seconds == want.evaluated.seconds).all()
