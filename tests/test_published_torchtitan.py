"""Claims against published measurements of real multi-GPU torchtitan runs
(validation/published-torchtitan.json): per row, the ledger's peak reserved of the most loaded
rank is within 10 % of the published `max_memory_reserved` (GiB = 2**30), or the row is a strict
xfail with its cause; the aggregate (rows within the bar, median error) guards regressions.
Also: the era / float8 / loss-form rules the rows rest on, and the TOML importer's spelling."""
from __future__ import annotations

import re

import pytest

from memledger.configs import read_files
from memledger.errors import SpecError
from memledger.ledger import build_ledger
from memledger.ledger.activations.torchtitan_loss import compiled_loss, dtensor_loss
from memledger.ledger.allocator import FSDP_UNIT_ITEMS
from memledger.ledger.torchtitan_eras import ERAS, loss_form
from memledger.specs.loop import resolve_loop
from memledger.specs.runtime import TORCHTITAN_VERSIONS, RuntimeSpec
from memledger.validation.published_titan import BAR, load, predict, specs, summary

ROWS = load()
MISSES: dict[str, str] = {}  # every row within the bar (docs/torchtitan-accuracy.md "Published runs")


def _param(row):
    cause = MISSES.get(row["id"])
    marks = [pytest.mark.xfail(strict=True, reason=cause)] if cause else []
    return pytest.param(row, id=row["id"], marks=marks)


@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_published_row_within_ten_percent(row):
    r = predict(row)
    assert abs(r["error"]) <= BAR, (f"{row['id']}: published {r['published_gib']} GiB, "
                                    f"predicted reserved {r['reserved_gib']:.2f} "
                                    f"({100 * r['error']:+.1f} %)")


def test_aggregate_accuracy():
    """24 of 24 rows within 10 %, median |error| 3.0 % at this commit: a drop shows here."""
    s = summary([predict(r) for r in ROWS])
    assert s["rows"] == 24
    assert s["within_bar"] >= 24, s
    assert s["median_abs_error"] <= 0.031, s
    assert s["within_bar"] == len(ROWS) - len(MISSES), "MISSES must name exactly the misses"


def _source_ok(src: dict, gib: float) -> bool:
    """A benchmarks/ table at a pinned torchtitan commit, or a torchtitan pull request / issue
    whose quoted log line carries the published figure as torchtitan prints it."""
    if src.get("kind") in ("pull_request", "issue"):
        kind = "pull" if src["kind"] == "pull_request" else "issues"
        return (re.fullmatch(rf"https://github\.com/pytorch/torchtitan/{kind}/\d+", src["url"])
                is not None and bool(src["where"]) and f"memory: {gib:.2f}GiB(" in src["log_line"])
    return src["file"].startswith("benchmarks/") and len(src["torchtitan_commit"]) == 40


def test_rows_carry_source_and_both_spellings():
    kinds = set()
    for r in ROWS:
        src, ml, tt = r["source"], r["memledger"], r["torchtitan"]
        kinds.add(src.get("kind", "benchmarks"))
        assert _source_ok(src, r["published_gib"]), r["id"]
        assert src["date"][:4] in ("2024", "2025") and r["published_gib"] > 0
        assert ml["tp"] * ml["pp"] * ml["cp"] * ml["dp"] == ml["world"], r["id"]
        assert ml["torchtitan_version"] in TORCHTITAN_VERSIONS
        assert tt.get("training.seq_len") == ml["seq"]
        ac = tt["activation_checkpoint.mode"]
        assert ml["recompute"] == ("full" if ac == "full" else "op"), r["id"]
        specs(ml)  # every row builds
    assert {"benchmarks", "pull_request"} <= kinds <= {"benchmarks", "pull_request", "issue"}


def test_eras_table_names_a_source_per_era():
    assert set(ERAS) == set(TORCHTITAN_VERSIONS)
    assert all(e.source for e in ERAS.values())
    assert not ERAS["2024-12"].compiles_loss and ERAS["2025-06"].compiles_loss
    assert ERAS["0.3"].fused_qkv and not ERAS["2024-12"].fused_qkv


def _led(era, tp=1, compile_=True, **kw):
    from memledger.model.presets import model
    from memledger.specs import ParallelSpec, TrainSpec
    p = ParallelSpec(tp=tp, dp=8, zero=3, sp=tp > 1)
    t = TrainSpec(seq=4096, micro_batch=1, precision="fsdp2-mixed", recompute="full",
                  profile="hf", vocab_pad=1)
    rt = RuntimeSpec(loop="torchtitan", zero3_impl="fsdp", tp_engine="dtensor",
                     loss="materialized", torch_compile=compile_, torchtitan_version=era, **kw)
    return p, t, rt, build_ledger(model("llama3-8b"), p, t, rt)


def test_loss_forms_by_era():
    for era, tp, comp, want in (("2025-06", 1, True, "compiled"), ("2024-12", 1, True, "profile"),
                                ("2024-12", 8, True, "dtensor"), ("0.2", 1, True, "compiled"),
                                ("0.2", 1, False, "profile"), ("0.3", 8, True, "dtensor"),
                                ("0.3", 1, True, "profile")):
        p, t, rt, _ = _led(era, tp, comp)
        assert loss_form(p, t, rt, resolve_loop(rt, t.profile)) == want, (era, tp, comp)


def test_compiled_loss_keeps_bf16_logits_and_one_bf16_gradient():
    """4096 tokens × 128256 vocab: bf16 logits held (2 B) + a per-token fp32 logsumexp; the
    backward transient is one bf16 gradient; the eager form holds fp32 log-probs (4 B)."""
    e = 4096 * 128256
    _, _, _, comp = _led("2025-06")
    _, _, _, eager = _led("2024-12")
    items = {i.name: i.bytes for i in comp.ranks[0].items if i.row == "activations"}
    assert items["loss.logits_bf16 (compiled CE input)"] == 2 * e
    assert items["loss.logsumexp (compiled CE)"] == 4 * 4096
    assert "loss.logprobs_fp32" not in items
    assert {i.name: i.bytes for i in eager.ranks[0].items}["loss.logprobs_fp32"] == 4 * e
    # the replay's shape: the transients whole (the events' own are net of the FSDP layer
    # units, resharded at the loss: runtime.walk_discounted)
    whole = lambda led: led.ranks[0].replay_shape.get()  # noqa: E731
    assert whole(comp).t_loss == 2 * e and whole(eager).t_loss == 8 * e
    assert whole(eager).t_loss_blocks == (4 * e, 4 * e)  # two tensors for the replay
    units = sum(i.bytes for i in eager.ranks[0].items if i.name in FSDP_UNIT_ITEMS)
    assert eager.ranks[0].shape.t_loss == 8 * e - units
    assert comp.ranks[0].peak_allocated_bytes < eager.ranks[0].peak_allocated_bytes


def test_dtensor_loss_parallel_backward_is_three_fp32_logit_tensors():
    from memledger.model.presets import model
    from memledger.specs import ParallelSpec, TrainSpec
    m, p = model("llama3-8b"), ParallelSpec(tp=8, dp=1, sp=True)
    t = TrainSpec(seq=4096, micro_batch=1, recompute="full", profile="hf", vocab_pad=1)
    held, tr = dtensor_loss(m, t, p)
    assert [x.values for x in held] == [m.vocab] and tr[0].values == 3 * m.vocab
    assert tr[0].pieces == 3 and tr[0].split == "tp"
    assert compiled_loss(m, t, p)[1][0].fmt == "act"


def test_every_era_runs_loss_parallel_with_the_fp32_working_set():
    """Eager loss parallel keeps fp32 log-probabilities to the backward and 16 B per local logit
    at it: torch's loss_parallel ops before 0.3, 0.3's own _LossParallelCrossEntropy
    (components/loss.py: logits.float(), shifted, exp, log_probs saved; zeros_like, exp, their
    sum backward) — the same loss items in both; an explicit --compile-loss on holds at 0.3."""
    _, _, _, dt = _led("2024-12", tp=8, compile_=False)
    _, _, _, off = _led("2024-12", tp=8, compile_=False, compile_loss="off", loss_parallel=True)
    assert dt.ranks[0].peak_allocated_bytes == off.ranks[0].peak_allocated_bytes
    _, _, _, v3 = _led("0.3", tp=8, compile_=False)
    loss = lambda led: {i.name: i.bytes for i in led.ranks[0].items if i.name.startswith("loss.")}  # noqa: E731
    assert loss(v3) == loss(dt) and "loss.logprobs_fp32" in loss(v3)
    p, t, rt, _ = _led("0.3", tp=8, compile_=True, compile_loss="on")
    assert loss_form(p, t, rt, resolve_loop(rt, t.profile)) == "compiled"


def test_float8_fsdp_all_gather_halves_the_gather_buffers():
    _, _, _, bf = _led("2024-12", float8="tensorwise")
    _, _, _, f8 = _led("2024-12", float8="tensorwise", float8_fsdp_all_gather=True)
    gather = lambda led: {i.name: i.bytes for i in led.ranks[0].items}["zero-3 gather + prefetch"]
    assert gather(bf) == 2 * gather(f8)


@pytest.mark.parametrize("kw,field", [
    (dict(float8_fsdp_all_gather=True), "float8_fsdp_all_gather"),
    (dict(float8="rowwise", float8_fsdp_all_gather=True), "float8_fsdp_all_gather"),
    (dict(float8="fp4"), "float8"), (dict(compile_loss="yes"), "compile_loss"),
    (dict(float8_force_recompute_weight=True), "float8_force_recompute_weight"),
])
def test_float8_spec_validation(kw, field):
    with pytest.raises(SpecError) as e:
        RuntimeSpec(**kw)
    assert e.value.field == field


def test_float8_without_ac_is_named_in_a_warning():
    from memledger.model.presets import model
    from memledger.specs import ParallelSpec, TrainSpec
    t = TrainSpec(seq=1024, micro_batch=1, precision="fsdp2-mixed", recompute="none",
                  profile="hf")
    led = build_ledger(model("llama3-8b"), ParallelSpec(dp=8, zero=3), t,
                       RuntimeSpec(loop="torchtitan", float8="tensorwise"))
    assert any("float8 without activation checkpointing" in w for w in led.warnings)


def test_torchtitan_toml_spelling_of_the_h200_row(tmp_path):
    """The published command line as a TOML imports to the row's memledger spelling."""
    row = next(r for r in ROWS if r["id"].startswith("H200 8b fsdp32"))
    (tmp_path / "run.toml").write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\nconverters = ["float8"]\n'
        '[float8]\nenable_fsdp_float8_all_gather = true\n'
        'precompute_float8_dynamic_scale_for_fsdp = true\nforce_recompute_fp8_weight_in_bwd = true\n'
        '[training]\nlocal_batch_size = 2\nseq_len = 8192\ncompile = true\n'
        '[parallelism]\ndata_parallel_shard_degree = -1\n'
        '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n')
    f = read_files([str(tmp_path / "run.toml")]).flags()
    ml = row["memledger"]
    for k in ("float8", "float8_fsdp_all_gather", "float8_precompute_scale",
              "float8_force_recompute_weight", "torch_compile", "seq", "micro_batch", "recompute"):
        assert f[k] == ml[k], k
    assert f["compile_loss"] == "auto"  # training.compile: the era decides


def test_unmodelled_converter_is_named(tmp_path):
    (tmp_path / "c.toml").write_text('[model]\nname = "llama3"\nflavor = "8B"\n'
                                     'converters = ["mx"]\n')
    imp = read_files([str(tmp_path / "c.toml")], "torchtitan")
    assert any(r.kind == "unmodelled" and r.key == "model.converters" and "mx" in r.why
               for r in imp.rows)


def test_float8_and_compiled_loss_survive_the_torchtitan_round_trip(tmp_path, capsys):
    """`config --to torchtitan` writes model.converters / [float8] / compile.components; read
    back (with the era, which a TOML does not carry) the ledger is the same."""
    import json

    from memledger.cli import main

    def run(argv):
        rc = main([str(a) for a in argv])
        out = capsys.readouterr()
        assert rc == 0, out.err
        return out.out
    era = ["--torchtitan-version", "2025-06", "--profile", "hf"]
    flags = ["--hf-id", "meta-llama/Llama-3.1-8B", "--dp", 32, "--zero", 3, "--seq", 2048,
             "--tp", 1, "--pp", 1, "--cp", 1, "--layout", "even", "--no-sp",
             "--micro-batch", 2, "--precision", "fsdp2-mixed", "--recompute", "op", "--loop",
             "torchtitan", "--tp-engine", "dtensor", "--zero3-impl", "fsdp", "--torch-compile",
             "--float8", "tensorwise", "--float8-fsdp-all-gather", "--float8-precompute-scale",
             "--float8-force-recompute-weight", "--optimizer-impl", "fused", *era]
    text = run(["config", "--to", "torchtitan", *flags])
    assert 'converters = ["float8"]' in text and "enable_fsdp_float8_all_gather = true" in text
    (tmp_path / "out.toml").write_text(text)
    back = json.loads(run(["ledger", "--config", tmp_path / "out.toml", *era, "--json"]))
    direct = json.loads(run(["ledger", *flags, "--json"]))
    assert back["ranks"] == direct["ranks"]


def _toml(flat: dict) -> str:
    sections: dict = {}
    for k, v in flat.items():
        if "." not in k or k.startswith("job."):
            continue  # the launch's node count, the base TOML's path
        sec, key = k.rsplit(".", 1)
        sections.setdefault(sec, {})[key] = v
    val = lambda v: ("true" if v else "false") if isinstance(v, bool) else (
        f'"{v}"' if isinstance(v, str) else str(v))
    return "".join(f"[{s}]\n" + "".join(f"{k} = {val(v)}\n" for k, v in kv.items())
                   for s, kv in sections.items())


@pytest.mark.parametrize("row", [r for r in ROWS if r["memledger"]["pp"] == 1], ids=lambda r: r["id"])
def test_torchtitan_spelling_imports_to_the_memledger_spelling(tmp_path, row):
    """Each row's options as torchtitan spelled them (2024-12: training.*_degree,
    experimental.*, float8.enable_float8_linear) import to the row's memledger spelling."""
    tt, ml = row["torchtitan"], row["memledger"]
    (tmp_path / "run.toml").write_text(_toml(tt))
    imp = read_files([str(tmp_path / "run.toml")], "torchtitan")
    f = imp.flags()
    for k in ("tp", "cp", "seq", "micro_batch", "recompute", "torch_compile", "float8"):
        assert f[k] == ml.get(k, "off"), k
    shard = tt.get("parallelism.data_parallel_shard_degree",
                   tt.get("training.data_parallel_shard_degree", -1))
    if shard != -1:
        assert f["dp"] == ml["dp"]
    unmodelled = {r.key for r in imp.rows if r.kind == "unmodelled"}
    assert ("experimental.enable_async_tensor_parallel" in unmodelled) == bool(ml.get("async_tp"))


def test_2024_12_fsdp_units_are_the_blocks_and_the_root():
    """torchtitan 2024-12 (parallelize_llama.py apply_fsdp): fully_shard per block, then the
    whole model — tok_embeddings, norm and output are one root unit, which torch's 2024
    _lazy_init keeps unsharded after forward; the last block is not resharded after forward
    without PP. 8B FSDP8: the root unit is embedding + head (2 × 128256 × 4096 bf16), the
    last block one layer unit (218,112,000 params bf16); 0.3 keeps only [norm, head]."""
    def comm(era, pp=1):
        from memledger.model.presets import model
        from memledger.specs import ParallelSpec, TrainSpec
        p = ParallelSpec(dp=8, zero=3, pp=pp)
        t = TrainSpec(seq=4096, micro_batch=1, micro_batches=pp, precision="fsdp2-mixed",
                      recompute="full", profile="hf", vocab_pad=1)
        rt = RuntimeSpec(loop="torchtitan", zero3_impl="fsdp", loss="materialized",
                         torchtitan_version=era)
        led = build_ledger(model("llama3-8b"), p, t, rt)
        return {i.name: i.bytes for i in led.ranks[0].items if i.row == "communication"}
    root = "zero-3 root unit unsharded (embedding, final norm, head)"
    last = "FSDP2 last block kept unsharded (2024-12)"
    old, new = comm("2024-12"), comm("0.3")
    assert old[root] == 2 * 128256 * 4096 * 2 + 4096 * 2 and new[root] == 128256 * 4096 * 2 + 4096 * 2
    assert old[last] == 218_112_000 * 2 and last not in new
    assert last not in comm("2024-12", pp=2)  # PP: no block reshards after forward anyway
