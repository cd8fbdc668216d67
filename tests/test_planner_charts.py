"""Chart, table and share-link builders for a Plan."""
import pytest

from memledger import gpu, model
from memledger.planner import PlanSpec, plan
from memledger.views.planner.charts import LEDGER_KEYS, ledger_query, plan_scatter, top_table


def small_plan(**kw):
    return plan(PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8,), seq=8192,
                         global_batch=64, **kw))


def test_scatter_has_every_fitting_point_the_front_and_the_capacity_line():
    result = small_plan(headroom=0.1)
    fig = plan_scatter(result, selected=result.rows(result.top(1))[0])
    points = sum(len(t.x) for t in fig.data if t.name.startswith("recompute"))
    assert points == result.n_fits
    front = next(t for t in fig.data if t.name == "Pareto front")
    assert len(front.x) == len(result.pareto)
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    cap = result.spec.capacity_bytes / 2**30
    assert sorted(s.x0 for s in lines) == pytest.approx([cap * 0.9, cap])
    assert cap == pytest.approx(79.65, abs=0.01)
    assert "GiB" in fig.layout.xaxis.title.text


def test_scatter_samples_large_plans_but_keeps_the_front():
    result = small_plan()
    fig = plan_scatter(result, max_points=500)
    points = sum(len(t.x) for t in fig.data if t.name.startswith("recompute"))
    assert points < result.n_fits and points >= len(result.pareto)


def test_top_table_rows_are_the_fastest_in_order():
    result = small_plan()
    table = top_table(result, 10)
    rows = result.rows(result.top(10))
    assert list(table["est. s/step"]) == [r["seconds"] for r in rows]
    assert list(table["tp"]) == [r["tp"] for r in rows]


def deepseek_plan():
    return plan(PlanSpec(model=model("deepseek-v3"), hardware=gpu("h200"), worlds=(256,),
                         seq=4096, global_batch=256))


def test_ledger_query_names_every_setting_of_the_row():
    result = deepseek_plan()
    row = result.rows(result.top(1))[0]
    q = ledger_query(result, row, "deepseek-v3", "h200")
    assert q["model"] == "deepseek-v3" and q["gpu"] == "h200"
    assert set(q) <= set(LEDGER_KEYS)
    try:
        import memledger.views.state  # noqa: F401  (the dashboard omits its defaults)
    except ImportError:
        assert set(q) == set(LEDGER_KEYS)
        assert q["pp"] == str(row["pp"]) and q["m"] == str(row["micro_batches"])
        assert q["layout"] == "balanced" and q["sp"] == ("1" if row["sp"] else "0")


def test_ledger_query_opens_the_same_specs_on_the_dashboard():
    state = pytest.importorskip("memledger.views.state")  # lands with the dashboard branch
    result = deepseek_plan()
    for row in result.rows(result.top(5)) + result.rows(result.pareto[:5]):
        cfg, issues = state.parse_params(ledger_query(result, row, "deepseek-v3", "h200"))
        assert not issues
        assert state.to_specs(cfg, result.spec.model) == result.specs(row)
