"""The planner's answers: a hand-checked case, constraints, an impossible request, headroom,
the ordering and the Pareto front."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memledger import build_ledger, gpu, model, n_params
from memledger.errors import SpecError
from memledger.planner import Constraints, Plan, PlanSpec, plan
from memledger.units import GIB, ceil_div

N_8B = n_params(model("llama3-8b"))


def llama8b(**kw) -> PlanSpec:
    return PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8,), seq=8192,
                    global_batch=64, **kw)


def test_llama3_8b_pure_data_parallel_on_8_h100_fits_exactly_these_12():
    """Llama-3 8B (N = 8.03e9 params) on 8 H100 (79.65 GiB), seq 8192, global batch 64, with
    tp = pp = cp = 1, so dp = 8 and 64/8 = 8 sequences per replica: micro-batch 1, 2, 4 or 8.

    Static rows with the Megatron recipe (bf16 weights 2 B, fp32 main-grads 4 B, fp32 master +
    Adam 12 B), sharded over d = 8:
      ZeRO-0: 18 N = 134.6 GiB — over capacity before any activation: nothing fits;
      ZeRO-1: (2 + 4 + 12/8) N = 7.5 N = 56.1 GiB;  ZeRO-2: (2 + 16/8) N = 4 N = 29.9 GiB;
      ZeRO-3: 18 N / 8 = 2.25 N = 16.8 GiB (+ two layers gathered, ~0.8 GiB).
    Activations of one 8192-token micro-batch (megatron profile): 32 layers × 1.06 GiB =
    34.0 GiB kept without recompute, 23.0 GiB with selective, 2.0 GiB of layer inputs with full
    (+ one layer's 1.06 GiB working set as a transient); plus 3.9 GiB of fp32 logits and a
    2.0 GiB bf16 logits gradient; then 5% allocator slack and 0.6 GiB CUDA context.
      ZeRO-1: only full recompute fits (mb 1: 68.0, mb 2: 76.4 GiB; mb 4: 93 GiB is over);
              no recompute is 56.1 + 34.0 + 3.9 + … ≈ 101.6 GiB.
      ZeRO-2: none and selective at mb 1 (74.1, 62.5 GiB; mb 2 adds another 34 / 23 GiB),
              full at mb 1, 2, 4 (40.5, 48.9, 65.7 GiB; mb 8 is 99.2).
      ZeRO-3: the same pattern 13 GiB lower (61.4, 49.8; full 27.7, 36.1, 52.9; mb 8 86.5).
    12 of 48 fit, and the fastest is no recompute at mb 1 under ZeRO-2 or 3: no TP/CP traffic,
    no bubble, no recompute; inside one NVLink node ZeRO-3's per-micro-batch gathers and
    ZeRO-2's reduce-scatters hide behind compute (costs.stepmodel.dp_seconds), so the two tie
    and the smaller peak (ZeRO-3) is listed first."""
    result = plan(llama8b(constraints=Constraints(tp=1, pp=1, cp=1)), keep_all=True)
    assert result.n_evaluated == 48
    rows = result.rows(range(48))
    fits = {(r["zero"], r["recompute"], r["micro_batch"]) for r in rows
            if r["peak_bytes"] <= result.spec.limit_bytes}
    assert fits == {(1, "full", 1), (1, "full", 2),
                    (2, "none", 1), (2, "selective", 1), (2, "full", 1), (2, "full", 2),
                    (2, "full", 4),
                    (3, "none", 1), (3, "selective", 1), (3, "full", 1), (3, "full", 2),
                    (3, "full", 4)}
    assert result.n_fits == 12
    static = {}
    for r in rows:
        led = build_ledger(result.spec.model, *result.specs(r))
        assert led.peak.peak_total_bytes == r["peak_bytes"]
        static[r["zero"]] = led.peak.static_bytes
    assert static == {0: 18 * N_8B, 1: 6 * N_8B + 12 * N_8B // 8, 2: 2 * N_8B + 16 * N_8B // 8,
                      3: 18 * N_8B // 8}
    fitting = [r for r in result.rows(result.order) if r["peak_bytes"] <= result.spec.limit_bytes]
    assert [(r["zero"], r["recompute"], r["micro_batch"]) for r in fitting[:2]] == [
        (3, "none", 1), (2, "none", 1)]
    assert fitting[0]["seconds"] == fitting[1]["seconds"]


def test_the_fastest_layout_of_llama3_8b_on_8_h100_is_pure_data_parallel():
    result = plan(llama8b())
    best = result.rows(result.top(1))[0]
    assert (best["tp"], best["pp"], best["cp"], best["dp"]) == (1, 1, 1, 8)


@pytest.mark.parametrize("fixed", [dict(tp=2), dict(pp=2, schedule="interleaved"),
                                   dict(zero=1, recompute="selective"), dict(micro_batch=2),
                                   dict(cp=2, dp=2), dict(vpp=4)])
def test_fixed_axes_are_respected(fixed):
    result = plan(llama8b(constraints=Constraints(**fixed)), keep_all=True)
    rows = result.rows(range(result.n_evaluated))
    assert rows
    for key, value in fixed.items():
        assert {r[key] for r in rows} == {value}


def test_bounds_are_respected_and_tp_defaults_to_the_node_size():
    spec = PlanSpec(model=model("llama3-70b"), hardware=gpu("h100"), worlds=(64,), seq=4096,
                    global_batch=64, gpus_per_node=4,
                    constraints=Constraints(max_cp=2, max_vpp=2, max_micro_batch=2))
    result = plan(spec, keep_all=True)
    c = result.evaluated.columns()
    assert c["tp"].max() == 4 and c["cp"].max() == 2
    assert c["vpp"].max() == 2 and c["micro_batch"].max() == 2


def test_405b_on_one_gpu_is_empty_with_the_smallest_peak_and_the_gpus_it_needs():
    spec = PlanSpec(model=model("llama3.1-405b"), hardware=gpu("h100"), worlds=(1,), seq=8192,
                    global_batch=8)
    result = plan(spec)
    assert result.n_fits == 0 and result.rows(result.top(0)) == []
    best = result.evaluated.best
    assert best["peak_bytes"] > 18 * n_params(spec.model)  # ZeRO-0 on one GPU: all states
    need = ceil_div(18 * n_params(spec.model), spec.limit_bytes - spec.runtime.cuda_context_bytes)
    assert result.gpus_needed == need == 87
    assert f"{best['peak_bytes'] / GIB:.2f} GiB" in result.reason
    assert "≥ 87 GPUs of this kind" in result.reason
    d = result.to_dict()
    assert d["configurations"] == [] and d["reason"] == result.reason
    json.dumps(d)


def test_a_constraint_that_leaves_nothing_says_which_rule():
    result = plan(llama8b(constraints=Constraints(tp=3)))
    assert result.n_evaluated == 0 and "tp*pp*cp=3" in result.reason


def test_more_headroom_keeps_a_subset():
    loose, tight = plan(llama8b(headroom=0.0)), plan(llama8b(headroom=0.2))
    assert 0 < tight.n_fits < loose.n_fits
    assert tight.evaluated.peak_bytes.max() <= int(gpu("h100").hbm_bytes * 0.8)
    assert loose.n_evaluated == tight.n_evaluated


def test_two_world_sizes_are_the_union_of_each():
    both = plan(PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8, 16),
                         seq=8192, global_batch=64))
    parts = [plan(PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(w,),
                           seq=8192, global_batch=64)) for w in (8, 16)]
    assert both.n_fits == sum(p.n_fits for p in parts)
    assert both.n_structural == sum(p.n_structural for p in parts)
    assert set(both.evaluated.columns()["world"].tolist()) == {8, 16}


def test_configurations_are_sorted_fastest_first_and_top_k_is_the_prefix():
    result = plan(llama8b())
    secs = result.evaluated.seconds[result.order]
    assert np.all(np.diff(secs) >= 0)
    assert result.top(25).tolist() == result.order[:25].tolist()


def test_pareto_front_members_are_undominated_and_dominate_the_rest():
    result = plan(llama8b())
    peak, secs = result.evaluated.peak_bytes, result.evaluated.seconds
    front = result.pareto
    for i in front:
        assert not np.any((peak <= peak[i]) & (secs <= secs[i]) & ((peak < peak[i]) | (secs < secs[i])))
    covered = np.zeros(len(peak), bool)
    for i in front:
        covered |= (peak >= peak[i]) & (secs >= secs[i])
    assert covered.all()


def test_sequence_parallel_is_on_for_tp_above_1_where_the_framework_has_it():
    """Korthikanti et al. 2022 introduced it: Megatron-Core runs it, Megatron-LM 2021 did not."""
    core, old = llama8b(), llama8b(framework="megatron-2021")
    assert [core.sequence_parallel(tp) for tp in (1, 2, 8)] == [False, True, True]
    assert [old.sequence_parallel(tp) for tp in (1, 2, 8)] == [False, False, False]


def test_moe_with_tp_under_megatron_2021_is_refused_by_the_cores_sequence_parallel_rule():
    spec = PlanSpec(model=model("mixtral-8x7b"), hardware=gpu("h100"), worlds=(16,), seq=2048,
                    global_batch=32, framework="megatron-2021", constraints=Constraints(tp=2))
    result = plan(spec)
    assert result.n_evaluated == 0
    assert "MoE with tp=2 needs sequence parallel" in result.reason


def test_bad_plan_spec_names_the_field():
    with pytest.raises(SpecError, match="headroom"):
        llama8b(headroom=1.0)
    with pytest.raises(SpecError, match="global_batch"):
        PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8,), seq=8192,
                 global_batch=0)
    with pytest.raises(SpecError, match="recompute"):
        Constraints(recompute="every-k")


def test_probe_pareto_equals_the_sort_everything_front_on_a_large_random_cloud():
    from memledger.planner.answer.result import PROBE, _front
    rng = np.random.default_rng(7)
    n = 5 * PROBE
    secs, peak = np.round(rng.random(n) * 50, 2), rng.integers(0, 10**5, n)
    ev = type("E", (), {"peak_bytes": peak, "seconds": secs})()
    fast = Plan.__new__(Plan)
    fast.evaluated = ev
    ref = _front(np.arange(n), peak, secs)
    assert sorted(zip(peak[fast.pareto], secs[fast.pareto])) == sorted(zip(peak[ref], secs[ref]))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000), chunk=st.integers(1, 700),
       probe=st.integers(1, 300), levels=st.sampled_from((3, 50, 10**6)))
def test_chunked_sampled_pareto_equals_the_sort_everything_front(seed, n, chunk, probe, levels):
    """Any chunk size (points split across chunks), any probe size (probes cut from samples,
    so the probe set is not the exact k smallest) and heavy ties give the exact front."""
    import memledger.planner.answer.result as res
    rng = np.random.default_rng(seed)
    secs, peak = rng.integers(0, levels, n) / 7, rng.integers(0, levels, n)
    ev = type("E", (), {"peak_bytes": peak, "seconds": secs})()
    old = res.CHUNK, res.PROBE
    res.CHUNK, res.PROBE = chunk, probe
    try:
        fast = Plan.__new__(Plan)
        fast.evaluated = ev
        got = fast.pareto
    finally:
        res.CHUNK, res.PROBE = old
    ref = res._front(np.arange(n), peak, secs)
    assert sorted(zip(peak[got], secs[got])) == sorted(zip(peak[ref], secs[ref]))
    assert (np.diff(secs[got]) >= 0).all()  # fastest first
