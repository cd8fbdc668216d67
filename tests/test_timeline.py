"""The step timeline: peak_allocated is the maximum of each rank's events, the staircase is what
the timeline holds at the first backward, and the training loop decides lifetimes."""
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memledger import ParallelSpec, TrainSpec, build_ledger, model
from memledger.errors import SpecError
from memledger.ledger.items import ROWS
from memledger.ledger.pipeline.engines import resolve_engine
from memledger.ledger.timeline import action_order
from memledger.model.hf_config import load_hf_config
from memledger.model.params import n_mtp_params, n_params, padded_vocab
from memledger.specs.loop import LOOPS, resolve_loop
from memledger.specs.runtime import RuntimeSpec

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
SCHEDULES = {
    "gpipe": dict(pp=4), "1f1b": dict(pp=4), "zb-h1": dict(pp=4),
    "interleaved": dict(pp=2, vpp=2), "zb-v": dict(pp=2), "dualpipe": dict(pp=2),
    "dualpipev": dict(pp=2),
}


def runs(schedule: str, pp: int, m: int, engine: str = "auto") -> bool:
    """Whether the pipeline engine (auto: some engine) runs m micro-batches of the schedule on
    pp ranks (the ledger refuses the others: memledger.ledger.pipeline.engines)."""
    try:
        resolve_engine(schedule, engine, pp, m)
    except SpecError:
        return False
    return True


def ledger(loop="megatron", schedule="1f1b", m=8, name="llama3.2-1b", profile="megatron",
           recompute="none", precision="megatron", **rt):
    par = ParallelSpec(tp=2, sp=True, schedule=schedule, **SCHEDULES[schedule])
    t = TrainSpec(seq=2048, micro_batches=m, profile=profile, recompute=recompute,
                  precision=precision)
    return build_ledger(model(name), par, t, RuntimeSpec(loop=loop, **rt))


def live(r, e):
    return e.live(r.shape.static_bytes)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("loop", list(LOOPS))
@pytest.mark.parametrize("recompute,precision", [("none", "megatron"), ("full", "amp")])
def test_peak_allocated_is_the_maximum_of_the_timeline(loop, schedule, recompute, precision):
    engine = RuntimeSpec(loop=loop).pipeline_engine  # torchtitan: torch.distributed.pipelining
    for m in (m for m in (1, 2, 3, 8) if runs(schedule, SCHEDULES[schedule]["pp"], m, engine)):
        led = ledger(loop, schedule, m, recompute=recompute, precision=precision)
        for r in (r for r in led.ranks if r.shape.feasible):  # see RankShape.feasible
            evs = r.timeline
            top = max(live(r, e) for e in evs)
            assert top == r.peak_allocated_bytes, (loop, schedule, m, r.pp_rank)
            if r.shape.on_demand:  # the walked peak names the first event reaching it
                e = next(e for e in evs if live(r, e) == top)
                pe = r.peak_event
                assert (e.phase, e.stage, e.micro_batch, e.layer) == \
                    (pe.phase, pe.stage, pe.micro_batch, pe.layer)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_the_staircase_is_what_the_timeline_holds_at_the_first_backward(schedule):
    led = ledger("pytorch", schedule, 8, recompute="selective")
    for r in led.ranks:
        first = next(e for e in r.timeline if e.phase in ("loss-backward", "backward"))
        assert first.activations == r.rows["activations"]
        # set_to_none: no gradient exists before the first backward; its first event holds
        # none (loss backward: the head's gradient follows it) or its layer's, plus any the
        # layers do not own
        st = next(s for s in r.shape.stages if s.stage == first.stage)
        own = 0 if first.phase == "loss-backward" else st.layers[-1][2]
        assert first.gradients == own + r.shape.other_grads < r.rows["gradients"]


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_every_micro_batch_runs_forward_and_backward_once_per_stage(schedule):
    m = 5 if runs(schedule, SCHEDULES[schedule]["pp"], 5) else 6
    led = ledger("megatron", schedule, m)
    for r in led.ranks:
        order = action_order(r.shape)
        stages = {s.stage for s in r.shape.stages}
        for kind in "FB":
            assert sorted((s, k) for x, s, k in order if x == kind) == \
                sorted((s, k) for s in stages for k in range(m))
        fwd_done = set()
        for x, s, k in order:  # a backward never precedes its forward
            if x == "F":
                fwd_done.add((s, k))
            else:
                assert (s, k) in fwd_done


def test_megatron_loop_keeps_the_closed_form_peak():
    led = ledger("megatron", "1f1b", 8)
    for r in led.ranks:
        static, fwd_bwd, worst = (r.static_bytes, r.rows["activations"] + r.rows["communication"],
                                  r.peak_allocated_bytes)
        step = next(e for e in r.timeline if e.phase == "optimizer-step").transient
        transients = max(e.transient for e in r.timeline if e.phase != "optimizer-step")
        assert worst == static + max(fwd_bwd + transients, step)


def test_set_to_none_single_micro_batch_peaks_in_backward_without_the_gradient_row():
    # pp = 1, m = 1 (the plain loop on one GPU): at the loss backward every activation and the
    # logits gradient are alive and no gradient exists yet
    par = ParallelSpec(schedule="gpipe")
    t = TrainSpec(seq=4096, micro_batches=1, profile="hf", precision="bf16")
    led = build_ledger(model("llama3.2-1b"), par, t, RuntimeSpec(loop="hf-trainer"))
    r = led.ranks[0]
    assert r.peak_event.phase == "loss-backward"
    assert r.peak_allocated_bytes == r.static_bytes - r.rows["gradients"] + \
        r.rows["activations"] + r.rows["communication"] + r.shape.t_loss
    persistent = build_ledger(model("llama3.2-1b"), par, t,
                              RuntimeSpec(loop="hf-trainer", grad_lifetime="persistent")).ranks[0]
    assert persistent.peak_allocated_bytes - r.peak_allocated_bytes == r.rows["gradients"]


def test_1f1b_steady_state_brings_the_staircase_back_with_every_gradient():
    # m > p - r: after its first backward each rank runs a forward that restores the staircase,
    # now with all of its gradients alive: the on-demand peak equals the persistent one
    on = ledger("megatron", "1f1b", 16, grad_lifetime="on-demand")
    off = ledger("megatron", "1f1b", 16)
    for a, b in zip(on.ranks, off.ranks):
        assert a.peak_allocated_bytes == b.peak_allocated_bytes
        assert a.peak_event.phase in ("forward", "loss-forward", "loss-backward", "backward")


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(list(SCHEDULES)), st.integers(1, 9), st.sampled_from(["none", "full", "selective"]),
       st.sampled_from(["megatron", "mixed16", "amp", "bf16"]))
def test_on_demand_gradients_never_raise_the_peak(schedule, m, recompute, precision):
    assume(runs(schedule, SCHEDULES[schedule]["pp"], m))
    on = ledger("megatron", schedule, m, recompute=recompute, precision=precision,
                grad_lifetime="on-demand")
    off = ledger("megatron", schedule, m, recompute=recompute, precision=precision)
    for a, b in zip(on.ranks, off.ranks):
        assert a.peak_allocated_bytes <= b.peak_allocated_bytes
        assert sum(a.rows[k] for k in ROWS) == a.peak_total_bytes


def test_optimizer_implementations_order_the_step_temporaries():
    kw = dict(schedule="1f1b", m=1, name="llama3-8b", precision="fp32", optimizer_impl=None)
    step = {}
    for impl in ("fused", "for-loop", "foreach"):
        led = ledger(**{**kw, "optimizer_impl": impl})
        step[impl] = next(e for e in led.ranks[0].timeline if e.phase == "optimizer-step").transient
    assert step["fused"] == 0 < step["for-loop"] < step["foreach"]
    # for-loop: sqrt and quotient of the largest local tensor (embedding 128256×4096 / tp 2), fp32
    assert step["for-loop"] == 2 * 4 * (128256 * 4096 // 2)


def test_chunked_loss_drops_the_logits_transients():
    a = ledger("pytorch", "1f1b", 1, profile="hf")
    b = ledger("pytorch", "1f1b", 1, profile="hf", loss="chunked")
    last = a.ranks[-1]
    assert last.shape.t_loss > 0 and b.ranks[-1].shape.t_loss == 0
    assert b.ranks[-1].peak_allocated_bytes < last.peak_allocated_bytes


@pytest.mark.parametrize("stem", sorted(p.stem for p in FIXTURES.glob("*.json")))
@pytest.mark.parametrize("loop", list(LOOPS))
def test_weights_and_n_params_agree_for_every_config_under_every_loop(stem, loop):
    m = load_hf_config(FIXTURES / f"{stem}.json")
    profile = "megatron" if loop == "megatron" else "hf"
    t = TrainSpec(seq=128, precision="fp32", profile=profile)
    led = build_ledger(m, ParallelSpec(), t, RuntimeSpec(loop=loop))
    # Megatron-style profiles pad the vocabulary (the padded rows are instantiated too)
    pad = (padded_vocab(m, 1, t.pad_multiple()) - m.vocab) * m.hidden * (1 if m.tied_embeddings else 2)
    assert led.ranks[0].rows["weights"] == 4 * (led.n_params + pad)
    assert led.n_params == n_params(m) + (n_mtp_params(m) if LOOPS[loop].mtp == "built" else 0)


def test_deepseek_mtp_is_built_by_megatron_only():
    m = model("deepseek-v3")
    assert m.n_mtp_layers == 1
    mg = build_ledger(m, ParallelSpec(), TrainSpec(seq=128), RuntimeSpec(loop="megatron"))
    hf = build_ledger(m, ParallelSpec(), TrainSpec(seq=128), RuntimeSpec(loop="hf-trainer"))
    assert mg.n_params - hf.n_params == n_mtp_params(m) > 0
    assert not any(i.name.startswith("mtp") for i in hf.ranks[0].items)


def test_loop_defaults_follow_the_profile():
    assert resolve_loop(RuntimeSpec(), "hf").name == "pytorch"
    assert resolve_loop(RuntimeSpec(), "megatron").name == "megatron"
    assert resolve_loop(RuntimeSpec(grad_lifetime="persistent"), "hf").grad_lifetime == "persistent"


def test_combinations_no_framework_runs_are_errors():
    with pytest.raises(SpecError, match="optimizer_impl"):
        resolve_loop(RuntimeSpec(optimizer_offload=True, optimizer_impl="fused"), "megatron")
    with pytest.raises(SpecError, match="loop"):
        RuntimeSpec(loop="jax")


def test_json_carries_a_compact_timeline_and_the_peak_event():
    led = ledger("pytorch", "1f1b", 4)
    d = json.loads(json.dumps(led.to_dict()))
    r = d["ranks"][0]
    cols = r["timeline"]["columns"]
    rows = r["timeline"]["events"]
    assert cols[:4] == ["phase", "stage", "micro_batch", "layer"] and rows
    peak = max(r["timeline"]["static_bytes"] + sum(e[4:]) for e in rows)
    assert peak == r["peak_allocated_bytes"] == r["peak_event"]["bytes"]
    assert d["config"]["loop"]["name"] == "pytorch"
    assert RuntimeSpec(**d["config"]["runtime"]) == led.runtime


def test_cli_names_a_bad_loop_or_knob_in_one_line():
    import subprocess
    import sys
    for args in (["--loop", "jax"], ["--grad-lifetime", "sometimes"],
                 ["--optimizer-offload", "--optimizer-impl", "fused"]):
        out = subprocess.run([sys.executable, "-m", "memledger", "ledger", "--model", "llama3-8b",
                              *args], capture_output=True, text=True)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
        assert any(w in out.stderr for w in ("loop", "grad-lifetime", "optimizer_impl"))


def test_muon_leaves_fused_3d_experts_to_adamw_unless_the_loop_splits_them():
    m = model("qwen3-30b-a3b")
    t = TrainSpec(seq=1024, optimizer="muon", precision="bf16")
    par = ParallelSpec(ep=8, dp=8)
    split = build_ledger(m, par, t, RuntimeSpec(loop="pytorch", muon_experts="split")).ranks[0]
    fused = build_ledger(m, par, t, RuntimeSpec(loop="pytorch")).ranks[0]  # transformers: 3-D
    experts = sum(g.count for g in __import__("memledger.model.params", fromlist=["x"]).layer_groups(m, "moe")
                  if g.expert) * m.n_moe_layers // 8
    # AdamW keeps two bf16 moments where Muon keeps one momentum buffer
    assert fused.rows["optimizer"] - split.rows["optimizer"] == 2 * experts
    assert fused.rows["weights"] == split.rows["weights"]


def test_help_states_that_the_loop_follows_the_profile():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "memledger", "ledger", "--help"],
                         capture_output=True, text=True).stdout
    assert "defaults follow --profile" in out and "--loop" in out and "--muon-experts" in out


def test_a_stage_without_layers_has_a_timeline():
    """A balanced layout of 2 layers over 4 stages leaves the first stage with the embedding
    only: its rank's timeline still has its (empty) backward."""
    m = load_hf_config(Path(__file__).parent / "fixtures" / "hf" / "tiny-llama-head-dim-null.json")
    led = build_ledger(m, ParallelSpec(pp=4, layout=(0, 1, 1, 0)), TrainSpec(micro_batches=4),
                       RuntimeSpec(loop="pytorch"))
    evs = led.ranks[0].timeline
    assert [e.phase for e in evs][-2:] == ["optimizer-step", "zero-grad"]
    assert any(e.phase == "backward" and e.stage == 0 for e in evs)
