"""Invariants of the ledger, checked on random valid configurations (hypothesis)."""
from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memledger import ParallelSpec, SpecError, TrainSpec, build_ledger, model
from memledger.ledger.items import ROWS

MODELS = ["llama3-8b", "llama3.2-1b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "korthikanti-22b"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def configs(draw):
    m = model(draw(st.sampled_from(MODELS)))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 4]))
    ep = draw(st.sampled_from([1, 2, 4, 8])) if m.moe else 1
    cp = draw(st.sampled_from([1, 2]))
    dp = draw(st.sampled_from([1, 2, 4, 8, 16]))
    layout = None
    if m.n_layers % pp:
        from memledger.ledger.pipeline.schedules import balanced_layout
        layout = balanced_layout(m.n_layers, pp)
    try:
        p = ParallelSpec(tp=tp, pp=pp, ep=ep, cp=cp, dp=dp, sp=tp > 1, zero=draw(st.integers(0, 3)),
                         schedule=draw(st.sampled_from(["1f1b", "gpipe", "zb-h1"])) if pp > 1 else "1f1b",
                         layout=layout)
        t = TrainSpec(micro_batch=draw(st.sampled_from([1, 2])), seq=draw(st.sampled_from([1024, 4096])),
                      micro_batches=draw(st.sampled_from([1, 4, 8])),
                      precision=draw(st.sampled_from(["megatron", "mixed16", "bf16", "fp32", "fp8"])),
                      optimizer=draw(st.sampled_from(["adamw", "muon", "adafactor", "adam8bit", "sgd"])),
                      profile=draw(st.sampled_from(["megatron", "paper"])),
                      recompute=draw(st.sampled_from(["none", "selective", "full", "every-k"])))
        led = build_ledger(m, p, t)
    except SpecError:
        assume(False)
    return m, p, t, led


def static_max(led):
    return {row: max(r.rows[row] for r in led.ranks) for row in ("weights", "gradients", "optimizer")}


def try_ledger(m, p, t, **changes):
    try:
        return build_ledger(m, replace(p, **changes), t)
    except SpecError:
        return None


@SETTINGS
@given(configs())
def test_rows_sum_to_peak_total_and_items_sum_to_rows(cfg):
    *_, led = cfg
    for r in led.ranks:
        assert sum(r.rows[k] for k in ROWS) == r.peak_total_bytes
        for k in ROWS:
            assert sum(i.bytes for i in r.items if i.row == k) == r.rows[k]
        assert all(isinstance(i.bytes, int) and i.bytes >= 0 for i in r.items)
        assert r.peak_allocated_bytes <= r.peak_total_bytes


@SETTINGS
@given(configs(), st.sampled_from(["tp", "ep", "pp", "zero", "dp"]))
def test_more_sharding_never_adds_static_bytes(cfg, axis):
    m, p, t, led = cfg
    if axis == "zero":
        assume(p.zero < 3)
        change = {"zero": p.zero + 1}
    else:
        assume(axis != "pp" or p.layout is None)
        change = {axis: getattr(p, axis) * 2} | ({"sp": True} if axis == "tp" else {})
    other = try_ledger(m, p, t, **change)
    assume(other is not None)
    before, after = static_max(led), static_max(other)
    for row in before:
        assert after[row] <= before[row], (row, p, change)


@SETTINGS
@given(configs())
def test_1f1b_layer_staircase_is_non_increasing_in_rank(cfg):
    m, p, t, _ = cfg
    assume(p.layout is None and p.pp > 1)
    led = build_ledger(m, replace(p, schedule="1f1b"), t)
    layer_acts = [sum(i.bytes for i in r.row_items("activations") if "layers /" in i.name
                      or i.name.startswith("checkpointed")) for r in led.ranks]
    assert layer_acts == sorted(layer_acts, reverse=True)


@SETTINGS
@given(configs())
def test_recompute_never_adds_kept_activations(cfg):
    m, p, t, _ = cfg
    act = {rc: max(r.rows["activations"] for r in build_ledger(m, p, replace(t, recompute=rc)).ranks)
           for rc in ("none", "selective", "full")}
    assert act["full"] <= act["selective"] <= act["none"]


@SETTINGS
@given(configs())
def test_gpipe_holds_every_micro_batch(cfg):
    m, p, t, _ = cfg
    assume(p.layout is None)
    one = build_ledger(m, replace(p, schedule="gpipe"), replace(t, micro_batches=1, recompute="none"))
    four = build_ledger(m, replace(p, schedule="gpipe"), replace(t, micro_batches=4, recompute="none"))
    for a, b in zip(one.ranks, four.ranks):
        assert b.rows["activations"] == 4 * a.rows["activations"]


@SETTINGS
@given(configs())
def test_a_rank_holds_what_its_own_placement_gives_not_only_its_compositions(cfg):
    """The ledger builds the parameter groups, static items, step temporaries and Megatron's
    communication row once per composition (build.static_part); each rank's equal what its own
    placement gives, built directly."""
    from memledger.ledger.build import rank_parts
    from memledger.ledger.communication import comm_items
    from memledger.ledger.fsdp2 import expert_sharding
    from memledger.ledger.pipeline.placement import rank_placement
    from memledger.ledger.runtime import step_temporaries
    from memledger.ledger.static.engines import apply_engines
    from memledger.ledger.static.held import held_groups, static_items
    from memledger.ledger.static.moves import move_static, opt_partition_params
    from memledger.specs.loop import resolve_loop
    from memledger.specs.runtime import RuntimeSpec

    m, p, t, led = cfg
    rt = RuntimeSpec()
    loop = resolve_loop(rt, t.profile)
    for r in range(p.pp):
        place = rank_placement(m, p, t, rt, r)
        held = held_groups(m, p, t, place, loop)
        pad = expert_sharding(p, t, rt, loop)
        static, host = move_static(apply_engines(static_items(held, p, t, pad), held, p, t, rt),
                                   opt_partition_params(held, p), p, t, rt)
        parts = rank_parts(m, p, t, rt, r)
        assert parts.items[:len(static)] == tuple(static) and parts.host == host
        assert parts.step == step_temporaries(held, p, t, rt)
        comm = [i for i in parts.items if i.row == "communication"]
        assert comm == comm_items(m, p, t, rt, held, None, loop)


def test_frozen_layers_make_their_own_composition():
    """Two ranks with the same layer counts but different frozen layers hold different groups."""
    from memledger.ledger.build import rank_parts
    from memledger.specs.finetune import FinetuneSpec
    from memledger.specs.runtime import RuntimeSpec

    m = model("llama3-8b")
    p = ParallelSpec(pp=4, dp=2)
    t = TrainSpec(seq=1024, micro_batches=8, finetune=FinetuneSpec(mode="freeze", freeze=("layers:0-11",)))
    frozen = [sum(i.bytes for i in rank_parts(m, p, t, RuntimeSpec(), r).items
                  if i.row == "optimizer") for r in range(4)]
    assert 0 < frozen[1] < frozen[2]  # rank 1 holds layers 8-15 (8-11 frozen), rank 2 16-23
