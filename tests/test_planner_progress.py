"""The planner reports its progress (stage, done, total) while it searches, the page turns that
into a progress bar with an ETA, and reporting changes nothing in the result."""
import numpy as np
import pytest

from memledger import gpu, model
from memledger.planner import PlanSpec, plan
from memledger.planner.sweep.size import n_configurations
from memledger.planner.question.space import enumerate_space
from memledger.views.planner.state import Progress, progress_state

SPEC = PlanSpec(model=model("deepseek-v3"), hardware=gpu("h200"), worlds=(256,), seq=4096,
                global_batch=256)


def test_plan_reports_layouts_then_configurations_up_to_the_admitted_total():
    calls = []
    result = plan(SPEC, progress=lambda *c: calls.append(c))
    assert calls[:2] == [("layouts", 0, 1), ("layouts", 1, 1)]
    evals = [c for c in calls if c[0] == "configurations"]
    total = n_configurations(SPEC, enumerate_space(SPEC))
    assert {t for _, _, t in evals} == {total} and total >= result.n_evaluated
    done = [d for _, d, _ in evals]
    assert done[0] == 0 and done[-1] == total and done == sorted(done)
    assert len(evals) > 10  # reported block by block, not once at the end


def test_reporting_progress_changes_nothing_in_the_result():
    a, b = plan(SPEC), plan(SPEC, progress=lambda *c: None)
    for k in ("block_id", "flat", "peak_bytes", "seconds"):
        assert np.array_equal(getattr(a.evaluated, k), getattr(b.evaluated, k))
    assert a.counts() == b.counts()


def test_progress_text_names_the_stage_the_count_and_an_eta():
    frac, text = progress_state("configurations", 250_000, 1_000_000, 1.0)
    assert text == "Evaluating configurations: 250,000 of 1,000,000 · about 3.0 s left"
    assert frac == pytest.approx(0.275)
    assert progress_state("layouts", 0, 1, 0)[1] == "Listing the parallel layouts…"
    assert "left" not in progress_state("configurations", 0, 10, 0.0)[1]
    assert "left" not in progress_state("configurations", 5, 100, 1.0)[1]  # too early to say
    assert progress_state("configurations", 10, 10, 2.0)[0] == pytest.approx(0.95)


def test_the_bar_updates_a_few_times_a_second_and_always_at_the_ends():
    now, shown = [0.0], []
    bar = Progress(lambda f, t: shown.append(t), every_s=0.15, clock=lambda: now[0])
    bar("configurations", 0, 100)
    for done in range(1, 101):
        now[0] += 0.01  # 1 s for the whole stage
        bar("configurations", done, 100)
    assert 6 <= len(shown) <= 9  # first, ~every 0.15 s, last
    assert shown[0].endswith(": 0 of 100") and shown[-1].endswith(": 100 of 100")
