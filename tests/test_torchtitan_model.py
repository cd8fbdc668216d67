"""torchtitan and FSDP2 modelled as they run (memledger.ledger.fsdp2, activations.torchtitan_ac):
each rule as a claim. Golden numbers: torchtitan 0.3's own Llama3 block (dim 512, 8 heads, 4 kv
heads, ffn 1536, 1024 tokens, bf16 params), run under its SelectiveAC / FullAC and measured with
memledger.engine.probe.LiveBytes (CPU; the CPU flash kernel added to the save list in place of
the CUDA one): per block 8,421,376 B (op, fused wqkv), 7,897,088 B (op, torchtitan 0.2's wq, wk,
wv), 1,048,576 B (full)."""
from dataclasses import replace

import pytest

from memledger import build_ledger, model
from memledger.errors import SpecError
from memledger.ledger.activations.held import held_activations
from memledger.ledger.pipeline.placement import probe
from memledger.ledger.activations.row import op_saved_bytes
from memledger.ledger.activations.torchtitan_ac import mm_sequence, op_saved
from memledger.model.hf_config import from_hf_config
from memledger.planner import PlanSpec
from memledger.presets import gpu
from memledger.specs import ParallelSpec, TrainSpec
from memledger.specs.runtime import RuntimeSpec
from memledger.views.state import DEFAULT, parse_params, to_params

SMALL = from_hf_config({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2,
                        "num_attention_heads": 8, "num_key_value_heads": 4,
                        "intermediate_size": 1536, "vocab_size": 1024,
                        "max_position_embeddings": 4096}, name="titan-small")
TITAN = RuntimeSpec(loop="torchtitan")


def _acts(m, p, t, **kw):
    return held_activations(m, p, t, probe(m, p, ((0, 1),), first=1, last=1), **kw)


@pytest.mark.parametrize("fused, measured", [(True, 8_421_376), (False, 7_897_088)])
def test_op_sac_block_keeps_what_torchtitans_own_block_keeps(fused, measured):
    t = TrainSpec(seq=1024, recompute="op", profile="megatron")
    a = _acts(SMALL, ParallelSpec(), t, fused_qkv=fused)
    assert op_saved_bytes(a, "dense") == measured


def test_op_sac_saves_every_other_mm_in_forward_order():
    names = [x.name for x in mm_sequence(SMALL, "dense", fused_qkv=False)]
    assert names == ["attn.wq_out", "attn.wk_out", "attn.wv_out", "attn.wo_out", "mlp.w1_out",
                     "mlp.w3_out", "mlp.w2_out"]
    kept = {x.name for x in op_saved(SMALL, "dense", ParallelSpec(), False)}
    assert {"attn.wq_out", "attn.wv_out", "mlp.w1_out", "mlp.w2_out"} <= kept
    assert not kept & {"attn.wk_out", "attn.wo_out", "mlp.w3_out"}


def test_op_sac_moe_block_keeps_topk_and_the_ep_all_to_all_outputs_not_the_router_gemm():
    m = model("deepseek-v3")
    kept = {x.name for x in op_saved(m, "moe", ParallelSpec(dp=64, ep=64))}
    assert {"moe.topk_values", "moe.topk_ids", "experts.dispatch_a2a",
            "experts.combine_a2a"} <= kept
    assert not any("router" in k or "gate" in k for k in kept)
    no_ep = {x.name for x in op_saved(m, "moe", ParallelSpec(dp=64))}
    assert "experts.dispatch_a2a" not in no_ep


@pytest.mark.parametrize("name", ["llama3-8b", "qwen3-30b-a3b", "deepseek-v3"])
def test_full_keeps_less_than_op_and_op_less_than_none(name):
    m = model(name)
    rows = {}
    for rc in ("none", "op", "full"):
        t = TrainSpec(seq=4096, precision="fsdp2-mixed", recompute=rc)
        rows[rc] = build_ledger(m, ParallelSpec(dp=8, zero=3), t, TITAN).peak.rows["activations"]
    assert rows["full"] < rows["op"] < rows["none"]


def test_interval_1_is_full_and_interval_2_sits_halfway():
    m = model("llama3-8b")
    row = lambda **kw: build_ledger(m, ParallelSpec(dp=8, zero=3), TrainSpec(seq=4096, **kw),  # noqa: E731
                                    TITAN).peak.rows["activations"]
    assert row(recompute="interval", recompute_every=1) == row(recompute="full")
    half = row(recompute="interval", recompute_every=2)
    assert half * 2 == pytest.approx(row(recompute="none") + row(recompute="full"), rel=0.01)


def test_memory_budget_spans_full_checkpointing_to_the_compiled_default():
    m = model("llama3-8b")
    rt = replace(TITAN, torch_compile=True)

    def row(**kw):
        return build_ledger(m, ParallelSpec(dp=8, zero=3), TrainSpec(seq=4096, **kw),
                            rt).peak.rows["activations"]
    assert row(recompute="memory-budget", recompute_budget_pct=0) == row(recompute="full")
    assert row(recompute="memory-budget", recompute_budget_pct=100) == row(recompute="none")
    assert row(recompute="none") < build_ledger(m, ParallelSpec(dp=8, zero=3), TrainSpec(
        seq=4096), TITAN).peak.rows["activations"]  # compile recomputes norms and SwiGLU


def test_memory_budget_without_compile_names_torch_compile():
    with pytest.raises(SpecError) as e:
        build_ledger(model("llama3-8b"), ParallelSpec(dp=8, zero=3),
                     TrainSpec(recompute="memory-budget"), TITAN)
    assert e.value.field == "torch_compile"


def test_fsdp2_mixed_is_16_bytes_per_param_sharded_and_gathers_bf16():
    m, p = model("llama3-8b"), ParallelSpec(dp=8, zero=3)
    led = build_ledger(m, p, TrainSpec(precision="fsdp2-mixed"), TITAN).peak
    # torchtitan's RoPE caches sit in the weights row beside the parameters (32 layers × 4,096
    # positions × 128 × 4 B, ledger.static.titan_buffers); the parameters are fp32 shards
    rope = next(i for i in led.items if i.name == "RoPE cache buffers (torchtitan)").bytes
    assert rope == 32 * 4096 * 128 * 4
    params = led.rows["weights"] - rope
    assert params == led.rows["gradients"]  # fp32 shards of both
    assert led.rows["optimizer"] == 2 * params  # fp32 m and v, no master copy
    gather = next(i for i in led.items if i.name == "zero-3 gather + prefetch")
    assert "bf16" in gather.formula


def test_fsdp2_pads_8_experts_over_64_ranks_to_one_whole_expert_each_and_warns():
    m, p = model("mixtral-8x7b"), ParallelSpec(dp=64, zero=3)
    plain = build_ledger(m, p, TrainSpec(), RuntimeSpec(loop="pytorch"))
    dim1 = build_ledger(m, p, TrainSpec(), RuntimeSpec(loop="pytorch",
                                                       fsdp_expert_shard="dim1-if-fewer"))
    name = next(i.name for i in plain.peak.items if "experts" in i.name and i.row == "weights")
    padded = next(i.bytes for i in plain.peak.items if i.name == name and i.row == "weights")
    even = next(i.bytes for i in dim1.peak.items if i.name == name and i.row == "weights")
    assert padded == 8 * even  # 1/8 of the tensor per rank, not 1/64
    assert plain.warnings and "8.0×" in plain.warnings[0]
    assert not dim1.warnings and "warnings" in plain.to_dict()


def test_reshard_after_forward_off_keeps_every_unit_beside_its_shard():
    m, t = model("llama3-8b"), TrainSpec(precision="fsdp2-mixed")
    p = ParallelSpec(dp=8, zero=3)
    kept = lambda rt: sum(i.bytes for i in build_ledger(m, p, t, rt).peak.items  # noqa: E731
                          if i.name.startswith("FSDP2 unsharded units"))
    assert kept(TITAN) == 0
    assert kept(replace(TITAN, fsdp_reshard_after_forward="never")) > 0.9 * 2 * 32 * 218e6 - 2e9


def test_torchtitan_turns_reshard_off_under_pp_and_holds_unsharded_grads_to_the_last_mb():
    m, t = model("llama3-8b"), TrainSpec(precision="fsdp2-mixed", micro_batches=8)
    p = ParallelSpec(dp=4, pp=2, zero=3)
    names = {i.name for i in build_ledger(m, p, t, TITAN).ranks[0].items}
    assert "FSDP2 unsharded units kept (reshard_after_forward=False)" in names
    assert "FSDP2 unsharded gradients to the last micro-batch (PP)" in names
    always = {i.name for i in build_ledger(m, p, t, replace(
        TITAN, fsdp_reshard_after_forward="always")).ranks[0].items}
    assert "FSDP2 unsharded units kept (reshard_after_forward=False)" not in always
    one_mb = {i.name for i in build_ledger(m, ParallelSpec(dp=4, pp=2, zero=3, schedule="gpipe"),
                                           replace(t, micro_batches=1), TITAN).ranks[0].items}
    assert "FSDP2 unsharded gradients to the last micro-batch (PP)" not in one_mb


@pytest.mark.parametrize("kw, field", [
    (dict(recompute="interval"), "recompute_every"),
    (dict(recompute="sometimes"), "recompute"),
    (dict(recompute_budget_pct=101), "recompute_budget_pct"),
    (dict(precision="fsdp3"), "precision"),
])
def test_bad_train_values_name_their_field(kw, field):
    with pytest.raises(SpecError) as e:
        TrainSpec(**kw)
    assert e.value.field == field


@pytest.mark.parametrize("kw, field", [
    (dict(fsdp_reshard_after_forward="sometimes"), "fsdp_reshard_after_forward"),
    (dict(torch_compile="yes"), "torch_compile"),
    (dict(fsdp_expert_shard="dim2"), "fsdp_expert_shard"),
    (dict(torchtitan_version="0.1"), "torchtitan_version"),
])
def test_bad_runtime_values_name_their_field(kw, field):
    with pytest.raises(SpecError) as e:
        RuntimeSpec(**kw)
    assert e.value.field == field


@pytest.mark.parametrize("kw, field", [
    (dict(precision="fsdp2-mixed"), "precision"),
    (dict(runtime=RuntimeSpec(torch_compile=True)), "torch_compile"),
    (dict(runtime=RuntimeSpec(fsdp_reshard_after_forward="never")), "fsdp_reshard_after_forward"),
])
def test_planner_refuses_what_it_does_not_vectorise(kw, field):
    with pytest.raises(SpecError) as e:
        PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8,), seq=4096,
                 global_batch=8, **kw)
    assert e.value.field == field


def test_share_links_carry_the_new_settings_and_old_links_open_unchanged():
    cfg = replace(DEFAULT, recompute="interval", recompute_every=2, reshard="never",
                  compile=True, loss_parallel=False, budget=30)
    back, issues = parse_params(to_params(cfg))
    assert back == cfg and not issues
    old = {"model": "llama3-8b", "tp": "2", "recompute": "full"}
    opened, issues = parse_params(old)
    assert not issues and to_params(opened) == old


def _titan_run(**train):
    t = TrainSpec(**{"seq": 8192, "precision": "fsdp2-mixed", "profile": "hf", "vocab_pad": 1,
                     **train})
    return model("llama3-8b"), t


@pytest.mark.parametrize("world", [8, 128])
def test_chunked_loss_holds_the_heads_fp32_gradient_and_its_reduce_scatter_input(world):
    # golden: what is alive above the forward's tensors at the peak of torchtitan's own run
    # (validate --engine torchtitan, llama3-8b op-ac, the last chunk's post-backward): the fp32
    # accumulated head gradient (128256, 4096), the fp32 reduce-scatter input (525336576,) and
    # output (525336576 / world,), the fp32 GradAccumulator (1, 8192, 4096) and one chunk's
    # bf16 logits (1024 × 128256)
    from memledger.ledger.chunked_loss import chunked_loss_transient
    from memledger.specs.loop import resolve_loop
    m, t = _titan_run(recompute="op")
    rt = RuntimeSpec(loop="torchtitan", loss="chunked", zero3_impl="fsdp")
    p = ParallelSpec(dp=world, zero=3)
    item = chunked_loss_transient(m, p, t, rt, resolve_loop(rt, "hf"), 1)
    assert item.bytes == (2 * 2_101_346_304 + 2_101_346_304 // world + 134_217_728
                          + 262_668_288)
    off = [(p, t, RuntimeSpec(loop="torchtitan", zero3_impl="fsdp"), 1),  # materialized loss
           (ParallelSpec(dp=world), t, rt, 1),  # no FSDP2: the head gradient is the row's
           (p, replace(t, precision="bf16"), rt, 1),  # not torchtitan as it runs
           (p, t, rt, 0)]  # the rank does not hold the head
    for p_, t_, rt_, last in off:
        assert chunked_loss_transient(m, p_, t_, rt_, resolve_loop(rt_, "hf"), last) is None


def test_torchtitans_rmsnorm_keeps_what_the_fused_cuda_kernel_keeps():
    from memledger.ledger.activations.held import kind_table
    m, t = _titan_run(seq=2048, recompute="none")
    p = ParallelSpec(dp=8, zero=3)
    fused, hf = kind_table(m, "dense", t, p, torchtitan=True), kind_table(m, "dense", t, p)
    names = {e.tensor.name for e in fused.entries}
    assert {"norm1.x", "norm1.rstd", "norm2.x", "norm2.rstd"} <= names
    assert not any(n.endswith(("x_fp32", "normed")) for n in names)
    # per norm: the bf16 input (2h) in place of its fp32 copy (4h) and the bf16 product (2h)
    assert hf.full_bytes - fused.full_bytes == 2 * 4 * m.hidden * 2048
    titan = build_ledger(m, p, t, RuntimeSpec(loop="torchtitan")).peak.rows["activations"]
    plain = build_ledger(m, p, t, RuntimeSpec(loop="pytorch")).peak.rows["activations"]
    # and torchtitan's RoPE multiplies by views of its cache: no cos / sin per micro-batch
    rope = 2 * 2048 * m.head_dim * 2  # the hf profile's bf16 cos and sin
    assert plain - titan == (32 * (hf.full_bytes - fused.full_bytes) + 4 * m.hidden * 2048
                             + rope)  # final norm


def test_torchtitan_auto_loss_is_the_materialised_one_and_03s_chunked_loss_is_asked_for():
    """--loop torchtitan alone models the TOML eras' cross_entropy_loss on full logits (the
    published runs); 0.3's ChunkedLossWrapper is --loss chunked (its dumped config says so)."""
    from memledger.specs.loop import resolve_loop
    for era in ("0.3", "0.2", "2025-06", "2024-12"):
        assert resolve_loop(RuntimeSpec(loop="torchtitan", torchtitan_version=era),
                            "hf").loss == "materialized"
    assert resolve_loop(RuntimeSpec(loop="torchtitan", loss="chunked"), "hf").loss == "chunked"


@pytest.mark.parametrize("version, gathered", [("0.3", True), ("0.2", False)])
def test_cp_blocks_that_keep_their_tensors_keep_the_gathered_k_v(version, gathered):
    """0.3's CP all-gathers K and V in every FlexAttention and indexes each layer's RoPE cache at
    the load-balanced positions: a block without AC keeps K, V cp × the local ones and the indexed
    cache (T × head_dim × 4 B). Llama 3 8B CP 2 at 16k tokens: 37.7 MB more per layer (the
    harness measured 37,740,544 B a layer the ledger missed before)."""
    train = TrainSpec(seq=16384, precision="fsdp2-mixed", profile="hf", vocab_pad=1,
                      recompute="none")
    items = lambda rt: {i.name: i.bytes for i in build_ledger(  # noqa: E731
        model("llama3-8b"), ParallelSpec(dp=4, cp=2, zero=3), train, rt).ranks[0].items
        if i.row == "activations"}
    local = 8192 * 1024 * 2 * 32  # T/cp tokens × kv dims × bf16 × layers
    acts = items(RuntimeSpec(loop="torchtitan", torchtitan_version=version))
    assert acts["dense layers / attn.k"] == (2 if gathered else 1) * local
    assert acts.get("dense layers / attn.rope_cache", 0) == (8192 * 128 * 4 * 32 if gathered
                                                              else 0)
    ckpt = {i.name for i in build_ledger(model("llama3-8b"), ParallelSpec(dp=4, cp=2, zero=3),
                                         replace(train, recompute="full"), TITAN).ranks[0].items}
    assert "dense layers / attn.rope_cache" not in ckpt  # a checkpointed block keeps its input
