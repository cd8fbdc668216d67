"""ActivationPolicy is data: parsed, validated with messages that name the class and the policy."""
import pytest

from memledger import SpecError, TrainSpec
from memledger.presets.policies import POLICY_PRESETS, apply_policy, policy_preset
from memledger.specs.policy import ActivationPolicy, TensorPolicy, parse_rules


@pytest.mark.parametrize("text, want", [
    ("keep", TensorPolicy()),
    ("recompute", TensorPolicy(recompute=True)),
    ("fp8", TensorPolicy(quant="fp8")),
    ("int4+offload-cpu", TensorPolicy(quant="int4", offload="cpu")),
    ("offload-pp+int8", TensorPolicy(quant="int8", offload="pp")),
])
def test_policy_strings_parse_and_print_back(text, want):
    assert TensorPolicy.parse(text) == want
    assert TensorPolicy.parse(str(want)) == want


@pytest.mark.parametrize("text, words", [
    ("fp9", "unknown policy 'fp9'"),
    ("recompute+fp8", "recompute stacks with nothing"),
    ("fp8+int8", "at most one format"),
    ("offload-cpu+offload-pp", "at most one format and one offload"),
])
def test_bad_policy_strings_say_why(text, words):
    with pytest.raises(SpecError) as e:
        ActivationPolicy.from_mapping({"qkv": text})
    assert words in str(e.value) and "policy[qkv]" in str(e.value)


def test_unknown_class_lists_the_valid_ones():
    with pytest.raises(SpecError, match="unknown tensor class 'mlp'.*mlp_fc1"):
        ActivationPolicy.from_mapping({"mlp": "fp8"})


def test_cli_rules_need_class_equals_policy():
    assert parse_rules(["mlp_fc1=fp8", "qkv = offload-cpu"]) == {"mlp_fc1": "fp8", "qkv": "offload-cpu"}
    with pytest.raises(SpecError, match="expected CLASS=POLICY"):
        parse_rules(["mlp_fc1"])


def test_policy_is_hashable_and_lives_on_trainspec():
    t = TrainSpec(policy=ActivationPolicy.from_mapping({"mlp_fc1": "fp8"}))
    assert hash(t) == hash(TrainSpec(policy=ActivationPolicy.from_mapping({"mlp_fc1": "fp8"})))
    with pytest.raises(SpecError, match="policy"):
        TrainSpec(policy={"mlp_fc1": "fp8"})


def test_an_explicit_keep_survives_merging():
    p = ActivationPolicy.from_mapping({"attn_core": "recompute"}).with_rules({"attn_core": "keep"})
    assert p.as_dict() == {"attn_core": "keep"}


def test_presets_set_the_recompute_structure_and_user_rules_go_on_top():
    t = apply_policy(TrainSpec(), "full-recompute", {"layer_input": "fp8"})
    assert t.recompute == "full" and t.policy.as_dict() == {"layer_input": "fp8"}
    t = apply_policy(TrainSpec(), "kimi-k2", {"qkv": "fp8+offload-cpu"})
    assert t.policy.get("qkv") == TensorPolicy(quant="fp8", offload="cpu")
    assert t.policy.get("mlp_act").recompute
    assert set(POLICY_PRESETS) == {"megatron-selective", "full-recompute", "deepseek-v3-fp8", "kimi-k2"}
    with pytest.raises(SpecError, match="policy_preset"):
        policy_preset("zero-bubble")
