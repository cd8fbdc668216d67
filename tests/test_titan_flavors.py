"""torchtitan's model flavors, as a job config names them (`[model] name` + `flavor`), are the
models torchtitan builds: every flavor of torchtitan 0.3's llama3, qwen3 and deepseek_v3 registries
is in memledger's table, and memledger counts the parameters torchtitan's own code builds on the
meta device (torchtitan: the validation extra)."""
from __future__ import annotations

import inspect
import json

import pytest

from memledger.cli import main
from memledger.model.params import n_params
from memledger.model.titan_flavors import FLAVORS, flavor_model
from memledger.specs.loop import built_model, resolve_loop
from memledger.specs.runtime import RuntimeSpec

# the debug model with q, k, v apart: torchtitan's test of the unfused path (module docstring)
NOT_IN_TABLE = {("qwen3", "debugmodel_non_fused_qkv")}


def _memledger_model(family: str, flavor: str):
    from memledger.model.hub import hub_model
    from memledger.model.presets import model
    kind, value = flavor_model(family, flavor)
    m = value if kind == "spec" else model(value) if kind == "preset" else hub_model(value, offline=True)
    return built_model(m, resolve_loop(RuntimeSpec(loop="torchtitan"), "hf"))  # no MTP module


def _registries():
    pytest.importorskip("torchtitan.models.llama3")
    from torchtitan.models.deepseek_v3 import deepseekv3_configs
    from torchtitan.models.llama3 import llama3_configs
    from torchtitan.models.qwen3 import qwen3_configs
    return {"llama3": llama3_configs, "qwen3": qwen3_configs, "deepseek_v3": deepseekv3_configs}


def test_every_torchtitan_flavor_is_in_the_table():
    registered = {(fam, fl.lower()) for fam, table in _registries().items() for fl in table}
    assert registered - NOT_IN_TABLE == set(FLAVORS)


@pytest.mark.parametrize("family,flavor", sorted(FLAVORS))
def test_memledger_counts_the_parameters_torchtitan_builds(family, flavor):
    import torch
    table = _registries()[family]
    fn = next(f for name, f in table.items() if name.lower() == flavor)
    kw = {"attn_backend": "flex"}
    if "moe_comm_backend" in inspect.signature(fn).parameters:
        kw["moe_comm_backend"] = "standard"
    with torch.device("meta"):
        built = fn(**kw).build()
    want = sum(p.numel() for p in built.parameters())
    assert n_params(_memledger_model(family, flavor)) == want


def test_a_job_config_with_a_flavor_without_a_preset_runs_that_shape(tmp_path, capsys):
    p = tmp_path / "job.toml"
    p.write_text('[model]\nname = "deepseek_v3"\nflavor = "16B"\n[training]\nseq_len = 4096\n'
                 'local_batch_size = 1\n[parallelism]\ndata_parallel_shard_degree = -1\n')
    assert main(["ledger", "--config", str(p), "--world", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_params"] == 15_706_484_224  # torchtitan's count (the test above)
    assert main(["config", str(p), "--world", "8", "--json"]) == 0
    flags = json.loads(capsys.readouterr().out)["flags"]  # --model-spec: the flavor's shape
    assert main(["config", *flags, "--to", "torchtitan"]) == 0  # written back as the flavor
    back = capsys.readouterr().out
    assert 'name = "deepseek_v3"' in back and 'flavor = "16B"' in back


def test_an_unknown_flavor_names_the_known_ones(tmp_path, capsys):
    p = tmp_path / "job.toml"
    p.write_text('[model]\nname = "qwen3"\nflavor = "7B"\n[training]\nseq_len = 4096\n')
    assert main(["ledger", "--config", str(p), "--world", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "job.toml:2" in err and "qwen3 14b" in err
