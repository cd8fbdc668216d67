"""Fine-tuning (specs/finetune.py, ledger/static/finetune.py, activations/finetune.py): claims.

Invariants: LoRA never needs more gradient or optimizer bytes than full fine-tuning; freezing
every module leaves no gradient or optimizer row; freezing nothing is full fine-tuning byte for
byte. Bad input names its field and the valid values (SpecError, CLI exit 2, share links).
Golden sanity checks from the papers, each with what it does and does not pin down.
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memledger import build_ledger
from memledger.errors import SpecError
from memledger.model.params import n_params
from memledger.presets import model
from memledger.specs import ModelSpec, ParallelSpec, TrainSpec
from memledger.specs.finetune import FinetuneSpec
from memledger.units import GB, format_bytes
from memledger.views.state import Config, parse_params, to_params, to_specs

MODELS = ("llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "llama3.2-1b")
LAYOUTS = (ParallelSpec(), ParallelSpec(tp=8, pp=4, dp=1, sp=True), ParallelSpec(tp=2, dp=4, zero=1, sp=True),
           ParallelSpec(tp=2, pp=2, dp=2, zero=3, sp=True), ParallelSpec(ep=4, dp=4, zero=2))
TARGETS = ("attention", "mlp", "all-linear", "experts", "q_proj", "o_proj", "down_proj",
           "k_proj", "gate_proj", "linear_qkv", "router")


def _rows(m, p, ft, **kw):
    t = TrainSpec(seq=512, finetune=ft, **kw)
    return [r.rows for r in build_ledger(m, p, t).ranks]


def _valid_targets(m: ModelSpec, names):
    from memledger.ledger.static.finetune import check_finetune
    keep = []
    for n in names:
        try:
            check_finetune(m, FinetuneSpec(mode="lora", lora_rank=1, lora_targets=(n,)))
            keep.append(n)
        except SpecError:
            pass
    return tuple(keep)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.sampled_from(MODELS), st.sampled_from(LAYOUTS), st.sampled_from((1, 8, 64, 256)),
       st.sets(st.sampled_from(TARGETS), min_size=1, max_size=4),
       st.sampled_from(("fp32", "bf16")), st.sampled_from(("megatron", "mixed16", "bf16")))
def test_lora_never_needs_more_gradient_or_optimizer_bytes_than_full(name, p, r, targets,
                                                                     dtype, precision):
    """Where the adapters are narrow against the shards they sit beside: LoRA's A (r × in) is
    replicated over TP while the weight is split, so at r·tp near a target's width the adapters
    outgrow the shard (the next test)."""
    m = model(name)
    if p.ep > 1 and m.moe is None or p.n_stages > m.n_layers:
        return
    widths = [m.n_kv_heads * m.head_dim, m.hidden] + ([m.moe.expert_ffn] if m.moe else [])
    assume(r * p.tp * 4 <= min(widths))
    names = _valid_targets(m, sorted(targets))
    if not names:
        return
    ft = FinetuneSpec(mode="lora", lora_rank=r, lora_targets=names, lora_dtype=dtype)
    try:
        full = _rows(m, p, FinetuneSpec(), precision=precision)
    except SpecError:  # a layout the model refuses (heads, layers): not a fine-tuning question
        assume(False)
    try:
        lora = _rows(m, p, ft, precision=precision)
    except SpecError as e:  # a rank wider than a target (the router is E wide)
        assert e.field == "lora_rank"
        assume(False)
    for f, lo in zip(full, lora):
        assert lo["gradients"] <= f["gradients"]
        assert lo["optimizer"] <= f["optimizer"]


def test_wide_fp32_adapters_under_tp_outgrow_the_bf16_gradient_shard():
    """Llama-3.2-1B, tp 8 pp 4, rank-256 fp32 LoRA on attention and MLP: a middle rank's adapter
    gradients (73,924,608 B) exceed its full bf16 gradient shard (60,850,176 B) — A is
    replicated over the 8 TP ranks; the optimizer row stays smaller (147.8 MB vs 365.1 MB)."""
    m = model("llama3.2-1b")
    p = ParallelSpec(tp=8, pp=4, dp=1, sp=True, zero=0)
    ft = FinetuneSpec(mode="lora", lora_rank=256, lora_dtype="fp32",
                      lora_targets=_valid_targets(m, ["attention", "mlp"]))
    full, lora = _rows(m, p, FinetuneSpec(), precision="mixed16"), _rows(m, p, ft, precision="mixed16")
    assert (lora[1]["gradients"], full[1]["gradients"]) == (73_924_608, 60_850_176)
    assert lora[1]["optimizer"] < full[1]["optimizer"]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("p", LAYOUTS[:4], ids=str)
def test_freezing_every_module_leaves_no_gradient_or_optimizer_row(name, p):
    m = model(name)
    ft = FinetuneSpec(mode="freeze", freeze=("embeddings", "head", "norms", "layers"))
    try:
        full = _rows(m, p, FinetuneSpec())
    except SpecError:
        pytest.skip("a layout this model refuses")
    for f, rows in zip(full, _rows(m, p, ft)):
        assert rows["gradients"] == 0 and rows["optimizer"] == 0
        assert rows["weights"] == f["weights"]  # frozen parameters are still held (and sharded)


def test_freezing_all_layers_by_range_equals_freezing_layers_by_name():
    m = model("llama3-8b")
    by_name = FinetuneSpec(mode="freeze", freeze=("layers",))
    by_range = FinetuneSpec(mode="freeze", freeze=(f"layers:0-{m.n_layers - 1}",))
    p = ParallelSpec(tp=2, pp=2, dp=2)
    assert [r["gradients"] for r in _rows(m, p, by_name)] == \
           [r["gradients"] for r in _rows(m, p, by_range)]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("p", LAYOUTS, ids=str)
def test_freezing_nothing_is_full_fine_tuning_byte_for_byte(name, p):
    m = model(name)
    for profile in ("megatron", "hf"):
        t = TrainSpec(seq=512, profile=profile)
        try:
            full = build_ledger(m, p, t)
        except SpecError:
            pytest.skip("a layout this model refuses")
        none = build_ledger(m, p, replace(t, finetune=FinetuneSpec(mode="freeze")))
        assert [r.rows for r in none.ranks] == [r.rows for r in full.ranks]
        assert [r.peak_total_bytes for r in none.ranks] == [r.peak_total_bytes for r in full.ranks]


def test_zero3_still_shards_frozen_weights():
    m, ft = model("llama3-8b"), FinetuneSpec(mode="lora", lora_targets=("all-linear",))
    w1 = _rows(m, ParallelSpec(dp=8, zero=1), ft)[0]["weights"]
    w3 = _rows(m, ParallelSpec(dp=8, zero=3), ft)[0]["weights"]
    assert w3 * 8 == pytest.approx(w1, rel=1e-3)


def test_adapters_split_over_tp_as_megatron_bridge():
    """A column-parallel target keeps A whole and B / tp; a row-parallel one A / tp, B whole."""
    m = model("llama3-8b")
    h, r = m.hidden, 16
    for target, a_full, b_full in (("q_proj", h * r, r * m.n_heads * m.head_dim),
                                   ("o_proj", m.n_heads * m.head_dim * r, r * h)):
        ft = FinetuneSpec(mode="lora", lora_rank=r, lora_targets=(target,), lora_dtype="bf16")
        t = TrainSpec(seq=512, finetune=ft, precision="bf16", optimizer="sgd")
        grads = build_ledger(m, ParallelSpec(tp=8, dp=1), t).ranks[0].rows["gradients"]
        col = target == "q_proj"
        per_layer = (a_full + b_full // 8) if col else (a_full // 8 + b_full)
        assert grads == 2 * m.n_layers * per_layer


# -- golden sanity checks -------------------------------------------------------------------
def test_lora_paper_gpt3_175b_fits_in_about_350_gb():
    """Hu et al. 2021 §4.2: GPT-3 175B with LoRA r=4 on W_q, W_v: VRAM 1.2 TB -> 350 GB. The
    350 GB is the fp16 frozen base (175e9 x 2 bytes) plus tiny adapters; what we pin down is
    the static rows (weights + gradients + optimizer) of the whole model on one device."""
    m = model("gpt3-175b")
    ft = FinetuneSpec(mode="lora", lora_rank=4, lora_targets=("q_proj", "v_proj"),
                      base_weights="fp16", lora_dtype="fp16")
    rows = _rows(m, ParallelSpec(), ft, precision="fp16")[0]
    static = rows["weights"] + rows["gradients"] + rows["optimizer"]
    assert 340 * GB < static < 360 * GB
    assert rows["gradients"] < 0.001 * rows["weights"]


def test_qlora_paper_65b_weights_fit_in_48_gb():
    """Dettmers et al. 2023: LLaMA 65B fine-tunes on one 48 GB GPU. NF4 with double
    quantisation costs 4 + 8/64 + 32/(64 x 256) = 4.127 bits per parameter (§3); the
    embeddings, norms and head stay 16-bit. With r=64 bf16 adapters on every linear (the
    paper's qlora.py) the static rows and one sequence of 512 tokens under gradient
    checkpointing stay below 48 GB. Weights: 64.7e9 linear params x 4.127 / 8 = 33.4 GB, the
    16-bit embeddings and head 1.05 GB, the adapters 0.80e9 x 2 bytes = 1.6 GB: 36.05 GB."""
    m = ModelSpec(name="LLaMA-65B", n_layers=80, hidden=8192, n_heads=64, n_kv_heads=64,
                  head_dim=128, ffn_hidden=22016, vocab=32000)
    ft = FinetuneSpec(mode="qlora", lora_rank=64, lora_alpha=16, lora_targets=("all-linear",),
                      lora_dtype="bf16", base_weights="nf4")
    t = TrainSpec(seq=512, precision="bf16", optimizer="adamw", recompute="full", profile="hf",
                  finetune=ft)
    led = build_ledger(m, ParallelSpec(), t).ranks[0]
    linear = n_params(m) - 2 * 32000 * 8192 - (2 * 80 + 1) * 8192
    assert format_bytes("nf4:64:256", linear) * 8 / linear == pytest.approx(4.127, abs=0.002)
    assert 35.5 * GB < led.rows["weights"] < 36.5 * GB
    assert led.peak_allocated_bytes < 48 * GB


# -- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,field,words", [
    (dict(mode="lora", lora_rank=0), "lora_rank", "valid: 1..204,800"),
    (dict(mode="lora", lora_rank=-3), "lora_rank", "got -3"),
    (dict(mode="lora", lora_targets=("qproj",)), "lora_targets", "valid: q_proj"),
    (dict(mode="lora", lora_targets=()), "lora_targets", "at least one"),
    (dict(mode="qlora", base_weights="bf16"), "base_weights", "valid nf4, int8, fp8"),
    (dict(mode="lora", base_weights="nf4"), "base_weights", "only qlora"),
    (dict(mode="lora", lora_dropout_pct=100), "lora_dropout", "0..99"),
    (dict(mode="finetune"), "finetune", "valid: freeze, full, lora, qlora"),
    (dict(mode="freeze", freeze=("layers:9-3",)), "freeze", "backwards"),
    (dict(mode="freeze", freeze=("everything",)), "freeze", "layers:A-B"),
])
def test_bad_spec_names_the_field_and_the_valid_values(kw, field, words):
    with pytest.raises(SpecError) as e:
        FinetuneSpec(**kw)
    assert e.value.field == field and words in str(e.value)


@pytest.mark.parametrize("name,kw,field,words", [
    ("llama3-8b", dict(mode="lora", lora_targets=("q_a_proj",)), "lora_targets", "valid:"),
    ("llama3-8b", dict(mode="lora", lora_targets=("experts",)), "lora_targets", "'experts'"),
    ("deepseek-v3", dict(mode="lora", lora_targets=("q_proj",)), "lora_targets", "q_a_proj"),
    ("llama3-8b", dict(mode="lora", lora_rank=1025, lora_targets=("k_proj",)), "lora_rank",
     "1..1024"),
    ("llama3-8b", dict(mode="freeze", freeze=("layers:30-40",)), "freeze", "0-31"),
])
def test_a_model_without_the_module_or_too_narrow_is_refused(name, kw, field, words):
    with pytest.raises(SpecError) as e:
        build_ledger(model(name), ParallelSpec(), TrainSpec(seq=512, finetune=FinetuneSpec(**kw)))
    assert e.value.field == field and words in str(e.value)


def test_qlora_on_an_fp8_recipe_is_refused():
    with pytest.raises(SpecError) as e:
        TrainSpec(precision="fp8", finetune=FinetuneSpec(mode="qlora", base_weights="nf4"))
    assert e.value.field == "base_weights" and "megatron" in str(e.value)


@pytest.mark.parametrize("flags,words", [
    (["--finetune", "lora", "--lora-targets", "q_a_proj"], "--lora-targets"),
    (["--finetune", "lora", "--lora-rank", "0"], "--lora-rank"),
    (["--finetune", "lora", "--lora-rank", "99999"], "--lora-rank"),
    (["--finetune", "qlora", "--base-weights", "bf16"], "--base-weights"),
])
def test_cli_bad_fine_tuning_exits_2_with_one_line(flags, words):
    out = subprocess.run([sys.executable, "-m", "memledger", "ledger", "--model", "llama3-8b",
                          *flags], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "valid" in lines[0]


def test_cli_lora_json_has_no_base_gradients():
    import json
    out = subprocess.run([sys.executable, "-m", "memledger", "ledger", "--model", "llama3-8b",
                          "--finetune", "lora", "--lora-rank", "16", "--lora-targets",
                          "all-linear", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rank = json.loads(out.stdout)["ranks"][0]
    grads = [i for i in rank["items"] if i["row"] == "gradients" and i["bytes"]]
    assert grads and all(".lora_" in i["name"] for i in grads)


# -- share links ----------------------------------------------------------------------------
def test_share_links_round_trip_fine_tuning():
    cfg = Config(ft="qlora", lora_r=64, lora_alpha=16, lora_targets="all-linear",
                 lora_dropout=5, lora_dtype="bf16", base="nf4", freeze="layers:0-3")
    params = to_params(cfg)
    assert params["ft"] == "qlora" and params["lora_targets"] == "all-linear"
    assert parse_params(params) == (cfg, [])
    _, t = to_specs(cfg, model("llama3-8b"))
    assert t.finetune == FinetuneSpec(mode="qlora", lora_rank=64, lora_alpha=16,
                                      lora_targets=("all-linear",), lora_dropout_pct=5,
                                      lora_dtype="bf16", base_weights="nf4",
                                      freeze=("layers:0-3",))


def test_links_made_before_fine_tuning_open_the_same_configuration():
    old = {"model": "llama3-70b", "tp": "8", "pp": "4", "world": "64", "seq": "8192"}
    cfg, issues = parse_params(old)
    assert issues == [] and cfg.ft == "full"
    assert not any(k.startswith(("ft", "lora", "base", "freeze")) for k in to_params(cfg))
    _, t = to_specs(cfg, model("llama3-70b"))
    assert t.finetune == FinetuneSpec()


@pytest.mark.parametrize("key,value,words", [
    ("lora_targets", "q_proj,bogus", "unknown module 'bogus'"),
    ("freeze", "layers:x", "unknown module"),
    ("ft", "adapter", "valid: full, lora, qlora, freeze"),
    ("lora_r", "0", "1..204800"),
])
def test_bad_fine_tuning_link_values_name_the_parameter(key, value, words):
    _, issues = parse_params({key: value})
    assert len(issues) == 1 and issues[0].key == key and words in issues[0].message


# -- the advisor ----------------------------------------------------------------------------
def test_advisor_prices_freezing_and_adapters_in_bytes_for_the_trainable_fraction():
    from memledger.advisor import advise
    from memledger.presets import gpu
    led = build_ledger(model("llama3-70b"), ParallelSpec(tp=8, pp=4, dp=1, sp=True),
                       TrainSpec(seq=4096), hardware=gpu("h100"))
    ft = advise(led).finetune
    assert ft.mode == "full" and ft.trainable_pct == 100.0
    opts = {o.label.split(" (")[0]: o for o in ft.options}
    lora, qlora = opts["LoRA r=16 on all-linear"], opts["QLoRA NF4 r=16 on all-linear"]
    assert 0 < lora.trainable_pct < 2 and lora.saved_bytes > 0
    assert qlora.saved_bytes > lora.saved_bytes  # the 4-bit base on top of the adapters
    emb = opts["freeze embeddings and head"]
    assert 90 < emb.trainable_pct < 100 and emb.saved_bytes > 0


def test_leading_frozen_layers_keep_nothing_and_the_planner_sends_them_to_the_ledger():
    """With a frozen embedding nothing before the first trained layer requires grad: those
    layers keep no activations (measured: validation/finetune-cpu.json). The planner's
    per-kind tables cannot express it, so it refuses and names the field."""
    from memledger.planner import PlanSpec
    from memledger.presets import gpu
    m = model("llama3-8b")
    half = FinetuneSpec(mode="freeze", freeze=("embeddings", f"layers:0-{m.n_layers // 2 - 1}"))
    emb = FinetuneSpec(mode="freeze", freeze=("embeddings",))
    acts = {n: build_ledger(m, ParallelSpec(), TrainSpec(seq=1024, finetune=ft)).ranks[0]
            .rows["activations"] for n, ft in (("half", half), ("emb", emb))}
    assert acts["half"] < 0.6 * acts["emb"]
    with pytest.raises(SpecError) as e:
        PlanSpec(model=m, hardware=gpu("h100"), worlds=(8,), seq=1024, global_batch=8,
                 finetune=half)
    assert e.value.field == "freeze" and "memledger ledger" in str(e.value)


@pytest.mark.parametrize("field", ["nf4_block", "dq_block"])
def test_a_quantisation_block_out_of_range_names_its_own_field(field):
    with pytest.raises(SpecError) as e:
        FinetuneSpec(mode="qlora", base_weights="nf4", **{field: 5000})
    assert e.value.field == field and "1..4096" in str(e.value) and "5000" in str(e.value)


def test_nf4_without_double_quantisation_is_4_5_bits():
    """QLoRA §3: fp32 absmax per 64 values = 32/64 = 0.5 bits per parameter on top of 4."""
    n = 64 * 256 * 10
    assert format_bytes("nf4:64:0", n) * 8 / n == 4.5
    assert format_bytes("nf4:64:256", n) * 8 / n == pytest.approx(4 + 8 / 64 + 32 / (64 * 256))
