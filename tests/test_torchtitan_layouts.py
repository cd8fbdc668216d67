"""torchtitan as it runs, the rules found by running layouts beyond the first stored cases
through torchtitan's own code (`validate --engine torchtitan --engine-config ...`; each measured
case is stored in validation/engine-torchtitan.json and re-predicted by test_engine_torchtitan).
Golden numbers are those runs' bytes (torchtitan 0.3.0, fake tensors, rank 0)."""
from __future__ import annotations

import json

import pytest

from memledger import build_ledger, model
from memledger.cli import main
from memledger.ledger.activations.held import kind_table
from memledger.ledger.activations.torchtitan_ac import op_saved
from memledger.ledger.chunked_loss import chunked_loss_transient
from memledger.ledger.pipeline.order import rank_order
from memledger.model.hf_config import from_hf_config
from memledger.model.titan_flavors import DSV3_16B
from memledger.specs import ParallelSpec, TrainSpec
from memledger.specs.loop import resolve_loop
from memledger.specs.loop_implied import implied
from memledger.specs.runtime import RuntimeSpec

TITAN = RuntimeSpec(loop="torchtitan", loss="chunked", zero3_impl="fsdp", tp_engine="dtensor")


def _train(**kw):
    return TrainSpec(**{"precision": "fsdp2-mixed", "profile": "hf", "vocab_pad": 1, **kw})


def test_tied_weights_make_embedding_norm_and_head_one_kept_unit():
    # torchtitan fsdp.py apply_fsdp_to_decoder, enable_weight_tying: [tok_embeddings, norm,
    # lm_head] one unit, not resharded after forward. Measured (Llama 3.2 1B, fsdp 4): the
    # unsharded bf16 (128256, 2048) weight and the norm, 525,340,672 B, alive at the peak
    led = build_ledger(model("llama3.2-1b"), ParallelSpec(dp=4, zero=3),
                       _train(seq=8192, micro_batch=4, recompute="full"), TITAN)
    root = next(i for i in led.ranks[0].items if i.name.startswith("zero-3 root unit"))
    assert root.bytes == 525_340_672
    untied = build_ledger(model("llama3-8b"), ParallelSpec(dp=4, zero=3),
                          _train(seq=8192, recompute="full"), TITAN)
    head = next(i for i in untied.ranks[0].items if i.name.startswith("zero-3 root unit"))
    assert head.bytes == 128256 * 4096 * 2 + 4096 * 2  # [norm, lm_head] only


def test_the_chunked_loss_without_tp_peaks_at_cross_entropys_backward():
    # Llama 3 8B fsdp 16, local batch 4 × 4096: the last chunk's set measured at the peak:
    # fp32 head gradient, GradAccumulator, the chunk's bf16 logits, the contiguous() copies of
    # the hidden states' chunks (b > 1) and F.cross_entropy's backward: _log_softmax's saved
    # output, nll_loss_backward's and _log_softmax_backward_data's, 3 × 2048 × 128256 × fp32
    m, p = model("llama3-8b"), ParallelSpec(dp=16, zero=3)
    t = _train(seq=4096, micro_batch=4, recompute="full")
    item = chunked_loss_transient(m, p, t, TITAN, resolve_loop(TITAN, "hf"), 1)
    assert item.bytes == (2_101_346_304 + 268_435_456 + 525_336_576 + 134_217_728
                          + 3 * 1_050_673_152)
    one = chunked_loss_transient(m, p, _train(seq=16384, recompute="full"), TITAN,
                                 resolve_loop(TITAN, "hf"), 1)
    assert item.bytes - one.bytes == 134_217_728  # b = 1: the chunks are views, no copies


def test_with_ep_a_moe_block_without_shared_experts_keeps_no_ffn_reduce_scatter():
    # torchtitan 0.3 moe_sharding.py: with EP the MoE's input and output stay Shard(1) on TP
    qwen = model("qwen3-30b-a3b")
    names = lambda m, ep: {a.name for a in op_saved(m, "moe", ParallelSpec(  # noqa: E731
        tp=2, sp=True, ep=ep, dp=8))}
    assert "ffn.reduce_scatter" not in names(qwen, 8)
    assert {"attn.reduce_scatter", "ffn.reduce_scatter"} <= names(qwen, 1)
    dsv3 = from_hf_config(dict(DSV3_16B))  # shared experts reduce-scatter their output
    assert "ffn.reduce_scatter" in names(dsv3, 8)


@pytest.mark.parametrize("ep, shared", [(8, False), (8, True)])
def test_torchtitans_moe_keeps_the_routers_fp32_input_and_the_combines_fp32_operand(ep, shared):
    m = from_hf_config(dict(DSV3_16B)) if shared else model("qwen3-30b-a3b")
    p, t = ParallelSpec(dp=32, ep=ep, zero=3), _train(seq=2048, recompute="none")
    titan = {e.tensor.name: e for e in kind_table(m, "moe", t, p, torchtitan=True).entries}
    hf = {e.tensor.name: e for e in kind_table(m, "moe", t, p).entries}
    assert titan["experts.out"].bytes == 2 * hf["experts.out"].bytes  # fp32, not bf16
    assert titan["moe.router_in_fp32"].tensor.fmt == "fp32"
    # the router alone reads the norm output in Qwen3: its bf16 copy is not kept
    assert ("moe.in" in titan) == shared


def test_torch_interleaved_order_is_walked_where_both_chunks_hold_their_gradients():
    # ScheduleInterleaved1F1B with m > pp alternates its chunks' backwards (torch
    # schedules.py); measured, Llama 3 8B pp 2 × 2 chunks, 8 micro-batches: the fp32 unsharded
    # gradients of both chunks together, 16,278,618,112 B, at the peak
    m = model("llama3-8b")
    p = ParallelSpec(dp=4, pp=2, vpp=2, zero=3, schedule="interleaved")
    t = _train(seq=8192, micro_batch=1, micro_batches=8, recompute="full")
    led = build_ledger(m, p, t, TITAN)
    r = led.ranks[0]
    assert r.lazy_shape.get().order == rank_order("interleaved", 2, 2, 8, 0, "pytorch")
    at_peak = [e for e in r.timeline if e.phase == r.peak_event.phase
               and e.stage == r.peak_event.stage and e.layer == r.peak_event.layer
               and e.micro_batch == r.peak_event.micro_batch][0]
    assert at_peak.gradients > 15_000_000_000  # both chunks' unsharded fp32 gradients


def test_without_ep_torchtitan_shards_the_experts_over_tp():
    rule = implied("torchtitan", dp=8, cp=1, tp=2, pp=1, ep=1)
    assert rule["etp"][0] == 2 and "moe_sharding.py" in rule["etp"][1]
    assert "etp" not in implied("torchtitan", dp=8, cp=1, tp=2, pp=1, ep=8)
    assert "etp" not in implied("pytorch", dp=8, cp=1, tp=2, pp=1, ep=1)


def _rows(argv, capsys):
    assert main(["ledger", *argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_the_cli_takes_the_implied_etp_for_moe_and_drops_it_for_dense(capsys):
    flags = ["--loop", "torchtitan", "--tp", "2", "--world", "16", "--seq", "4096"]
    moe = _rows(["--model", "qwen3-30b-a3b", *flags], capsys)
    explicit = _rows(["--model", "qwen3-30b-a3b", *flags, "--etp", "2"], capsys)
    assert moe["ranks"] == explicit["ranks"]
    dense = _rows(["--model", "llama3-8b", *flags], capsys)  # etp is moot: no refusal
    assert dense["ranks"][0]["rows"]["weights"] > 0
