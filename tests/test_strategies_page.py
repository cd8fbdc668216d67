"""The standalone Strategies page renders, reacts to a policy change, and reports bad links."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from memledger.views.strategies_state import decode_policy, encode_policy, parse, to_params

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "strategies.py")


def _app(**params) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=30)
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def _activation_bars(at) -> list:
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    return next(d["y"] for d in spec["data"] if d["name"] == "Activations")


def test_page_renders_tables_charts_and_the_four_answers():
    at = _app()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 2 and len(at.dataframe) >= 1
    text = " ".join(m.value for m in at.markdown)
    for q in ("1. Static rows", "2. Activations", "3. Staircase", "4. Buffers", "Plan"):
        assert q in text


def test_a_policy_change_changes_the_chart_and_the_link():
    at = _app()
    before = _activation_bars(at)
    assert before[0] == before[1]  # no policy yet: before = after
    at.selectbox(key="pol_mlp_fc1").set_value("fp8").run()
    after = _activation_bars(at)
    assert after[1] < after[0] == before[0]
    assert at.query_params["policy"] == "mlp_fc1:fp8"


def test_a_shared_link_restores_the_policy():
    at = _app(policy="mlp_fc1:fp8;qkv:offload-cpu", preset="megatron-selective")
    assert at.selectbox(key="pol_qkv").value == "offload-cpu"
    assert at.selectbox(key="pol_mlp_fc1").value == "fp8"
    assert at.selectbox(key="w_preset").value == "megatron-selective"
    assert len(at.dataframe) == 2  # the policy table and the bandwidth verdicts


@pytest.mark.parametrize("params, words", [
    ({"tp": "banana"}, "tp='banana' is not valid"),
    ({"policy": "mlp_fc1:fp9"}, "unknown policy 'fp9'"),
    ({"model": "gpt-9"}, "model='gpt-9' is not valid"),
    ({"tp": "3"}, "world=64 is not divisible"),
])
def test_bad_query_values_give_an_error(params, words):
    at = _app(**params)
    assert not at.exception
    assert any(words in e.value for e in at.error)


def test_state_round_trip():
    values, errors = parse({"tp": "4", "policy": "qkv:fp8", "target": "70"})
    assert not errors and values["tp"] == 4 and values["target"] == 70.0
    assert to_params(values) == {"tp": "4", "policy": "qkv:fp8", "target": "70.0"}
    rules = {"qkv": "fp8", "mlp_fc1": "int4+offload-cpu"}
    assert decode_policy(encode_policy(rules)) == rules
