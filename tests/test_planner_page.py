"""The Planner page under Streamlit's AppTest: renders with defaults, widgets drive the table
and the URL, the URL drives the widgets, bad URL values are errors, not exceptions."""
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from streamlit.testing.v1 import AppTest

from memledger import gpu, model
from memledger.planner import Constraints, PlanSpec, plan
from memledger.views.planner_charts import ledger_query

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "planner.py")


def app(**query) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=30)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def link(at) -> dict:
    text = at.code[0].value
    return {k: v[0] for k, v in parse_qs(text.split("?", 1)[1]).items()}


def test_renders_with_defaults_a_chart_a_top_20_table_and_a_ledger_link():
    at = app()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 1
    table = at.dataframe[0].value
    assert len(table) == 20 and list(table["est. s/step"]) == sorted(table["est. s/step"])
    expected = plan(PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8,),
                             seq=8192, global_batch=64))
    best = expected.rows(expected.top(1))[0]
    assert table["peak GiB"].iloc[0] == pytest.approx(best["peak_bytes"] / 2**30)
    assert link(at) == ledger_query(expected, best, "llama3-8b", "h100")  # the top row's link
    assert dict(at.query_params) == {}  # all defaults: nothing in the URL


def test_a_changed_widget_changes_the_table_and_the_query_params():
    at = app()
    before = at.dataframe[0].value
    at.selectbox(key="pl_zero").set_value("3").run()
    after = at.dataframe[0].value
    assert set(after["zero"]) == {3} and not before.equals(after)
    assert at.query_params["zero"] == "3"
    at.number_input(key="pl_tp").set_value(2).run()
    assert set(at.dataframe[0].value["tp"]) == {2}
    assert at.query_params["tp"] == "2" and at.query_params["zero"] == "3"


def test_query_params_set_every_input_and_round_trip():
    query = {"model": "mixtral-8x7b", "gpu": "h200", "world": "16", "seq": "4096", "gb": "32",
             "recompute": "full", "max_vpp": "2", "top": "5", "row": "3"}
    at = app(**query)
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert len(table) == 5 and set(table["recompute"]) == {"full"}
    assert table["vpp"].max() <= 2
    assert {k: at.query_params[k] for k in query} == query
    expected = plan(PlanSpec(model=model("mixtral-8x7b"), hardware=gpu("h200"), worlds=(16,),
                             seq=4096, global_batch=32,
                             constraints=Constraints(recompute="full", max_vpp=2)))
    third = expected.rows(expected.top(5))[2]
    assert table["peak GiB"].iloc[2] == pytest.approx(third["peak_bytes"] / 2**30)
    assert link(at) == ledger_query(expected, third, "mixtral-8x7b", "h200")


@pytest.mark.parametrize("query,field", [({"seq": "abc"}, "seq"), ({"model": "gpt5"}, "model"),
                                         ({"zero": "7"}, "zero"), ({"world": "x,8"}, "world"),
                                         ({"gb": "-3"}, "gb")])
def test_bad_query_values_give_an_error_not_an_exception(query, field):
    at = app(**query)
    assert not at.exception
    assert any(e.value.startswith(field) for e in at.error)


def test_an_impossible_request_shows_the_reason():
    at = app(model="llama3.1-405b", world="1", gb="8")
    assert not at.exception
    assert any("nothing fits" in w.value and "GPUs of this kind" in w.value for w in at.warning)
