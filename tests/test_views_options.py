"""Valid values for each widget and the repair of bad configurations: only the core decides."""
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memledger.ledger.checks import check_all
from memledger.presets import MODELS
from memledger.views.options import CANDIDATES, divisors, problem, repair, valid_values, with_value
from memledger.views.state import DEFAULT, Config, load_model, to_specs

WIDGET_KEYS = ("tp", "pp", "vpp", "ep", "etp", "cp", "dp_replicate", "sp", "schedule", "layout",
               "precision", "optimizer", "profile", "attention", "recompute")


def test_divisors():
    assert divisors(64) == (1, 2, 4, 8, 16, 32, 64)
    assert divisors(1) == (1,)
    assert divisors(100) == (1, 2, 4, 5, 10, 20, 25, 50, 100)


def test_tp_3_is_never_offered_for_32_heads():
    m = load_model("llama3-8b")
    cfg = replace(DEFAULT, model="llama3-8b", world=96, tp=1, pp=1)
    assert 3 not in valid_values(m, cfg, "tp")
    assert valid_values(m, cfg, "tp") == (1, 2, 4, 8)


def test_dense_models_offer_no_expert_parallelism():
    m = load_model("llama3-70b")
    assert valid_values(m, DEFAULT, "ep") == (1,) and valid_values(m, DEFAULT, "etp") == (1,)


def test_moe_with_tp_offers_only_sequence_parallel():
    m = load_model("deepseek-v3")
    cfg = replace(DEFAULT, model="deepseek-v3")
    assert valid_values(m, cfg, "sp") == (True,)
    assert valid_values(m, replace(cfg, tp=1), "sp") == (True, False)


def test_vpp_needs_the_interleaved_schedule_and_the_schedule_brings_it():
    m = load_model("llama3-70b")
    assert valid_values(m, DEFAULT, "vpp") == (1,)
    assert "interleaved" in valid_values(m, DEFAULT, "schedule")
    inter = with_value(DEFAULT, "schedule", "interleaved")
    assert inter.vpp == 2 and with_value(inter, "schedule", "1f1b").vpp == 1
    assert 1 not in valid_values(m, inter, "vpp")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["llama3-8b", "mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b"]),
       world=st.sampled_from([8, 16, 64, 96, 512]), key=st.sampled_from(WIDGET_KEYS),
       tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]))
def test_every_offered_value_is_valid_for_the_core(model, world, key, tp, pp):
    m = load_model(model)
    cfg, _ = repair(m, replace(DEFAULT, model=model, world=world, tp=tp, pp=pp))
    assert problem(m, cfg) is None
    offered = valid_values(m, cfg, key)
    assert getattr(cfg, key) in offered  # the current value is always among the options
    for v in offered:
        par, train = to_specs(with_value(cfg, key, v), m)
        check_all(m, par, train)  # raises if the widget offered an invalid value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(list(MODELS)), world=st.integers(1, 4096),
       tp=st.integers(1, 64), pp=st.integers(1, 64), ep=st.integers(1, 64), cp=st.integers(1, 8),
       vpp=st.integers(1, 4), seq=st.integers(1, 70_000), sp=st.booleans(),
       schedule=st.sampled_from(list(CANDIDATES["schedule"](None, DEFAULT))))
def test_repair_always_ends_valid(model, world, tp, pp, ep, cp, vpp, seq, sp, schedule):
    m = load_model(model)
    cfg = Config(model=model, world=world, tp=tp, pp=pp, ep=ep, cp=cp, vpp=vpp, seq=seq, sp=sp,
                 schedule=schedule)
    fixed, moves = repair(m, cfg)
    assert problem(m, fixed) is None
    assert (moves == []) == (problem(m, cfg) is None)
    assert fixed.model == model and fixed.world == world  # repair never changes these


def test_tp_3_for_32_heads_falls_back_to_a_near_valid_tp():
    m = load_model("llama3-8b")
    fixed, moves = repair(m, replace(DEFAULT, model="llama3-8b", tp=3))
    assert fixed.tp in (2, 4) and moves[0].key == "tp"
    assert "tp" in moves[0].reason


def test_a_new_preset_moves_what_it_must_and_keeps_the_rest():
    m = load_model("deepseek-v3")
    cfg = replace(DEFAULT, model="deepseek-v3", layout="even")  # 61 layers: pp=4 cannot be even
    fixed, moves = repair(m, cfg, pinned=frozenset({"model"}))
    assert [a.key for a in moves] == ["pp"] and fixed.pp == 1
    assert (fixed.tp, fixed.world, fixed.zero) == (cfg.tp, cfg.world, cfg.zero)


def test_a_pinned_world_size_moves_the_degrees_instead():
    m = load_model("llama3-70b")
    fixed, moves = repair(m, replace(DEFAULT, world=100), pinned=frozenset({"world"}))
    assert fixed.world == 100 and problem(m, fixed) is None
    assert {a.key for a in moves} <= {"tp", "pp", "cp"}


def test_eager_attention_is_offered_only_with_a_profile_that_keeps_probabilities():
    m = load_model("llama3-8b")
    cfg = replace(DEFAULT, model="llama3-8b")
    assert valid_values(m, cfg, "attention") == ("flash",)
    assert "eager" in valid_values(m, replace(cfg, profile="paper"), "attention")


@pytest.mark.parametrize("seq,expect", [(4097, 4096), (6000, 6000)])
def test_a_sequence_length_cp_cannot_split_is_rounded(seq, expect):
    m = load_model("llama3-8b")
    cfg = replace(DEFAULT, model="llama3-8b", cp=2, tp=4, pp=1, world=64, seq=seq)
    fixed, _ = repair(m, cfg, pinned=frozenset({"cp"}))
    assert fixed.cp == 2 and fixed.seq == expect


def test_hsdp_replicas_offered_are_the_divisors_of_dp_the_core_accepts():
    m = load_model("llama3-70b")
    assert valid_values(m, DEFAULT, "dp_replicate") == (1, 2)  # 64 GPUs at tp 8 pp 4: dp 2
    assert valid_values(m, replace(DEFAULT, world=32, tp=1, pp=1), "dp_replicate") == \
        (1, 2, 4, 8, 16, 32)
    moe = load_model("mixtral-8x7b")  # ep·etp must divide one shard group's tp·cp·dp/R
    cfg = replace(DEFAULT, model="mixtral-8x7b", world=16, tp=1, pp=1, ep=8, zero=3)
    assert valid_values(moe, cfg, "dp_replicate") == (1, 2)  # ep 8 divides 16/R: R <= 2
    assert valid_values(moe, replace(cfg, world=8), "dp_replicate") == (1,)


def test_a_replica_count_that_does_not_divide_dp_falls_back_to_one():
    """dp_replicate=3 at dp 32 (a link): the core's reason, and HSDP off, not the nearest 4."""
    m = load_model("llama3-70b")
    fixed, moves = repair(m, replace(DEFAULT, world=32, tp=1, pp=1, zero=3, dp_replicate=3))
    assert fixed.dp_replicate == 1 and (fixed.world, fixed.tp, fixed.zero) == (32, 1, 3)
    assert [str(a) for a in moves] == ["dp_replicate 3 → 1: dp_replicate=3 must divide dp=32 "
                                       "(HSDP: dp = dp_replicate x the shard group)"]


def test_a_new_world_size_that_dp_replicate_no_longer_divides_switches_hsdp_off():
    """256 GPUs at tp 8 pp 1 (dp 32) with 16 replicas; 64 GPUs leave dp 8: 1, not 8."""
    m = load_model("llama3-70b")
    cfg = replace(DEFAULT, world=64, tp=8, pp=1, dp_replicate=16)
    fixed, moves = repair(m, cfg, pinned=frozenset({"world"}))
    assert [a.key for a in moves] == ["dp_replicate"] and fixed.dp_replicate == 1
    assert (fixed.world, fixed.tp, fixed.pp) == (64, 8, 1)
