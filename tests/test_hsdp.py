"""HSDP (`ParallelSpec.dp_replicate`): ZeRO / FSDP states shard over one copy of the shard
group, dp·cp / R ranks, and every copy holds the same shards — torchtitan's
`data_parallel_replicate_degree` beside `data_parallel_shard_degree` (parallel_dims.py: the
`fsdp` mesh is dp_shard·cp, `efsdp` dp_shard·cp·tp/ep, both under `dp_replicate`), accelerate's
`parallelism_config_dp_replicate_size` and FSDP 1's HYBRID_SHARD, Megatron's
`--num-distributed-optimizer-instances`. Claims: the rows equal the unreplicated shard group's,
the files that say HSDP are read as HSDP and written back as HSDP, bad replica counts name the
field."""
from __future__ import annotations

from dataclasses import replace

import pytest

from memledger import ParallelSpec, TrainSpec, build_ledger, model
from memledger.cli import main
from memledger.configs import read_files
from memledger.errors import SpecError
from memledger.ledger.communication import communicators
from memledger.specs.runtime import RuntimeSpec

STATIC = ("weights", "gradients", "optimizer")
TITAN = RuntimeSpec(loop="torchtitan", zero3_impl="fsdp")
OP_8K = TrainSpec(seq=8192, micro_batch=2, micro_batches=1, recompute="op",
                  precision="fsdp2-mixed")


def _static(m, p, t, rt=None):
    r = build_ledger(m, p, t, rt).ranks[0]
    return {k: r.rows[k] for k in STATIC}


def test_hsdp_4x8_holds_what_fsdp_8_holds_not_what_fsdp_32_holds():
    m = model("llama3-8b")
    hsdp = _static(m, ParallelSpec(dp=32, dp_replicate=4, zero=3), OP_8K, TITAN)
    # fp32 parameters and gradients and AdamW's two fp32 states of 8,030,261,248 / 8 params;
    # the weights row adds the bf16 all-gather output of one unit
    assert hsdp == _static(m, ParallelSpec(dp=8, zero=3), OP_8K, TITAN) == {
        "weights": 4_149_348_352, "gradients": 4_015_130_624, "optimizer": 8_030_261_248}
    assert _static(m, ParallelSpec(dp=32, zero=3), OP_8K, TITAN)["optimizer"] == 2_007_565_312


def test_megatron_optimizer_instances_shard_over_dp_over_instances():
    m, t = model("llama3-70b"), TrainSpec(seq=4096, micro_batch=1, micro_batches=8,
                                          recompute="full")
    eight = ParallelSpec(tp=8, dp=64, zero=1, dp_replicate=8)
    assert build_ledger(m, eight, t).ranks[0].rows["optimizer"] == 13_232_910_336
    assert build_ledger(m, replace(eight, dp=8, dp_replicate=1), t).ranks[0].rows[
        "optimizer"] == 13_232_910_336
    assert build_ledger(m, replace(eight, dp_replicate=1), t).ranks[0].rows[
        "optimizer"] == 1_654_113_792


def test_experts_shard_over_one_copy_of_the_expert_group():
    m = model("qwen3-30b-a3b")
    hsdp = ParallelSpec(dp=64, ep=8, dp_replicate=2, zero=3)
    assert hsdp.expert_dp == 4 and hsdp.dense_dp == 32
    t = TrainSpec(seq=4096, micro_batch=1, micro_batches=1, recompute="full",
                  precision="fsdp2-mixed")
    assert _static(m, hsdp, t, TITAN) == _static(m, replace(hsdp, dp=32, dp_replicate=1), t, TITAN)


def test_the_replica_group_is_one_more_nccl_communicator():
    assert ("dp-replicate", 4) in communicators(ParallelSpec(dp=32, dp_replicate=4, zero=3))
    assert all(n != "dp-replicate" for n, _ in communicators(ParallelSpec(dp=32, zero=3)))


@pytest.mark.parametrize("kw,field,needle", [
    (dict(dp=32, dp_replicate=3), "dp_replicate", "dp_replicate=3 must divide dp=32"),
    (dict(dp=8, dp_replicate=4, ep=4), "ep", "tp*cp*dp/dp_replicate = 1*1*8/4 = 2"),
    (dict(dp=8, dp_replicate=0), "dp_replicate", "dp_replicate"),
])
def test_bad_replica_counts_name_the_field_and_the_numbers(kw, field, needle):
    with pytest.raises(SpecError) as e:
        ParallelSpec(**kw)
    assert e.value.field == field and needle in str(e.value)


def test_cli_refuses_a_replica_count_that_does_not_divide_dp(capsys):
    rc = main(["ledger", "--model", "llama3-8b", "--dp", "32", "--dp-replicate", "3",
               "--zero", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--dp-replicate" in err and "dp=32" in err


def _flags(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return read_files([str(p)]).flags()


TOML = """[model]
name = "llama3"
flavor = "8B"
[parallelism]
data_parallel_replicate_degree = {rep}
data_parallel_shard_degree = {shard}
context_parallel_degree = {cp}
"""


@pytest.mark.parametrize("rep,shard,cp,want", [
    (4, 8, 1, dict(dp=32, dp_replicate=4, zero=3, precision="fsdp2-mixed")),
    (4, 1, 1, dict(dp=4, zero=0, precision="amp")),  # replicas alone: DDP
    (1, 1, 8, dict(cp=8, zero=3, precision="fsdp2-mixed")),  # CP alone shards over cp
    (2, 1, 4, dict(dp=2, dp_replicate=2, cp=4, zero=3)),  # HSDP over a CP shard group
])
def test_torchtitan_degrees_are_read_as_torchtitan_builds_its_meshes(tmp_path, rep, shard, cp,
                                                                      want):
    f = _flags(tmp_path, "job.toml", TOML.format(rep=rep, shard=shard, cp=cp))
    assert {k: f.get(k) for k in want} == want
    if "dp_replicate" not in want:
        assert "dp_replicate" not in f


HSDP_FILES = {  # accelerate's FSDP 1 HYBRID_SHARD: one copy per machine (the intra-node group)
    "hybrid_shard.yaml": ("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: "
                          "HYBRID_SHARD\n  fsdp_version: 1\nmixed_precision: bf16\n"
                          "num_machines: 4\nnum_processes: 32\n",
                          dict(world=32, zero=3, dp_replicate=4)),
    "parallelism_config.yaml": ("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
                                "mixed_precision: bf16\nnum_processes: 32\nparallelism_config:\n"
                                "  parallelism_config_dp_shard_size: 8\n"
                                "  parallelism_config_dp_replicate_size: 4\n",
                                dict(dp=32, zero=3, dp_replicate=4)),
    "megatron.sh": ("torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py "
                    "--tensor-model-parallel-size 8 --use-distributed-optimizer "
                    "--num-distributed-optimizer-instances 2 --micro-batch-size 1 "
                    "--global-batch-size 64 --seq-length 4096 --num-layers 2 --hidden-size 1024 "
                    "--num-attention-heads 8 --vocab-size 32000\n",
                    dict(zero=1, dp_replicate=2)),
}


@pytest.mark.parametrize("name", HSDP_FILES)
def test_accelerate_and_megatron_files_that_say_hsdp_are_read_as_hsdp(tmp_path, name):
    text, want = HSDP_FILES[name]
    f = _flags(tmp_path, name, text)
    assert {k: f.get(k) for k in want} == want


def _ledger(argv, capsys):
    import json
    assert main([*map(str, argv), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    return d["ranks"]


@pytest.mark.parametrize("target,suffix,flags", [
    ("torchtitan", "toml", ["--precision", "fsdp2-mixed", "--zero", "3", "--zero3-impl", "fsdp",
                            "--recompute", "op", "--loop", "torchtitan", "--torchtitan-version",
                            "0.2", "--tp-engine", "dtensor", "--optimizer-impl", "fused",
                            "--no-sp", "--fsdp-reshard-after-forward", "default"]),
    ("megatron", "sh", ["--zero", "1", "--precision", "megatron", "--recompute", "full"]),
    ("accelerate", "yaml", ["--precision", "fsdp2-mixed", "--zero", "3", "--zero3-impl", "fsdp",
                            "--recompute", "full", "--no-sp", "--loop", "hf-trainer",
                            "--profile", "hf", "--fsdp-reshard-after-forward", "default"]),
    ("deepspeed", "json", ["--precision", "mixed16", "--zero", "3", "--zero3-impl", "deepspeed",
                           "--recompute", "none", "--no-sp", "--loop", "deepspeed", "--profile",
                           "hf", "--grad-buckets", "deepspeed", "--overlap-comm"]),
])
def test_hsdp_written_out_reads_back_to_the_same_ledger(tmp_path, capsys, target, suffix, flags):
    size = ["--hf-id", "meta-llama/Llama-3.1-8B", "--tp", "1", "--pp", "1", "--dp", "32",
            "--dp-replicate", "4", "--micro-batch", "1", "--micro-batches", "1", "--seq", "2048"]
    assert main(["config", "--to", target, *size, *flags]) == 0
    p = tmp_path / f"out.{suffix}"
    p.write_text(capsys.readouterr().out)
    keep = {"accelerate": ["--hf-id", "meta-llama/Llama-3.1-8B", "--seq", "2048",
                           "--micro-batch", "1"],  # accelerate's YAML has no model or batch
            "deepspeed": ["--hf-id", "meta-llama/Llama-3.1-8B", "--seq", "2048"]}.get(target, [])
    assert _ledger(["ledger", "--config", p, *keep], capsys) == \
        _ledger(["ledger", *size, *flags], capsys)


def test_the_advisor_offers_folding_the_replicas_into_one_shard_group():
    from memledger.advisor.moves import static_candidates
    m = model("llama3-8b")
    led = build_ledger(m, ParallelSpec(dp=32, dp_replicate=4, zero=3), OP_8K, TITAN)
    fold = [c for c in static_candidates(led) if "HSDP replicas 4 → 1" in c.label]
    assert len(fold) == 1 and fold[0].parallel.dp_replicate == 1
    # the states then shard over 32 ranks: the optimizer row of FSDP 32, 2,007,565,312 B
    assert fold[0].ledger.ranks[0].rows["optimizer"] == 2_007_565_312
    tp2 = [c for c in static_candidates(led) if c.label.startswith("tp 1 → 2")][0]
    assert (tp2.parallel.dp, tp2.parallel.dp_replicate) == (16, 4)


def test_an_uploaded_config_sets_the_apps_replicas_and_one_without_them_clears_them():
    from dataclasses import replace as _replace

    from memledger.views.config_io import import_config
    from memledger.views.state import Config
    hsdp = TOML.format(rep=4, shard=8, cp=1).encode()
    cfg, rows = import_config(Config(), hsdp, "job.toml")
    assert (cfg.world, cfg.dp, cfg.dp_replicate, cfg.zero) == (32, 32, 4, 3)
    assert not [r for r in rows if r["key"] == "dp_replicate" and r["kind"] == "CLI only"]
    plain = TOML.format(rep=1, shard=8, cp=1).encode()
    cfg, _ = import_config(_replace(cfg, dp_replicate=4), plain, "job.toml")
    assert (cfg.world, cfg.dp_replicate) == (8, 1)


MICS = ('{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, '
        '"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "mics_shard_size": 8}}')


def test_deepspeed_mics_shards_inside_groups_of_its_size(tmp_path, capsys):
    """DeepSpeed MiCS (ZeRO-3, zero_optimization.mics_shard_size 8) on 32 GPUs: model states
    shard inside 4 groups of 8 — dp_replicate 4 once dp is known; a size that does not divide dp
    is an error naming the key."""
    p = tmp_path / "ds.json"
    p.write_text(MICS)
    model = ["--hf-id", "meta-llama/Llama-3.1-8B", "--seq", "4096"]
    explicit = [*model, "--world", "32", "--tp", "1", "--pp", "1", "--zero", "3",
                "--zero3-impl", "deepspeed", "--precision", "mixed16", "--dp-replicate", "4",
                "--micro-batch", "1", "--micro-batches", "1", "--loop", "deepspeed",
                "--profile", "hf", "--grad-buckets", "deepspeed", "--overlap-comm", "--no-sp"]
    got = _ledger(["ledger", "--config", p, *model, "--world", "32"], capsys)
    assert got == _ledger(["ledger", *explicit], capsys)
    assert main(["ledger", "--config", str(p), *model, "--world", "12"]) == 2
    err = capsys.readouterr().err
    assert "mics_shard_size" in err and "does not divide dp 12" in err
    from memledger.views.config_io import import_config
    from memledger.views.state import Config
    cfg, _ = import_config(Config(world=32, tp=1, pp=1), MICS.encode(), "ds.json")
    assert (cfg.dp, cfg.dp_replicate, cfg.zero) == (32, 4, 3)


def test_hsdp_step_time_is_one_nodes_fsdp_plus_the_shards_all_reduce_over_the_copies():
    """Step time (costs/stepmodel.dp_terms): HSDP 4 × 8 on four 8-GPU nodes moves what FSDP over
    one node moves (gathers and reduce-scatters over NVLink) plus an all-reduce of the reduced
    1/8 shard over the 4 copies, one per node (one NIC each); the optimizer steps an 1/8 shard."""
    from memledger.costs import collectives as co
    from memledger.costs import stepmodel as sm
    from memledger.costs.overlap import FRAMEWORKS
    from memledger.presets import gpu
    hw, fw = gpu("h100"), FRAMEWORKS["megatron-core"]
    t = TrainSpec(seq=8192, micro_batch=1, micro_batches=1, recompute="full")
    m, grads = model("llama3-8b"), 16_060_522_496
    hsdp, node = (sm.setup(m, hw, fw, t, 1, 1, dp, 8, 1, r) for dp, r in ((32, 4), (8, 1)))
    x = [sm.dp_terms(su, grads, grads, [3]).x[0] for su in (hsdp, node)]
    beta, alpha = co.link(hw, 32, 8, stride=8)
    assert x[0] - x[1] == pytest.approx(co.all_reduce_seconds(grads / 8, 4, beta, alpha))
    assert sm.optimizer_seconds(hsdp, t, grads, 3) == sm.optimizer_seconds(node, t, grads, 3)
