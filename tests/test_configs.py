"""Framework configuration files in (`--config`) and out (`config --to`): every fixture's ledger
equals the ledger of the explicit flags `memledger config` prints; bad files exit 2 with one
line naming file, line and key; export → import round-trips to the same ledger (hypothesis)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memledger.cli import main

FIX = Path(__file__).parent / "fixtures" / "configs"


def run(argv, capsys):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def ledger(argv, capsys):
    rc, out, err = run(["ledger", *argv, "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    return {"n_params": d["n_params"], "ranks": d["ranks"]}


def equivalent(files, capsys):
    args = ["config", *files, "--json"]
    rc, out, err = run(args, capsys)
    assert rc == 0, err
    return json.loads(out)


CASES = [  # (files, flags the files cannot say)
    (["llama3_70b_megatron.sh"], []),
    (["deepseek_v3_megatron.sh"], ["--gpu", "h200"]),
    (["llama3_405b_torchtitan.toml"], ["--world", "512"]),
    (["ds_zero3_offload.json", "training_args.json"],
     ["--hf-id", "meta-llama/Llama-3.1-8B", "--seq", "4096", "--world", "16"]),
    (["accelerate_fsdp2.yaml"], ["--hf-id", "Qwen/Qwen3-8B", "--seq", "4096", "--micro-batch", "2"]),
    (["llamafactory_full_sft.yaml"], ["--world", "8"]),
    (["llamafactory_lora_sft.yaml"], ["--world", "4"]),
    (["llamafactory_freeze_sft.yaml"], ["--world", "2"]),
    (["torchtitan03_llama3_8b_dump.json"], ["--world", "16"]),
    (["megatron_functional_model_config.yaml"], ["--world", "8"]),
    (["megatron_yaml_cfg.yaml"], ["--world", "16"]),
    (["megatron_bridge_override.yaml"], ["--model", "llama3-8b", "--world", "64"]),
]


@pytest.mark.parametrize("files,extra", CASES, ids=[c[0][0] for c in CASES])
def test_fixture_ledger_equals_its_explicit_flags(files, extra, capsys):
    paths = [FIX / f for f in files]
    info = equivalent([paths[0]] + [x for p in paths[1:] for x in ("--config", p)] + extra,
                      capsys)  # the model fills DeepSpeed's "auto" buckets
    assert info["flags"], "the files set nothing"
    via_file = ledger([x for p in paths for x in ("--config", p)] + extra, capsys)
    via_flags = ledger(info["flags"] + extra, capsys)
    assert via_file == via_flags


def test_megatron_script_reads_the_documented_keys(capsys):
    info = equivalent([FIX / "llama3_70b_megatron.sh"], capsys)
    pairs = _pairs(info["flags"])
    assert pairs["--tp"] == "8" and pairs["--pp"] == "4" and pairs["--world"] == "64"
    assert pairs["--micro-batches"] == "64"  # 128 / (1 · dp 2)
    assert pairs["--zero"] == "1" and pairs["--precision"] == "megatron"
    kinds = {r["key"]: r for r in info["rows"]}
    assert kinds["data_path"]["kind"] == "unresolved" and kinds["data_path"]["value"] == "$DATA_PATH"
    assert kinds["tensor_model_parallel_size"]["line"] == 43  # the flag's line, not TP=8's
    assert kinds["lr"]["kind"] == "ignored"
    assert kinds["context_parallel_size"]["kind"] == "default"
    assert "model_parallel_config.py" in kinds["context_parallel_size"]["source"]


def test_deepseek_v3_flags_describe_the_published_model(capsys):
    from memledger.configs import read_files
    m = read_files([FIX / "deepseek_v3_megatron.sh"]).model
    assert (m.n_layers, m.hidden, m.n_heads, m.vocab, m.n_mtp_layers) == (61, 7168, 128, 129280, 1)
    assert m.moe.first_k_dense == 3 and m.moe.n_experts == 256 and m.moe.top_k == 8
    assert m.mla.q_lora_rank == 1536 and m.mla.kv_lora_rank == 512
    from memledger.presets import model
    ref = model("deepseek-v3")
    assert m.mla == ref.mla  # the published config.json's MLA ranks
    for f in ("n_experts", "top_k", "expert_ffn", "n_shared", "first_k_dense", "dense_layers",
              "router_bias"):  # router_fp32: the launch says --moe-router-dtype fp32, the preset not
        assert getattr(m.moe, f) == getattr(ref.moe, f), f
    assert (m.ffn_hidden, m.tied_embeddings) == (ref.ffn_hidden, ref.tied_embeddings)


def test_torchtitan_minus_one_is_the_leftover_ranks(capsys):
    info = equivalent([FIX / "llama3_405b_torchtitan.toml", "--world", "512"], capsys)
    rows = {r["key"]: r for r in info["rows"]}
    assert rows["parallelism.data_parallel_shard_degree"]["value"] == -1
    # [float8] options without "float8" in model.converters: named as having no effect
    assert any(r["kind"] == "ignored" and r["key"] == "float8.enable_fsdp_float8_all_gather"
               and "model.converters" in r["why"] for r in info["rows"])
    led = ledger(["--config", FIX / "llama3_405b_torchtitan.toml", "--world", "512"], capsys)
    led64 = ledger(["--config", FIX / "llama3_405b_torchtitan.toml", "--world", "64"], capsys)
    assert led["ranks"][0]["rows"]["weights"] < led64["ranks"][0]["rows"]["weights"]  # dp 64 vs 8


def _pairs(flags: list[str]) -> dict[str, str]:
    return {f: (flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else "")
            for i, f in enumerate(flags) if f.startswith("--")}


@pytest.mark.parametrize("name,extra,want", [
    ("megatron_functional_model_config.yaml", ["--world", "8"],  # MODEL_ARGS: 32 / (4 · dp 2)
     {"--tp": "2", "--pp": "2", "--micro-batch": "4", "--micro-batches": "4", "--seq": "1024",
      "--zero": "1", "--recompute": "full", "--precision": "megatron"}),
    ("megatron_yaml_cfg.yaml", ["--world", "16"],  # nested sections: 64 / (2 · dp 8)
     {"--tp": "2", "--sp": "", "--micro-batches": "4", "--seq": "4096", "--zero": "1"}),
    ("megatron_bridge_override.yaml", ["--model", "llama3-8b"],  # 256 / (1 · dp 8)
     {"--tp": "4", "--pp": "2", "--micro-batches": "32", "--seq": "8192",
      "--recompute": "selective", "--precision": "megatron"}),
    ("torchtitan03_llama3_8b_dump.json", ["--world", "16"],  # 0.3 SelectiveAC = op; 32/(2·8)
     {"--hf-id": "meta-llama/Llama-3.1-8B", "--tp": "2", "--zero": "3", "--micro-batch": "2",
      "--micro-batches": "2", "--recompute": "op", "--precision": "fsdp2-mixed",
      "--loop": "torchtitan", "--tp-engine": "dtensor"}),
    ("accelerate_fsdp2.yaml", [], {"--world": "16", "--zero": "3", "--zero3-impl": "fsdp",
                                   "--precision": "fsdp2-mixed", "--recompute": "full",
                                   "--fsdp-reshard-after-forward": "default"}),
    ("accelerate_fsdp1_shard_grad_op.yaml", [], {"--zero": "2", "--zero3-impl": "fsdp",
                                                 "--world": "8"}),
    ("accelerate_deepspeed.yaml", [], {"--zero": "2", "--zero3-impl": "deepspeed",
                                       "--micro-batches": "4", "--optimizer-offload": "",
                                       "--precision": "mixed16", "--loop": "deepspeed"}),
    ("llamafactory_lora_sft.yaml", [], {"--finetune": "lora", "--lora-rank": "16",
                                        "--lora-alpha": "32", "--lora-targets": "all-linear",
                                        "--seq": "2048", "--micro-batches": "8"}),
    ("llamafactory_freeze_sft.yaml", [], {"--finetune": "freeze", "--seq": "1024",
                                          "--freeze": "embeddings,head,layers:0-27"}),
    ("llamafactory_full_sft.yaml", [], {"--zero": "3", "--zero3-impl": "deepspeed",
                                        "--precision": "mixed16", "--loop": "deepspeed",
                                        "--reduce-bucket": str(float(4096 ** 2))}),
])
def test_each_form_maps_its_documented_keys(name, extra, want, capsys):
    got = _pairs(equivalent([FIX / name, *extra], capsys)["flags"])
    assert {k: got.get(k) for k in want} == want


def test_explicit_flags_override_the_file(capsys):
    f = FIX / "llama3_70b_megatron.sh"
    a = ledger(["--config", f, "--tp", "4", "--pp", "8"], capsys)
    b = ledger(["--config", f], capsys)
    assert len(a["ranks"]) == 8 and len(b["ranks"]) == 4


def _bad(tmp_path, name, text):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


@pytest.mark.parametrize("name,text,needle", [
    ("a.yaml", "distributed_type: FSDP\nfsdp_config: [unclosed\n", "unparseable YAML"),
    ("a.toml", "[parallelism]\ntensor_parallel_degree = = 2\n", "unparseable TOML"),
    ("a.json", '{"zero_optimization": {"stage": 3,}}', "unparseable JSON"),
    ("a.yaml", "distributed_type: !!python/object/apply:os.system ['true']\n", "refused YAML tag"),
    ("a.yaml", "hello: world\n", "unknown configuration format"),
    ("a.json", '{"zero_optimization": {"stage": 7}}', "zero_optimization.stage"),
    ("a.toml", "[parallelism]\ntensor_parallel_degree = 3\n[model]\nname='llama3'\nflavor='8B'\n",
     "not divisible by tp·pp·cp"),
    ("a.sh", "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --tensor-model-parallel-size 2"
             " --micro-batch-size 3 --global-batch-size 16 --seq-length 128 --num-layers 2 "
             "--hidden-size 64 --num-attention-heads 4 --vocab-size 100\n", "global batch 16"),
])
def test_bad_files_exit_2_with_one_line_naming_the_file(tmp_path, capsys, name, text, needle):
    p = _bad(tmp_path, name, text)
    rc, out, err = run(["ledger", "--config", p, "--model", "llama3-8b"], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and needle in err and str(p) in err


def test_yaml_python_tag_is_never_constructed(tmp_path, capsys):
    marker = tmp_path / "ran"
    p = _bad(tmp_path, "x.yaml", f"a: !!python/object/apply:os.system ['touch {marker}']\n")
    assert run(["config", p], capsys)[0] == 2
    assert not marker.exists()


def test_file_over_1_mb_is_refused_before_parsing(tmp_path, capsys):
    p = _bad(tmp_path, "big.json", b'{"a": "' + b"x" * 1_000_001 + b'"}')
    rc, _, err = run(["config", p], capsys)
    assert rc == 2 and "1,000,000 bytes" in err


def test_forced_unknown_format_is_refused(capsys):
    rc, _, err = run(["config", FIX / "accelerate_fsdp2.yaml", "--config-format", "nemo"], capsys)
    assert rc == 2 and "invalid choice" in err


# -- round trip: flags -> framework file -> flags, the same ledger -----------------------------
# Each strategy draws only what its format can express (DeepSpeed's JSON has no model, pipeline
# or sequence length: those stay explicit flags on both sides; torchtitan has no ZeRO-1/2 and
# only its own named flavors; accelerate has no pipeline; Megatron has no torchtitan AC modes).
COMMON = dict(deadline=None, max_examples=int(os.environ.get("ML_ROUNDTRIP_EXAMPLES", 6)),
              suppress_health_check=[HealthCheck.function_scoped_fixture])
SUFFIX = {"megatron": "sh", "torchtitan": "toml", "deepspeed": "json", "accelerate": "yaml"}


def _roundtrip(tmp_path, capsys, target, flags, keep=()):
    rc, text, err = run(["config", "--to", target, *flags], capsys)
    assert rc == 0, err
    p = tmp_path / f"out.{SUFFIX[target]}"
    p.write_text(text)
    assert ledger(["--config", p, *keep], capsys) == ledger(flags, capsys), text


MEGATRON_MODELS = {"llama3.2-1b": ("--model", "llama3.2-1b"),
                   "qwen3-moe": ("--hf-id", "Qwen/Qwen3-30B-A3B")}


@settings(**COMMON)
@given(model=st.sampled_from(sorted(MEGATRON_MODELS)), tp=st.sampled_from([1, 2]),
       pp=st.sampled_from([1, 2]), vpp=st.sampled_from([1, 2]), cp=st.sampled_from([1, 2]),
       ep=st.sampled_from([1, 2]), dp=st.sampled_from([1, 2]), zero=st.sampled_from([0, 1, 2, 3]),
       mb=st.sampled_from([1, 2]), m=st.sampled_from([1, 4]),
       precision=st.sampled_from(["megatron", "fp16", "fp8"]),
       optimizer=st.sampled_from(["adamw", "sgd-momentum"]),
       recompute=st.sampled_from(["none", "selective", "full"]), offload=st.booleans(),
       profile=st.sampled_from(["megatron", "megatron-local"]))
def test_megatron_round_trip(tmp_path, capsys, model, tp, pp, vpp, cp, ep, dp, zero, mb, m,
                             precision, optimizer, recompute, offload, profile):
    # interleaving needs pp >= 2; ep only on the MoE model; CPU offload needs the distributed
    # optimizer (Megatron's rule) — outside that Megatron cannot say it
    vpp = vpp if pp > 1 else 1
    ep = ep if model == "qwen3-moe" and (tp * cp * dp) % ep == 0 else 1
    offload = offload and zero >= 1
    flags = [*MEGATRON_MODELS[model], "--tp", tp, "--pp", pp, "--vpp", vpp, "--cp", cp, "--ep", ep,
             "--etp", 1, "--dp", dp, "--zero", zero, "--micro-batch", mb, "--micro-batches", m,
             "--seq", 1024, "--precision", precision, "--optimizer", optimizer,
             "--recompute", recompute, "--layout", "even", "--loop", "megatron",
             "--profile", profile,
             "--sp" if tp > 1 else "--no-sp"] + (["--optimizer-offload"] if offload else [])
    if zero >= 2:
        flags += ["--zero3-impl", "fsdp"]
    _roundtrip(tmp_path, capsys, "megatron", flags)


TT_MODELS = {"405b": ("--model", "llama3.1-405b"), "8b": ("--hf-id", "meta-llama/Llama-3.1-8B")}


@settings(**COMMON)
@given(model=st.sampled_from(sorted(TT_MODELS)), tp=st.sampled_from([1, 2]),
       pp=st.sampled_from([1, 2]), cp=st.sampled_from([1, 2]), dp=st.sampled_from([1, 4]),
       zero=st.sampled_from([0, 3]), mb=st.sampled_from([1, 2]), m=st.sampled_from([1, 2]),
       schedule=st.sampled_from(["1f1b", "gpipe", "interleaved", "zb-v"]),
       rec=st.sampled_from(["none", "full", "op", "interval", "memory-budget"]),
       reshard=st.sampled_from(["default", "always", "never"]), compile_=st.booleans(),
       loss_parallel=st.booleans())
def test_torchtitan_round_trip(tmp_path, capsys, model, tp, pp, cp, dp, zero, mb, m, schedule,
                               rec, reshard, compile_, loss_parallel):
    # torchtitan applies FSDP for a shard degree > 1 or CP (fsdp_enabled = dp_shard_enabled or
    # cp_enabled); accumulation without PP is the
    # global batch, under PP the local batch is split into micro-batches (at least pp of them:
    # torch's 1F1B refuses fewer, and so does memledger); the TOML is 0.2's spelling, read back
    # as that era; multi-stage schedules
    # hold 2 stages per rank and split the layers its own way (layout torchtitan:1,1)
    zero = 3 if cp > 1 else zero if dp > 1 else 0
    schedule = schedule if pp > 1 else "1f1b"
    m = m * pp
    flags = [*TT_MODELS[model], "--tp", tp, "--pp", pp, "--cp", cp, "--dp", dp, "--zero", zero,
             "--micro-batch", mb, "--micro-batches", m, "--seq", 2048,
             "--precision", "fsdp2-mixed" if zero == 3 else "amp", "--recompute", rec,
             "--recompute-every", 2 if rec == "interval" else 0, "--recompute-budget-pct", 30,
             "--schedule", schedule, "--vpp", 2 if schedule == "interleaved" else 1,
             "--layout", "torchtitan:1,1" if pp > 1 else "even", "--loop", "torchtitan",
             "--torchtitan-version", "0.2",
             "--tp-engine", "dtensor", "--zero3-impl", "fsdp", "--fsdp-reshard-after-forward",
             reshard, "--sp" if tp > 1 else "--no-sp", "--optimizer-impl", "fused"]
    compile_ = compile_ or rec == "memory-budget"  # torchtitan's MemoryBudgetAC needs compile
    flags += (["--torch-compile"] if compile_ else []) + ([] if loss_parallel else
                                                         ["--no-loss-parallel"])
    _roundtrip(tmp_path, capsys, "torchtitan", flags)


@settings(**COMMON)
@given(zero=st.sampled_from([0, 1, 2, 3]), tp=st.sampled_from([1, 2]), dp=st.sampled_from([1, 8]),
       mb=st.sampled_from([1, 4]), m=st.sampled_from([1, 2]),
       precision=st.sampled_from(["mixed16", "fp16", "fp32"]), offload=st.booleans(),
       overlap=st.booleans(), buckets=st.sampled_from([(5e8, 5e7), (2e8, 1e7)]))
def test_deepspeed_round_trip(tmp_path, capsys, zero, tp, dp, mb, m, precision, offload, overlap,
                              buckets):
    base = ["--hf-id", "meta-llama/Llama-3.2-1B", "--seq", 1024]
    # AutoTP has no sequence parallelism; DeepSpeed's JSON has no pipeline (PipelineModule)
    flags = base + ["--tp", tp, "--no-sp", "--reduce-bucket", buckets[0],
                    "--allgather-bucket", buckets[0], "--zero3-prefetch-bucket", buckets[1],
                    "--pp", 1, "--dp", dp, "--zero", zero, "--micro-batch", mb,
                    "--micro-batches", m, "--precision", precision, "--layout", "even",
                    "--loop", "deepspeed", "--profile", "hf", "--zero3-impl", "deepspeed",
                    "--grad-buckets", "deepspeed", "--overlap-comm" if overlap else "--no-overlap-comm",
                    "--recompute", "none"] + (["--optimizer-offload"] if offload else [])
    _roundtrip(tmp_path, capsys, "deepspeed", flags, keep=base + ["--recompute", "none"])


@settings(**COMMON)
@given(tp=st.sampled_from([1, 2]), cp=st.sampled_from([1, 2]), dp=st.sampled_from([1, 4]),
       fsdp=st.booleans(), rec=st.sampled_from(["none", "full"]),
       reshard=st.sampled_from(["default", "never"]))
def test_accelerate_round_trip(tmp_path, capsys, tp, cp, dp, fsdp, rec, reshard):
    base = ["--hf-id", "Qwen/Qwen3-8B", "--seq", 2048, "--micro-batch", 1, "--micro-batches", 2]
    if not fsdp:
        rec, reshard = "none", "default"
    flags = base + ["--tp", tp, "--cp", cp, "--pp", 1, "--dp", dp, "--zero", 3 if fsdp else 0,
                    "--precision", "fsdp2-mixed" if fsdp else "amp", "--recompute", rec,
                    "--fsdp-reshard-after-forward", reshard, "--layout", "even", "--loop",
                    "hf-trainer", "--profile", "hf", "--zero3-impl", "fsdp", "--no-sp",
                    "--tp-engine", "dtensor" if tp > 1 else "megatron"]
    _roundtrip(tmp_path, capsys, "accelerate", flags, keep=base)


def test_plan_takes_the_world_and_global_batch_from_the_file(capsys):
    """The planner searches the layout: a launch gives it the model, workload, world and batch."""
    f = FIX / "llama3_70b_megatron.sh"
    rc, out, err = run(["plan", "--config", f, "--gpu", "h100", "--top", "1", "--json"], capsys)
    assert rc == 0, err
    explicit = run(["plan", "--config", f, "--gpu", "h100", "--top", "1", "--json", "--world", "64",
                    "--global-batch", "128"], capsys)[1]
    got, want = json.loads(out), json.loads(explicit)
    assert got["worlds"] == [64] and got["configurations"] == want["configurations"]
    rc, _, err = run(["plan", "--model", "llama3-8b", "--gpu", "h100"], capsys)
    assert rc == 2 and "--world" in err


def test_config_text_names_every_kind_and_the_missing_world(capsys):
    rc, out, _ = run(["config", FIX / "ds_zero3_offload.json"], capsys)
    assert rc == 0
    for title in ("read:", "framework defaults used", "change memory, NOT modelled",
                  "ignored:", "note: world size", "note: model", "equivalent flags:"):
        assert title in out, title
    # an absent offload_param is DeepSpeed's default: parameters stay on the GPU
    assert "zero_optimization.offload_param.device = none → param_offload=False" in out


def test_an_absent_key_is_a_default_on_no_line_even_where_its_leaf_is_elsewhere(tmp_path, capsys):
    """float8.recipe_name is absent; `recipe_name` on line 7 belongs to [quantize.linear.mx],
    which is read (and named as not modelled) on that line."""
    p = _bad(tmp_path, "job.toml", '[model]\nname = "llama3"\nflavor = "8B"\n[training]\n'
                                   'seq_len = 4096\n[quantize.linear.mx]\n'
                                   'recipe_name = "mxfp8_cublas"\n')
    rc, out, _ = run(["config", p, "--world", "8"], capsys)
    assert rc == 0
    assert f"{p}:0 float8.recipe_name = tensorwise" in out
    assert f"{p}:7 quantize.linear.mx.recipe_name = mxfp8_cublas" in out


def test_null_means_the_framework_default(tmp_path, capsys):
    p = _bad(tmp_path, "ds.json", '{"train_micro_batch_size_per_gpu": null, "zero_optimization": '
                                  '{"stage": 2, "reduce_bucket_size": null}}')
    got = _pairs(equivalent([p], capsys)["flags"])
    assert got["--micro-batch"] == "1" and got["--reduce-bucket"] == "500000000.0"


@pytest.mark.parametrize("name,text,needle", [
    ("deep.json", "[" * 5000 + "]" * 5000, "nests deeper than 64"),
    ("deep.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than 64"),
    ("deep.toml", "a = " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than 64"),
    ("bomb.yaml", "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
     "more than 50,000 values"),
])
def test_hostile_nesting_and_aliases_are_bounded(tmp_path, capsys, name, text, needle):
    p = _bad(tmp_path, name, text)
    rc, _, err = run(["config", p], capsys)
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_a_device_or_a_folder_is_not_read(tmp_path, capsys):
    for path in ("/dev/zero", tmp_path):
        rc, _, err = run(["config", path], capsys)
        assert rc == 2 and "not a regular file" in err


def test_config_format_forces_the_reader(capsys):
    """A TrainingArguments JSON read as DeepSpeed: only the key both spell alike is read."""
    info = equivalent([FIX / "training_args.json", "--config-format", "deepspeed"], capsys)
    assert info["format"] == "deepspeed"
    read = [r["key"] for r in info["rows"] if r["kind"] == "read"]
    assert read == ["gradient_accumulation_steps"] and any(
        r["key"] == "per_device_train_batch_size" and r["kind"] == "ignored" for r in info["rows"])


def test_only_the_megatron_launch_line_is_read(tmp_path, capsys):
    """A script that preprocesses data first: that command's --seq-length is not the run's."""
    p = _bad(tmp_path, "run.sh", "#!/bin/bash\npython tools/preprocess_data.py --seq-length 99 "
             "--workers 64\ntorchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 "
             "--hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 128 "
             "--micro-batch-size 1\n")
    got = _pairs(equivalent([p], capsys)["flags"])
    assert got["--seq"] == "128" and got["--world"] == "8"


TT_2024 = """[model]
name = "llama3"
flavor = "8B"
[training]
batch_size = 2
seq_len = 8192
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
compile = false
[experimental]
pipeline_parallel_degree = 1
context_parallel_degree = 1
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
"""


def test_a_torchtitan_file_runs_as_its_era_with_torchtitans_model_code(tmp_path, capsys):
    """A Dec 2024 TOML (torchtitan's Table 1 run, 8B FSDP8 op SAC: published 82.4 GiB reserved)
    is read as that era with the hf profile: the same ledger as the published row's spelling,
    where the Megatron profile's fused loss would say 61.9 GiB (−25 %)."""
    from memledger.validation.published_titan import load, predict
    p = tmp_path / "t1.toml"
    p.write_text(TT_2024)
    pairs = _pairs(equivalent([p, "--world", 8], capsys)["flags"])
    assert pairs["--torchtitan-version"] == "2024-12" and pairs["--profile"] == "hf"
    rc, out, err = run(["ledger", "--config", p, "--world", 8, "--gpu", "h100", "--json"], capsys)
    assert rc == 0, err
    reserved = json.loads(out)["ranks"][0]["peak_reserved_bytes"] / 2**30
    row = next(r for r in load() if r["id"] == "T1 8b fsdp8 sac fsdp")
    assert reserved == pytest.approx(predict(row)["reserved_gib"], rel=1e-9)


def test_a_torchtitan_03_dump_runs_its_chunked_loss(capsys):
    pairs = _pairs(equivalent([FIX / "torchtitan03_llama3_8b_dump.json", "--world", 16],
                              capsys)["flags"])
    assert pairs["--torchtitan-version"] == "0.3" and pairs["--loss"] == "chunked"


def test_a_named_loop_runs_its_model_codes_profile(capsys):
    base = ["--model", "llama3-8b", "--tp", 1, "--pp", 1, "--world", 8]
    for loop, profile in (("torchtitan", "hf"), ("deepspeed", "hf"), ("megatron", "megatron"),
                          ("auto", "megatron")):
        d = json.loads(run(["ledger", *base, "--loop", loop, "--json"], capsys)[1])
        assert d["config"]["train"]["profile"] == profile, loop
    d = json.loads(run(["ledger", *base, "--loop", "torchtitan", "--profile", "megatron",
                        "--json"], capsys)[1])
    assert d["config"]["train"]["profile"] == "megatron"  # an explicit profile is kept
    assert any("profile megatron under loop torchtitan" in w for w in d["warnings"])


def test_a_megatron_local_spec_launch_runs_the_local_profile(capsys, tmp_path):
    """`--transformer-impl local` (Megatron-Core's own layers): the megatron-local profile, which
    keeps more than Transformer Engine's; transformer_engine (the default) stays megatron."""
    script = (FIX / "llama3_70b_megatron.sh").read_text()
    for impl, profile in (("local", "megatron-local"), ("transformer_engine", "megatron")):
        f = tmp_path / f"{impl}.sh"
        f.write_text(script.replace("pretrain_gpt.py", f"pretrain_gpt.py --transformer-impl {impl}"))
        pairs = _pairs(equivalent([f], capsys)["flags"])
        assert pairs["--profile"] == profile, impl
    f.write_text(script.replace("pretrain_gpt.py", "pretrain_gpt.py --transformer-impl te"))
    assert main(["config", str(f)]) == 2
    assert "transformer_impl" in capsys.readouterr().err


def test_torchtitan_memory_keys_are_modelled_or_named(tmp_path, capsys):
    """optimizer.early_step_in_backward (0.2) is modelled: --optimizer-in-backward
    (ledger.step_in_backward); a bf16 reduce is the fsdp2-bf16-reduce recipe; async TP's
    buffers are not modelled and are named, never silently ignored."""
    p = _bad(tmp_path, "job.toml", '[model]\nname = "llama3"\nflavor = "8B"\n[training]\n'
                                   'seq_len = 4096\nmixed_precision_reduce = "bfloat16"\n'
                                   '[optimizer]\nearly_step_in_backward = true\n'
                                   '[parallelism]\nenable_async_tensor_parallel = true\n')
    info = equivalent([p, "--world", "8"], capsys)
    rows = {(r["kind"], r["key"]) for r in info["rows"]}
    assert ("unmodelled", "parallelism.enable_async_tensor_parallel") in rows
    assert not {k for k, key in rows if k == "unmodelled" and key.startswith("optimizer.")}
    assert ("unmodelled", "training.mixed_precision_reduce") not in rows
    assert "fsdp2-bf16-reduce" in info["flags"] and "--optimizer-in-backward" in info["flags"]


def test_torchtitan_quantize_linear_float8_spelling_is_float8(tmp_path, capsys):
    """torchtitan docs/float8.md: converters = ["quantize.linear.float8"] with its options under
    [quantize.linear.float8] is the float8 converter of the [float8] spelling; a quantizer's
    section without any converter changes nothing."""
    head = '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nseq_len = 4096\n'
    opts = "enable_fsdp_float8_all_gather = true\nprecompute_float8_dynamic_scale_for_fsdp = true\n"
    new = _bad(tmp_path, "new.toml", head.replace('flavor = "8B"\n', 'flavor = "8B"\nconverters = '
               '["quantize.linear.float8"]\n') + "[quantize.linear.float8]\n" + opts)
    old = _bad(tmp_path, "old.toml", head.replace('flavor = "8B"\n', 'flavor = "8B"\nconverters = '
               '["float8"]\n') + "[float8]\n" + opts)
    flags = [equivalent([p, "--world", "8"], capsys)["flags"] for p in (new, old)]
    assert flags[0] == flags[1] and "--float8-fsdp-all-gather" in flags[0]
    none = _bad(tmp_path, "none.toml", head + "[quantize.linear.float8]\nfilter_fqns = ['a']\n")
    rows = equivalent([none, "--world", "8"], capsys)["rows"]
    assert not [r for r in rows if r["kind"] == "unmodelled"]


def test_torchtitan_cuda_graph_step_is_read_from_disable_cuda_graphs(tmp_path, capsys):
    """0.3's training.disable_cuda_graphs: true runs eager (--cuda-graphs off); false leaves the
    CUDA-graph step where 0.3 runs it (auto), whose gradients are zeroed in place."""
    head = '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nseq_len = 4096\n'
    off = _bad(tmp_path, "off.toml", head + "disable_cuda_graphs = true\n")
    on = _bad(tmp_path, "on.toml", head + "disable_cuda_graphs = false\n")
    assert "--cuda-graphs off" in " ".join(equivalent([off, "--world", "8"], capsys)["flags"])
    flags = " ".join(equivalent([on, "--world", "8"], capsys)["flags"])
    assert "--cuda-graphs off" not in flags
