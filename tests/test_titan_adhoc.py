"""`validate --engine torchtitan --engine-config model=FAMILY:FLAVOR,world=N,...`: a user's own
torchtitan layout measured with torchtitan's code under fake tensors and re-predicted (issue 27).
"""
from __future__ import annotations

import importlib
import json
from dataclasses import replace

import pytest

from memledger.cli import main
from memledger.engine.titan_adhoc import CONFIG_FN, FLAVOR_KEY, case_from_text
from memledger.engine.titan_cases import ledger_config
from memledger.engine.titan_compare import case_from_dict, case_to_dict, predict
from memledger.errors import SpecError
from memledger.model.titan_flavors import FLAVORS


def test_every_flavor_memledger_knows_runs_under_a_config_torchtitan_registers():
    pytest.importorskip("torchtitan.models.llama3")
    assert set(CONFIG_FN) == set(FLAVORS)
    for (family, flavor), fn in CONFIG_FN.items():
        reg = importlib.import_module(f"torchtitan.models.{family}.config_registry")
        assert callable(getattr(reg, fn, None)), (family, fn)
        configs = {"llama3": "llama3_configs", "qwen3": "qwen3_configs",
                   "deepseek_v3": "deepseekv3_configs"}[family]
        keys = getattr(importlib.import_module(f"torchtitan.models.{family}"), configs)
        assert FLAVOR_KEY.get(flavor, flavor.upper()) in keys, (family, flavor)


def test_a_line_spells_the_case_and_the_ledger_reads_it_as_torchtitan_runs():
    case = case_from_text("model=Qwen3:30b-a3b, world=64, ep=8, ac=full, seq=4096, lb=2")
    assert (case.family, case.config_fn, case.flavor) == ("qwen3", "qwen3_30b_a3b", "30B-A3B")
    assert (case.world, case.ep, case.ac, case.seq, case.local_batch) == (64, 8, "full", 4096, 2)
    cfg = ledger_config(case)
    assert cfg["parallel"]["dp"] == 64 and cfg["train"]["recompute"] == "full"
    assert cfg["runtime"]["loop"] == "torchtitan"
    # the stored form round-trips (rescore re-predicts a stored ad-hoc case)
    again = case_from_dict(json.loads(json.dumps(case_to_dict(case))))
    assert again == case
    assert predict(again).ranks[0].peak_allocated_bytes == \
        predict(case).ranks[0].peak_allocated_bytes
    pp = case_from_text("model=llama3:405B,world=512,tp=8,pp=8,schedule=interleaved,lb=32,"
                        "mbs=4,pp_rank=6")
    assert (pp.config_fn, pp.schedule, pp.micro_batches, pp.preset) == \
        ("llama3_70b", "Interleaved1F1B", 8, "llama3.1-405b")


def test_reshard_is_torchtitans_fsdp_reshard_after_forward():
    case = case_from_text("model=llama3:8B,world=8,reshard=never")
    assert case.reshard == "never"
    assert ledger_config(case)["runtime"]["fsdp_reshard_after_forward"] == "never"


def test_a_number_for_ac_is_torchtitan_02s_layer_interval():
    """0.2's selective_ac_option "<k>": every k-th block fully checkpointed; memledger's
    recompute=interval with the same k."""
    case = case_from_text("model=llama3:8B,world=8,ac=3,seq=4096")
    assert (case.ac, case.ac_every) == ("interval", 3)
    train = ledger_config(case)["train"]
    assert (train["recompute"], train["recompute_every"]) == ("interval", 3)
    assert case_from_dict(json.loads(json.dumps(case_to_dict(case)))) == case
    with pytest.raises(SpecError) as e:
        replace(case, ac="full")  # an interval with another mode
    assert e.value.field == "ac_every"


@pytest.mark.parametrize("text, field", [
    ("world=8", "engine-config"),  # no model
    ("model=llama3:8B", "engine-config"),  # no world
    ("model=llama3:9B,world=8", "model"),
    ("model=llama3,world=8", "model"),
    ("model=llama3:8B,world=0", "world"),
    ("model=llama3:8B,world=8,seq=2M", "seq"),
    ("model=llama3:8B,world=8,lb=4096", "lb"),
    ("model=llama3:8B,world=8,ac=selective-2", "ac"),
    ("model=llama3:8B,world=8,schedule=zb", "schedule"),
    ("model=llama3:8B,world=8,ac=0", "ac"),  # an interval needs k >= 1
    ("model=llama3:8B,world=8,ac=257", "ac"),
    ("model=llama3:8B,world=8,reshard=sometimes", "reshard"),
    ("model=llama3:8B,world=8,dp=8", "engine-config"),  # not a key here
    ("model=llama3:8B,world=8,world=16", "world"),  # given twice
    ("model=llama3:8B,world=12,tp=8", "world"),  # TitanCase's own check
])
def test_a_bad_line_names_its_key(text, field):
    with pytest.raises(SpecError) as e:
        case_from_text(text)
    assert e.value.field == field, str(e.value)


def test_the_command_refuses_what_an_ad_hoc_case_cannot_be_in_one_line(capsys):
    for argv in (["--cases", "llama3-8b fsdp8 op-ac"], ["--backend", "gloo"],
                 ["--hf-config", "x.json"]):
        code = main(["validate", "--engine", "torchtitan", "--engine-config",
                     "model=llama3:8B,world=8", *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, (argv, err)


@pytest.mark.torch
def test_an_ad_hoc_case_runs_torchtitan_and_is_re_predicted(tmp_path, capsys):
    """The debug flavor at world 2 (about 5 s): measured, stored with --out, re-predicted."""
    pytest.importorskip("torchtitan.models.llama3")
    text = "model=llama3:debugmodel,world=2,seq=256,lb=2"
    code = main(["validate", "--engine", "torchtitan", "--engine-config", text,
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and len(out) == 5 and all(line.startswith("ok") for line in out), out
    stored = json.loads((tmp_path / "engine-torchtitan.json").read_text())
    (entry,) = stored["measurements"]
    assert entry["case"] == "custom " + text.replace(",", " ") and entry["spec"]["config_fn"] == "llama3_debugmodel"
    assert main(["validate", "--rescore", str(tmp_path / "engine-torchtitan.json")]) == 0


@pytest.mark.torch
def test_the_interval_wraps_every_kth_block_the_process_wraps_as_02_counted():
    """0.2's `_layer_sac_count`: one 1-based counter over every block wrapped, running on
    across a pipeline rank's model parts."""
    pytest.importorskip("torchtitan.distributed.activation_checkpoint")
    import torch
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    from memledger.engine.titan_ac import interval_ac

    def part(n):
        m = torch.nn.Module()
        m.layers = torch.nn.ModuleDict({str(i): torch.nn.Linear(2, 2) for i in range(n)})
        return m

    policy = interval_ac(2).build()
    first, second = part(5), part(4)
    policy.apply(first)
    policy.apply(second)
    wrapped = lambda m: [isinstance(b, CheckpointWrapper) for b in m.layers.values()]  # noqa
    assert wrapped(first) == [False, True, False, True, False]  # counts 1..5
    assert wrapped(second) == [True, False, True, False]  # counts 6..9
