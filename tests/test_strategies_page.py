"""The Strategies page on the shared sidebar: renders, reacts to a policy and to the sidebar, one
share link carries the configuration and the policy, bad links are errors, not exceptions."""
import pytest

from conftest import figures
from memledger.errors import SpecError
from memledger.views.state import PageParam, parse_page_params
from memledger.views.strategies.state import (POLICY_OPTIONS, SPECS, canonical_policy,
                                              decode_policy, encode_policy, policy_param,
                                              shown_policies)

PAGE = "pages/strategies.py"


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def activation_bars(at) -> list:
    return next(d["y"] for d in figures(at)[0]["data"] if d["name"] == "Activations")


def test_page_renders_tables_charts_and_the_four_answers(app_test):
    at = ok(app_test(PAGE).run())
    assert at.error == [] and at.query_params == {}
    assert len(figures(at)) == 2 and len(at.dataframe) >= 1
    text = " ".join(m.value for m in at.markdown)
    for q in ("1. Static rows", "2. Activations", "3. Staircase", "4. Buffers", "Plan"):
        assert q in text
    assert at.select_slider(key="sb_tp").value == 8  # the shared sidebar is drawn


def test_a_policy_change_changes_the_chart_and_the_link(app_test):
    at = ok(app_test(PAGE).run())
    before = activation_bars(at)
    assert before[0] == before[1]  # no policy yet: before = after
    at.selectbox(key="pg_pol_mlp_fc1").set_value("fp8").run()
    after = activation_bars(ok(at))
    assert after[1] < after[0] == before[0]
    assert at.query_params == {"policy": "mlp_fc1:fp8"}
    assert "policy=mlp_fc1%3Afp8" in at.code[0].value  # the share link


def test_the_sidebar_drives_the_page_and_keeps_the_policy(app_test):
    at = ok(app_test(PAGE).run())
    at.selectbox(key="pg_pol_mlp_fc1").set_value("fp8").run()
    before = activation_bars(ok(at))
    at.select_slider(key="sb_tp").set_value(4).run()
    ok(at)
    assert at.query_params == {"tp": "4", "policy": "mlp_fc1:fp8"}
    assert activation_bars(at)[0] > before[0]  # tp 4 splits activations two ways fewer
    assert "tp 4" in figures(at)[0]["layout"]["title"]["subtitle"]["text"]
    assert at.selectbox(key="pg_pol_mlp_fc1").value == "fp8"


def test_a_shared_link_restores_configuration_preset_and_policy(app_test):
    at = ok(app_test(PAGE, "tp=4&seq=8192&preset=megatron-selective"
                           "&policy=mlp_fc1:fp8;qkv:offload-cpu&target=60&mfu=50").run())
    assert at.error == []
    assert at.select_slider(key="sb_tp").value == 4 and at.number_input(key="sb_seq").value == 8192
    assert at.selectbox(key="pg_preset").value == "megatron-selective"
    assert at.selectbox(key="pg_pol_qkv").value == "offload-cpu"
    assert at.selectbox(key="pg_pol_mlp_fc1").value == "fp8"
    assert at.number_input(key="pg_target").value == 60
    assert len(at.dataframe) == 2  # the policy table and the bandwidth verdicts
    shapes = figures(at)[0]["layout"]["shapes"]
    assert shapes[0]["y0"] == pytest.approx(60)  # the target line, in GiB


def test_a_new_preset_starts_from_its_own_rules(app_test):
    at = ok(app_test(PAGE, "policy=qkv:fp8").run())
    at.selectbox(key="pg_preset").set_value("deepseek-v3-fp8").run()
    ok(at)
    assert at.query_params == {"preset": "deepseek-v3-fp8"}
    assert at.selectbox(key="pg_pol_qkv").value == "keep"
    assert at.selectbox(key="pg_pol_mlp_fc1").value == "fp8"  # the preset's rule


def test_settings_follow_from_the_ledger_page(app_test):
    at = ok(app_test("app.py").run())
    at.select_slider(key="sb_tp").set_value(4).run()
    at.switch_page(PAGE).run()
    ok(at)
    assert at.query_params.get("tp") == "4"
    assert "tp 4" in figures(at)[0]["layout"]["title"]["subtitle"]["text"]


@pytest.mark.parametrize("query, words", [
    ("tp=banana", "`tp=banana`"),
    ("policy=mlp_fc1:fp9", "unknown policy 'fp9'"),
    ("policy=nonsense", "expected class:policy"),
    ("model=gpt-9", "`model=gpt-9`"),
    ("preset=kimi-k3", "`preset=kimi-k3`"),
    ("mfu=0", "`mfu=0`"),
])
def test_bad_query_values_give_an_error(app_test, query, words):
    at = ok(app_test(PAGE, query).run())
    assert any(words in e.value.replace("\\", "") for e in at.error)
    assert len(figures(at)) == 2  # the page falls back and still works


def test_the_policy_parameter_is_canonical():
    assert canonical_policy("qkv: offload-cpu+fp8 ; mlp_fc1:FP8") == "mlp_fc1:fp8;qkv:fp8+offload-cpu"
    rules = {"qkv": "fp8", "mlp_fc1": "int4+offload-cpu"}
    assert decode_policy(encode_policy(rules)) == rules
    with pytest.raises(SpecError, match="recompute stacks with nothing"):
        decode_policy("qkv:recompute+fp8")
    assert set(POLICY_OPTIONS) >= {"keep", "recompute", "int4+offload-pp"}
    values, issues = parse_page_params({"policy": "qkv:offload-cpu+fp8"}, SPECS)
    assert values["policy"] == "qkv:fp8+offload-cpu" and issues == []


def test_the_link_holds_only_what_differs_from_the_preset():
    preset = "deepseek-v3-fp8"
    shown = shown_policies(preset, "attn_out:keep")
    assert shown["attn_out"] == "keep" and shown["mlp_fc1"] == "fp8"
    assert policy_param(preset, shown) == "attn_out:keep"
    assert policy_param("none", {"qkv": "keep", "mlp_fc1": "fp8"}) == "mlp_fc1:fp8"


def test_a_page_param_parser_error_names_the_value():
    spec = (PageParam("policy", "", parse=canonical_policy),)
    values, issues = parse_page_params({"policy": "qkv:fp9"}, spec)
    assert values == {"policy": ""} and "unknown policy 'fp9'" in issues[0].message


def test_the_largest_tensor_is_named_as_a_sum_of_copies_and_quantisation_priced_in_its_unit(app_test):
    """Issue 32 #9: 'largest tensor mlp.fc1_out 4.38 GiB' is every copy held (layers ×
    micro-batches): the line says so and gives one tensor; int8 is not '0 mantissa bits' (it
    read as free next to fp8); bytes per step in GiB like the rest of the page."""
    from memledger.advisor.text import QUANT_PRICE
    at = ok(app_test(PAGE).run())
    text = " ".join(m.value for m in at.markdown).replace("\\", "")
    assert "copies (layers × micro-batches in flight)" in text and " each" in text
    assert "mantissa bits" not in text.replace(QUANT_PRICE["fp8"], "")
    assert " GB/step" not in text
    at.selectbox(key="pg_pol_mlp_fc1").set_value("int8").run()
    costs = " ".join(ok(at).dataframe[0].value["cost"])
    assert QUANT_PRICE["int8"] in costs and "0 mantissa bits" not in costs
