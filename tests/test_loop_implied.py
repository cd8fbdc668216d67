"""`--loop torchtitan` alone is torchtitan as it runs: the flags a user leaves out take the
layout torchtitan builds from the degrees (specs.loop_implied), never the dashboard's Megatron
defaults; every flag the user gives, and every key a --config file sets, wins."""
import json

import pytest

from memledger.cli import main
from memledger.specs.loop_implied import implied
from memledger.validation import published_titan

ROWS = {r["id"]: r for r in published_titan.load()}


def _json(capsys, *argv):
    assert main(["ledger", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _flags(ml: dict) -> list[str]:
    """A published row as a user types it: the degrees, the batch and the row's era only."""
    model = ["--hf-id", ml["model"][3:]] if ml["model"].startswith("hf:") else ["--model", ml["model"]]
    out = ["--loop", "torchtitan", *model, "--tp", str(ml["tp"]),
           "--pp", str(ml["pp"]), "--vpp", str(ml["vpp"]), "--cp", str(ml["cp"]),
           "--dp", str(ml["dp"]), "--micro-batch", str(ml["micro_batch"]),
           "--micro-batches", str(ml["micro_batches"]), "--seq", str(ml["seq"]),
           "--recompute", ml["recompute"], "--torchtitan-version", ml["torchtitan_version"]]
    if ml["pp"] > 1:
        out += ["--schedule", ml["schedule"]]
    if ml.get("torch_compile"):
        out += ["--torch-compile"]
    return out


@pytest.mark.parametrize("rid", ["T1 8b fsdp8 sac fsdp", "T2 8b fsdp4 cp2 64k",
                                 "T5 405b pp8 1F1B", "Q2 qwen3-32b fsdp4 tp8 lb16"])
def test_a_published_run_typed_with_its_degrees_alone_equals_its_full_spelling(capsys, rid):
    row = ROWS[rid]
    ml = dict(row["memledger"])
    ml.pop("float8", None)  # typed without float8: compare with the same row spelled without it
    for k in [k for k in ml if k.startswith("float8")]:
        ml.pop(k)
    from memledger.ledger import build_ledger
    led = build_ledger(*published_titan.specs(ml))
    got = _json(capsys, *_flags(ml))
    cfg = got["config"]
    assert cfg["parallel"]["zero"] == 3 and cfg["train"]["precision"] == "fsdp2-mixed"
    assert cfg["runtime"]["tp_engine"] == "dtensor"
    assert max(r["peak_reserved_bytes"] for r in got["ranks"]) == \
        max(r.peak_reserved_bytes for r in led.ranks)


def test_flags_the_user_gives_win_over_the_loop(capsys):
    got = _json(capsys, "--loop", "torchtitan", "--model", "llama3-8b", "--tp", "1", "--pp", "1",
                "--world", "8", "--precision", "megatron", "--zero", "1")
    assert got["config"]["parallel"]["zero"] == 1
    assert got["config"]["train"]["precision"] == "megatron"


def test_without_fsdp_torchtitan_trains_fp32_under_tp_and_autocast_alone():
    assert implied("torchtitan", dp=1, cp=1, tp=8, pp=1)["precision"][0] == "fp32"
    assert implied("torchtitan", dp=1, cp=1, tp=8, pp=1)["zero"][0] == 0
    assert implied("torchtitan", dp=1, cp=1, tp=1, pp=1)["precision"][0] == "amp"
    # context parallelism alone shards with FSDP2 over the cp ranks (fsdp_enabled)
    assert implied("torchtitan", dp=1, cp=8, tp=1, pp=1)["zero"][0] == 3
    assert implied("megatron", dp=8, cp=1, tp=1, pp=1) == {}


def test_every_implied_setting_names_the_torchtitan_file_it_comes_from():
    for value, source in implied("torchtitan", dp=4, cp=2, tp=2, pp=2).values():
        assert source.startswith("torchtitan") and ".py" in source, (value, source)


def test_megatrons_selective_under_torchtitan_is_named_not_silently_run():
    """torchtitan has no core-attention recompute: its 'selective' is op-level SAC or a layer
    interval, so memledger's Megatron-style selective under loop torchtitan warns, naming both."""
    from memledger import ParallelSpec, TrainSpec, build_ledger, model
    from memledger.specs.runtime import RuntimeSpec
    led = build_ledger(model("llama3-8b"), ParallelSpec(dp=8, zero=3),
                       TrainSpec(precision="fsdp2-mixed", profile="hf", recompute="selective"),
                       RuntimeSpec(loop="torchtitan", tp_engine="dtensor"))
    assert any("recompute selective under loop torchtitan" in w and "--recompute op" in w
               for w in led.warnings)
    quiet = build_ledger(model("llama3-8b"), ParallelSpec(dp=8, zero=3),
                         TrainSpec(precision="fsdp2-mixed", profile="hf", recompute="op"),
                         RuntimeSpec(loop="torchtitan", tp_engine="dtensor"))
    assert quiet.warnings == ()


def test_torchtitans_own_bf16_training_dtype_is_not_warned_about():
    """training.dtype = bfloat16 is a torchtitan setting (the importer's precision bf16): the
    ledger runs it without a layout warning; Megatron's recipe under the loop still warns."""
    from memledger import ParallelSpec, TrainSpec, build_ledger, model
    from memledger.specs.runtime import RuntimeSpec
    rt = RuntimeSpec(loop="torchtitan", tp_engine="dtensor")
    for precision, warned in (("bf16", False), ("megatron", True)):
        led = build_ledger(model("llama3-8b"), ParallelSpec(dp=8, zero=3),
                           TrainSpec(precision=precision, profile="hf", recompute="op"), rt)
        assert any(w.startswith("precision ") for w in led.warnings) is warned, led.warnings


def test_a_published_run_typed_with_the_world_alone_is_fsdp_over_all_of_it(capsys):
    """torchtitan's degrees default to 1 (tensor, pipeline) and FSDP takes the rest, with no
    gradient accumulation: T1 typed as its TOML sets it (8 GPUs, batch 2, seq 8192, op SAC)
    is its full spelling, not the dashboard's tp 8 · pp 4."""
    row = ROWS["T1 8b fsdp8 sac fsdp"]
    from memledger.ledger import build_ledger
    led = build_ledger(*published_titan.specs(row["memledger"]))
    got = _json(capsys, "--loop", "torchtitan", "--model", "llama3-8b", "--world", "8",
                "--seq", "8192", "--micro-batch", "2", "--recompute", "op",
                "--torchtitan-version", "2024-12")
    par = got["config"]["parallel"]
    assert (par["tp"], par["pp"], par["dp"], got["config"]["train"]["micro_batches"]) == (1, 1, 8, 1)
    assert max(r["peak_reserved_bytes"] for r in got["ranks"]) == \
        max(r.peak_reserved_bytes for r in led.ranks)


@pytest.mark.parametrize("loop", ["hf-trainer", "deepspeed", "pytorch", "torchtitan"])
def test_a_named_loop_starts_from_data_parallel_and_one_micro_batch(capsys, loop):
    got = _json(capsys, "--loop", loop, "--model", "llama3-8b", "--world", "16")
    par = got["config"]["parallel"]
    assert (par["tp"], par["pp"], par["dp"]) == (1, 1, 16)
    assert got["config"]["train"]["micro_batches"] == 1


def test_under_pp_the_micro_batches_stay_the_local_batch_and_megatron_keeps_its_layout(capsys):
    got = _json(capsys, "--loop", "torchtitan", "--model", "llama3-8b", "--world", "16",
                "--pp", "4")
    assert got["config"]["train"]["micro_batches"] == 8  # local_batch_size 8 / microbatch 1
    assert got["config"]["parallel"]["tp"] == 1
    for loop in ("megatron", "auto"):
        got = _json(capsys, "--loop", loop, "--model", "llama3-8b", "--world", "64")
        assert (got["config"]["parallel"]["tp"], got["config"]["parallel"]["pp"]) == (8, 4)


@pytest.mark.parametrize("era,want", [("0.3", ("op", 0)), ("0.2", ("interval", 2)),
                                      ("2024-12", ("interval", 2))])
def test_without_an_ac_flag_torchtitan_checkpoints_as_its_config_does(capsys, era, want):
    """0.3's Trainer.Config defaults to SelectiveAC (op); the TOML eras to mode 'selective'
    with option '2'. A --recompute the user gives wins."""
    got = _json(capsys, "--loop", "torchtitan", "--model", "llama3-8b", "--world", "8",
                "--torchtitan-version", era)
    assert (got["config"]["train"]["recompute"], got["config"]["train"]["recompute_every"]) == want
    got = _json(capsys, "--loop", "torchtitan", "--model", "llama3-8b", "--world", "8",
                "--torchtitan-version", era, "--recompute", "none")
    assert got["config"]["train"]["recompute"] == "none"
