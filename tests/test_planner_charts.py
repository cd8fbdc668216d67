"""Chart, table and share-link builders for a Plan."""
import pytest

from memledger import gpu, model
from memledger.planner import PlanSpec, plan
from memledger.views.planner_charts import LEDGER_KEYS, ledger_query, plan_scatter, top_table


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


def test_ledger_query_omits_defaults_and_keeps_model_and_gpu():
    result = plan(PlanSpec(model=model("deepseek-v3"), hardware=gpu("h200"), worlds=(256,),
                           seq=4096, global_batch=256, precision="megatron"))
    row = result.rows(result.top(1))[0]
    q = ledger_query(result, row, "deepseek-v3", "h200")
    assert q["model"] == "deepseek-v3" and q["gpu"] == "h200"
    assert set(q) <= set(LEDGER_KEYS) | {"layout"}
    assert "precision" not in q and "optimizer" not in q and "seq" not in q  # defaults
    assert q["pp"] == str(row["pp"]) and q["m"] == str(row["micro_batches"])
    if row["layout"] == "balanced":
        assert q["layout"] == "balanced"
