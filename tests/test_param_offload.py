"""ZeRO-3 parameter offload (`param_offload`): FSDP's CPU offload moves the rank's parameter,
gradient and optimizer shards to the host and keeps on the GPU only the copies a gather or a
reduce-scatter makes; DeepSpeed's offload_param alone moves the parameter partition. What moves
is exactly what the GPU rows held; each framework's key reads in and writes out."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memledger import ParallelSpec, TrainSpec, build_ledger, model
from memledger.cli import main
from memledger.errors import SpecError
from memledger.ledger.communication import param_offload_items
from memledger.specs.runtime import RuntimeSpec
from memledger.units import ceil_div

LLAMA = model("llama3-8b")
TITAN = dict(loop="torchtitan", zero3_impl="fsdp")
OP = TrainSpec(seq=8192, recompute="op", precision="fsdp2-mixed")


def rank0(p, t, **rt):
    return build_ledger(LLAMA, p, t, RuntimeSpec(**rt)).ranks[0]


def test_fsdp_cpu_offload_moves_the_three_shards_and_keeps_only_the_copies():
    p = ParallelSpec(dp=8, zero=3)
    on_gpu = rank0(p, OP, **TITAN)
    off = rank0(p, OP, **TITAN, optimizer_offload=True, param_offload=True)
    buffers = sum(i.bytes for i in on_gpu.items if i.row == "weights" and "rope" in i.name.lower())
    assert buffers > 0 and off.rows["weights"] == buffers  # torchtitan keeps buffers on the GPU
    assert off.rows["gradients"] == off.rows["optimizer"] == 0
    host = off.host
    assert host.weight_bytes == on_gpu.rows["weights"] - buffers == 4_015_130_624  # fp32 / 8
    assert host.gradient_bytes == on_gpu.rows["gradients"]
    assert host.optimizer_bytes == on_gpu.rows["optimizer"]
    # each gathered unit's fp32 shard and its bf16 cast, one unit's fp32 gradient shard
    layer = 218_112_000  # a Llama-3 8B block: 4096·(4096 + 2·1024 + 4096) + 3·4096·14336 + 2·4096
    shard = ceil_div(layer, 8)
    copies = {i.name: i.bytes for i in off.items if i.name.startswith("param offload")}
    assert copies == {"param offload: gathered units' shards copied up": 2 * shard * (4 + 2),
                      "param offload: reduce-scatter output before its copy down": 4 * shard}
    moved = host.weight_bytes + host.gradient_bytes + host.optimizer_bytes
    assert on_gpu.peak_allocated_bytes - off.peak_allocated_bytes < moved
    assert host.params_up_bytes_per_step == 2 * host.weight_bytes  # forward and backward gathers
    assert host.grads_down_bytes_per_step == host.gradient_bytes


def test_deepspeed_offload_param_alone_moves_only_the_parameter_partition():
    p, t = ParallelSpec(dp=8, zero=3), TrainSpec(seq=4096, recompute="full", precision="mixed16")
    on_gpu = rank0(p, t, zero3_impl="deepspeed")
    off = rank0(p, t, zero3_impl="deepspeed", param_offload=True)
    assert off.rows["weights"] == 0 and off.host.weight_bytes == on_gpu.rows["weights"]
    assert off.rows["gradients"] == on_gpu.rows["gradients"]
    assert off.rows["optimizer"] == on_gpu.rows["optimizer"]
    assert not [i for i in off.items if i.name.startswith("param offload")]  # its gather buffer
    both = rank0(p, t, zero3_impl="deepspeed", param_offload=True, optimizer_offload=True)
    assert both.rows["gradients"] == 0 and both.host.gradient_bytes == on_gpu.rows["gradients"]


@settings(max_examples=25, deadline=None)
@given(dp=st.sampled_from([2, 4, 8, 16, 64]), impl=st.sampled_from(["fsdp", "deepspeed"]),
       opt=st.booleans(), recompute=st.sampled_from(["none", "full"]))
def test_what_leaves_the_gpu_rows_is_what_the_host_holds(dp, impl, opt, recompute):
    if impl == "fsdp" and not opt:
        opt = True  # FSDP moves all three together (checked below)
    p = ParallelSpec(dp=dp, zero=3)
    t = TrainSpec(seq=2048, recompute=recompute,
                  precision="fsdp2-mixed" if impl == "fsdp" else "mixed16")
    base = rank0(p, t, zero3_impl=impl, optimizer_offload=opt)
    off = rank0(p, t, zero3_impl=impl, optimizer_offload=opt, param_offload=True)
    static = ("weights", "gradients", "optimizer")
    assert sum(base.rows[r] for r in static) + base.host.host_bytes == \
        sum(off.rows[r] for r in static) + off.host.host_bytes
    assert all(off.rows[r] <= base.rows[r] for r in static)
    copies = sum(i.bytes for i in off.items if i.name.startswith("param offload"))
    assert copies * dp <= 3 * base.rows["weights"] * 4  # shards: about 1/dp of the units


def test_bad_combinations_name_the_field_and_what_would_be_valid(capsys):
    with pytest.raises(SpecError, match="param_offload.*optimizer_offload=True"):
        RuntimeSpec(zero3_impl="fsdp", param_offload=True)
    with pytest.raises(SpecError, match="param_offload.*zero=3, got zero=1"):
        build_ledger(LLAMA, ParallelSpec(dp=8, zero=1), OP,
                     RuntimeSpec(zero3_impl="deepspeed", param_offload=True))
    rc = main(["ledger", "--model", "llama3-8b", "--tp", "1", "--pp", "1", "--dp", "8",
               "--zero", "2", "--zero3-impl", "deepspeed", "--param-offload"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--param-offload" in err[0] and "zero=2" in err[0]
    assert param_offload_items(0, ParallelSpec(dp=8, zero=3), OP,
                               RuntimeSpec(**TITAN, optimizer_offload=True,
                                           param_offload=True)) == []


def flags(path, capsys) -> list[str]:
    assert main(["config", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["flags"]


@pytest.mark.parametrize("name,text,both", [
    ("job.toml", '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nenable_cpu_offload = true\n'
                 '[parallelism]\ndata_parallel_shard_degree = 8\n', True),
    ("acc.yaml", "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 8\nfsdp_config:\n"
                 "  fsdp_version: 2\n  fsdp_offload_params: true\n", True),
    ("ds.json", json.dumps({"zero_optimization": {"stage": 3, "offload_param": {
        "device": "cpu", "pin_memory": True}}, "bf16": {"enabled": True}}), False),
])
def test_each_frameworks_key_reads_in(tmp_path, capsys, name, text, both):
    (tmp_path / name).write_text(text)
    got = flags(tmp_path / name, capsys)
    assert "--param-offload" in got and ("--optimizer-offload" in got) == both


ARGS = ["--model", "llama3-70b", "--tp", "8", "--pp", "1", "--dp", "8", "--zero", "3", "--sp",
        "--seq", "8192", "--recompute", "full", "--optimizer-offload", "--param-offload"]


@pytest.mark.parametrize("target,impl,precision,ext", [
    ("torchtitan", "fsdp", "fsdp2-mixed", "toml"), ("accelerate", "fsdp", "fsdp2-mixed", "yaml"),
    ("deepspeed", "deepspeed", "mixed16", "json")])
def test_written_out_it_reads_back(tmp_path, capsys, target, impl, precision, ext):
    tp = ["--tp", "1"] if target != "torchtitan" else []
    argv = ["config", "--to", target, *ARGS, *tp, "--zero3-impl", impl, "--precision", precision]
    assert main(argv) == 0
    path = tmp_path / f"out.{ext}"
    path.write_text(capsys.readouterr().out)
    got = flags(path, capsys)
    assert "--param-offload" in got and "--optimizer-offload" in got


def test_a_target_that_cannot_say_it_refuses(capsys):
    assert main(["config", "--to", "megatron", *ARGS, "--precision", "megatron",
                 "--zero3-impl", "deepspeed"]) == 2
    assert "parameter offload" in capsys.readouterr().err
    half = [a for a in ARGS if a != "--param-offload"]
    assert main(["config", "--to", "torchtitan", *half, "--zero3-impl", "fsdp",
                 "--precision", "fsdp2-mixed"]) == 2
    assert "enable_cpu_offload moves both" in capsys.readouterr().err


def test_the_advisor_offers_it_at_zero3_with_what_it_leaves(capsys):
    argv = ["advise", "--model", "llama3-70b", "--tp", "8", "--pp", "1", "--dp", "8", "--sp",
            "--seq", "8192", "--recompute", "full"]
    assert main([*argv, "--zero", "3"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines()
                if "parameter offload to CPU (FSDP CPU offload)" in ln)
    assert "static 0.00 GiB" in line  # weights, gradients and optimizer all on the host
    assert main([*argv, "--zero", "1"]) == 0
    assert "parameter offload" not in capsys.readouterr().out


# --- the dashboard: one "offload" setting, in the link, the sidebar, an uploaded file ---

def test_the_link_carries_it_and_a_bad_value_falls_back_with_the_valid_ones():
    from dataclasses import replace

    from memledger.views.state import DEFAULT, parse_params, runtime, to_params
    cfg = replace(DEFAULT, world=64, tp=8, pp=1, zero=3, offload="params")
    params = to_params(cfg)
    assert params["offload"] == "params" and "offload" not in to_params(DEFAULT)
    back, issues = parse_params(params)
    assert issues == [] and back == cfg
    rt = runtime(back)
    assert rt.param_offload and rt.optimizer_offload
    bad, issues = parse_params({"offload": "gpu"})
    assert bad.offload == "none" and "valid: none, optimizer, params" in str(issues[0])


def test_params_is_offered_at_zero3_only_and_a_repair_drops_it_below():
    from dataclasses import replace

    from memledger.views.options import repair, valid_values
    from memledger.views.state import DEFAULT, load_model
    m = load_model(DEFAULT.model)
    assert valid_values(m, replace(DEFAULT, zero=1), "offload") == ("none", "optimizer")
    assert "params" in valid_values(m, replace(DEFAULT, zero=3), "offload")
    fixed, notes = repair(m, replace(DEFAULT, zero=1, offload="params"), frozenset({"zero"}))
    assert fixed.offload == "none" and notes[0].key == "offload" and "zero=3" in notes[0].reason


def test_an_uploaded_file_sets_it_and_one_without_clears_it():
    from dataclasses import replace

    from memledger.views.config_io import copy_as, import_config
    from memledger.views.state import DEFAULT
    fsdp = ("distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 8\nfsdp_config:\n"
            "  fsdp_version: 2\n  fsdp_offload_params: {}\n")
    cfg, rows = import_config(DEFAULT, fsdp.format("true").encode(), "acc.yaml")
    assert cfg.offload == "params" and cfg.zero == 3
    assert not [r for r in rows if r["kind"] == "CLI only" and "offload" in r["key"]]
    assert "fsdp_offload_params: true" in copy_as(cfg, "accelerate")
    plain, _ = import_config(replace(cfg, offload="params"), fsdp.format("false").encode(),
                             "acc.yaml")
    assert plain.offload == "none"
    ds = json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
                     "bf16": {"enabled": True}}).encode()
    alone, rows = import_config(DEFAULT, ds, "ds.json")  # DeepSpeed's parameters alone
    assert alone.offload == "none"
    assert [r["key"] for r in rows if r["kind"] == "CLI only" and r["key"] == "param_offload"]


def test_the_ledger_page_shows_the_rows_leave(app_test):
    from conftest import chart_numbers, figures
    base = "model=llama3-70b&world=64&tp=8&pp=1&zero=3&layout=even"
    on_gpu = app_test("pages/ledger.py", base).run()
    off = app_test("pages/ledger.py", base + "&offload=params").run()
    for at in (on_gpu, off):
        assert not at.exception and not at.error, [e.value for e in at.error]
    assert chart_numbers(figures(on_gpu)[0]) != chart_numbers(figures(off)[0])
    assert off.query_params.get("offload") in ("params", ["params"])


def test_the_pages_fixes_offer_it_when_nothing_cheaper_fits():
    from dataclasses import replace

    from memledger.views.ledger.fixes import _candidates
    from memledger.views.state import DEFAULT, load_model
    m = load_model("llama3-70b")
    labels = [label for label, _ in _candidates(m, replace(DEFAULT, zero=3))]
    assert labels.index("optimizer offload to the CPU (ZeRO-Offload)") < \
        labels.index("parameters, gradients and optimizer to the CPU (FSDP CPU offload)") < \
        len(labels) - 1  # before more GPUs
    below = [c for _, c in _candidates(m, replace(DEFAULT, zero=1))]
    assert {"offload": "params"} not in below and {"offload": "optimizer"} in below


def test_the_page_says_what_sits_in_host_memory_only_when_something_does(app_test):
    base = "model=llama3-70b&world=64&tp=8&pp=1&zero=3&layout=even"
    plain = app_test("pages/ledger.py", base).run()
    off = app_test("pages/ledger.py", base + "&offload=params").run()
    assert "In host memory" not in [m.label for m in plain.metric]
    host = next(m for m in off.metric if m.label == "In host memory")
    assert host.value.endswith("GiB") and "GB/step over PCIe" in str(host.proto.delta)


def test_a_torchtitan_job_with_cpu_offload_and_its_fused_adamw_builds(tmp_path, capsys):
    """torchtitan's optimizer.implementation defaults to fused; under FSDP's CPU offload torch's
    fused AdamW runs on the CPU tensors (ZeRO-Offload alone still refuses a GPU kernel)."""
    job = tmp_path / "job.toml"
    job.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nseq_len = 8192\n'
                   'enable_cpu_offload = true\n[parallelism]\ndata_parallel_shard_degree = 8\n')
    assert main(["ledger", "--config", str(job)]) == 0
    assert "static rows in host memory: optimizer" in capsys.readouterr().out
    with pytest.raises(SpecError, match="optimizer_impl"):
        build_ledger(LLAMA, ParallelSpec(dp=8, zero=3), OP,
                     RuntimeSpec(**TITAN, optimizer_offload=True, optimizer_impl="fused"))
