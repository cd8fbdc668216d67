"""torchtitan's `training.mixed_precision_reduce = "bfloat16"` is the `fsdp2-bf16-reduce` recipe:
FSDP2 clamps a reduce_dtype equal to param_dtype to None (torch 2.13 fsdp/_fully_shard/
_fsdp_param.py `init_dtype_attrs`), so no gradient is ever upcast — the reduce-scatter input is
a bf16 copy (`_fsdp_collectives.py foreach_reduce`: allocated in the reduce dtype) and under PP
the gradients held to the last micro-batch stay bf16 (`to_accumulated_grad_if_needed` returns
early). The sharded fp32 rows do not change."""
from __future__ import annotations

import json

from memledger import ParallelSpec, TrainSpec, build_ledger, model
from memledger.cli import main
from memledger.configs import read_files
from memledger.ledger.fsdp2 import PP_GRADS_ITEM
from memledger.specs.runtime import RuntimeSpec

TITAN = RuntimeSpec(loop="torchtitan", zero3_impl="fsdp")
RS = "zero-3 reduce-scatter input"


def _rank0(precision, p, **train):
    t = TrainSpec(precision=precision, **train)
    return build_ledger(model("llama3-8b"), p, t, TITAN).ranks[0]


def test_bf16_reduce_halves_the_pp_held_gradients_and_shrinks_the_reduce_scatter_copy():
    p, kw = ParallelSpec(dp=2, pp=4, zero=3), dict(seq=4096, micro_batch=1, micro_batches=8,
                                                   recompute="full")
    fp32, bf16 = (_rank0(prec, p, **kw) for prec in ("fsdp2-mixed", "fsdp2-bf16-reduce"))
    items = lambda r: {i.name: i.bytes for i in r.items if i.name in (PP_GRADS_ITEM, RS)}  # noqa: E731
    # stage 0 of Llama-3 8B: 2,270,232,576 params held unsharded, fp32 vs bf16; the largest
    # unit's 218,112,000 params: bf16 gradient + fp32 (6 B) or bf16 (4 B) copy
    assert items(fp32) == {PP_GRADS_ITEM: 9_080_930_304, RS: 1_308_672_000}
    assert items(bf16) == {PP_GRADS_ITEM: 4_540_465_152, RS: 872_448_000}
    assert {k: bf16.rows[k] for k in ("weights", "gradients", "optimizer")} == \
        {k: fp32.rows[k] for k in ("weights", "gradients", "optimizer")}
    assert fp32.peak_allocated_bytes - bf16.peak_allocated_bytes == 4_976_689_152


def test_the_toml_key_is_read_and_written_back(tmp_path, capsys):
    job = tmp_path / "job.toml"
    job.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\n'
                   'mixed_precision_reduce = "bfloat16"\n[parallelism]\n'
                   'data_parallel_shard_degree = 8\n')
    assert read_files([str(job)]).flags()["precision"] == "fsdp2-bf16-reduce"
    flags = ["--hf-id", "meta-llama/Llama-3.1-8B", "--tp", "1", "--pp", "1", "--dp", "8",
             "--zero", "3", "--zero3-impl", "fsdp", "--precision", "fsdp2-bf16-reduce",
             "--recompute", "op", "--loop", "torchtitan", "--torchtitan-version", "0.2",
             "--tp-engine", "dtensor", "--optimizer-impl", "fused", "--no-sp",
             "--micro-batch", "1", "--micro-batches", "1", "--seq", "2048"]
    assert main(["config", "--to", "torchtitan", *flags]) == 0
    out = capsys.readouterr().out
    assert 'mixed_precision_reduce = "bfloat16"' in out
    job.write_text(out)
    ledgers = []
    for argv in (["ledger", "--config", str(job)], ["ledger", *flags]):
        assert main([*argv, "--json"]) == 0
        ledgers.append(json.loads(capsys.readouterr().out)["ranks"])
    assert ledgers[0] == ledgers[1]


def test_a_bf16_reduce_of_fp32_gradients_is_named_not_modelled(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\n'
                   'mixed_precision_param = "float32"\nmixed_precision_reduce = "bfloat16"\n'
                   '[parallelism]\ndata_parallel_shard_degree = 8\n')
    rows = [r for r in read_files([str(job)]).rows if r.key == "training.mixed_precision_reduce"
            and r.kind == "unmodelled"]
    assert len(rows) == 1 and "fp32" in rows[0].why
