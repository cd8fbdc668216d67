"""Each currency in exact numbers: quantised bytes (scales included), recompute FLOPs by hand,
and the ledger's bookkeeping of what every policy saved."""
from dataclasses import replace

import pytest

from memledger import ModelSpec, ParallelSpec, TrainSpec, build_ledger, model
from memledger.presets.policies import POLICY_PRESETS, apply_policy
from memledger.specs.policy import ActivationPolicy

L8B = model("llama3-8b")  # h = 4096, f = 14336 (fc1 out 2f = 28672 values / token), 32 heads


def _rank0(m, t, p=ParallelSpec()):
    return build_ledger(m, p, t).ranks[0]


def _move(r, tensor):
    return next(mv for mv in r.moves if mv.tensor == tensor)


def _policy(**rules):
    return ActivationPolicy.from_mapping(rules)


# 4096 tokens × 28672 values: bf16 2 B/value; fp8 1 B + one fp32 scale per 128 values per row;
# int8 the same layout; int4 half a byte + one bf16 scale per 64 values (units.FORMATS).
@pytest.mark.parametrize("fmt, bytes_per_row", [
    (None, 28672 * 2),                    # 57344
    ("fp8", 28672 + 28672 // 128 * 4),    # 28672 + 896 = 29568
    ("int8", 28672 + 28672 // 128 * 4),   # 29568
    ("int4", 28672 // 2 + 28672 // 64 * 2),  # 14336 + 896 = 15232
])
def test_fc1_output_bytes_per_format_include_the_scales(fmt, bytes_per_row):
    t = TrainSpec(seq=4096, policy=_policy(mlp_fc1=fmt) if fmt else ActivationPolicy())
    mv = _move(_rank0(L8B, t), "mlp.fc1_out")
    assert mv.stored_bytes == 4096 * bytes_per_row
    assert mv.gpu_total == 32 * 4096 * bytes_per_row  # 32 layers, one micro-batch in flight


def test_scales_never_straddle_rows():
    """attn.lse: 32 fp32 values per token → fp8: 32 bytes + one 4-byte scale per row (36),
    not ceil(4096·32/128) scales over the flattened tensor."""
    mv = _move(_rank0(L8B, TrainSpec(seq=4096, policy=_policy(attn_core="fp8"))), "attn.lse")
    assert mv.native_bytes == 4096 * 32 * 4
    assert mv.stored_bytes == 4096 * 36
    assert mv.bits_lost == 23 - 3  # fp32 mantissa → e4m3 mantissa


def test_bf16_to_fp8_loses_four_mantissa_bits_and_int4_too():
    r = _rank0(L8B, TrainSpec(seq=4096, policy=_policy(mlp_fc1="fp8", mlp_act="int4")))
    assert _move(r, "mlp.fc1_out").bits_lost == 7 - 3
    assert _move(r, "mlp.act_out").bits_lost == 7 - 3


def test_integer_tensors_are_never_quantised():
    m = model("mixtral-8x7b")
    r = _rank0(m, TrainSpec(seq=1024, policy=_policy(router="int4")))
    idx, logits = _move(r, "moe.topk_idx"), _move(r, "moe.aux_scores")
    assert idx.stored_bytes == idx.native_bytes and idx.policy == "keep"
    assert logits.stored_bytes < logits.native_bytes and logits.policy == "int4"


TINY = ModelSpec(name="tiny", n_layers=2, hidden=64, n_heads=4, n_kv_heads=4, head_dim=16,
                 ffn_hidden=128, vocab=0)


def test_recompute_flops_on_a_tiny_model_by_hand():
    """h = 64, f = 128 (SwiGLU), 8 tokens, 2 layers, 3 micro-batches per step.
    SwiGLU output: 4·f = 512 FLOPs/token → 8 tokens → 4096 per layer, 8192 per micro-batch.
    fc1 output: 2·h·2f = 32768 FLOPs/token → 262144 per layer."""
    t = TrainSpec(seq=8, micro_batches=3, policy=_policy(mlp_act="recompute", mlp_fc1="recompute"))
    r = _rank0(TINY, t)
    act, fc1 = _move(r, "mlp.act_out"), _move(r, "mlp.fc1_out")
    assert act.recompute_flops == 4096 and act.recompute_flops_per_micro_batch == 8192
    assert fc1.recompute_flops == 262144
    assert act.gpu_total == 0 and act.saved_bytes == act.native_bytes * 2


def test_full_recompute_reruns_each_layer_forward_by_hand():
    """Matrices: qkv 64·(4+2·4)·16 = 12288, o 4096, fc1 64·256 = 16384, fc2 8192 → 40960 params;
    2 × 40960 + causal attention a·s·(dqk+dv) = 4·8·32 = 1024 → 82944 FLOPs/token × 8 tokens
    = 663552 per layer, × 2 layers = 1327104 per micro-batch."""
    r = _rank0(TINY, TrainSpec(seq=8, recompute="full"))
    assert sum(mv.recompute_flops_per_micro_batch for mv in r.moves) == 1_327_104


def test_offloaded_tensors_leave_the_gpu_but_not_the_ledger():
    t = TrainSpec(seq=4096, micro_batches=4, policy=_policy(mlp_fc1="fp8+offload-cpu"))
    r = _rank0(L8B, t)
    mv = _move(r, "mlp.fc1_out")
    assert mv.gpu_total == 0 and mv.host_bytes == 32 * 4096 * 29568
    assert mv.host_bytes_per_micro_batch == 32 * 4096 * 29568  # 32 layers per micro-batch
    staging = next(i for i in r.items if i.name == "offload staging buffers")
    assert staging.bytes == 2 * 4096 * 29568  # two layers' offloaded bytes


@pytest.mark.parametrize("preset", sorted(POLICY_PRESETS))
def test_saved_bytes_account_for_every_byte_of_the_activation_row(preset):
    """Σ saved over the moves = (activations keeping everything) − (activations under the policy),
    staging buffers aside."""
    m, p = model("deepseek-v3"), ParallelSpec(tp=8, pp=4, ep=8, dp=8, sp=True, layout=(15, 16, 16, 14))
    base = TrainSpec(seq=4096, micro_batches=8)
    keep, pol = build_ledger(m, p, base), build_ledger(m, p, apply_policy(base, preset))
    for a, b in zip(keep.ranks, pol.ranks):
        staging = sum(i.bytes for i in b.row_items("activations") if "staging" in i.name)
        assert sum(mv.saved_bytes for mv in b.moves) == a.rows["activations"] - (
            b.rows["activations"] - staging)


def test_kimi_k2_keeps_only_fp8_tensors_and_token_ids_on_the_gpu():
    m, p = model("kimi-k2"), ParallelSpec(tp=8, pp=4, ep=8, dp=8, sp=True, layout=(15, 16, 16, 14))
    led = build_ledger(m, p, apply_policy(TrainSpec(seq=4096, micro_batches=8), "kimi-k2"))
    on_gpu = {(mv.cls, mv.policy) for r in led.ranks for mv in r.moves if mv.gpu_total}
    assert on_gpu <= {("expert_in", "fp8"), ("expert_fc1", "fp8"), ("embedding", "keep")}


def test_deepseek_fp8_preset_shrinks_deepseek_v3_activations_by_more_than_half():
    m, p = model("deepseek-v3"), ParallelSpec(tp=8, pp=4, ep=8, dp=8, sp=True, layout=(15, 16, 16, 14))
    base = TrainSpec(seq=4096, micro_batches=8)
    a = build_ledger(m, p, base).ranks[1].rows["activations"]
    b = build_ledger(m, p, apply_policy(base, "deepseek-v3-fp8")).ranks[1].rows["activations"]
    assert b < a / 2


def test_recompute_of_a_tensor_without_producer_is_refused_in_the_move():
    r = _rank0(L8B, TrainSpec(seq=1024, policy=_policy(norm_in="recompute")))
    mv = _move(r, "norm1.input")
    assert mv.gpu_total == mv.native_bytes * mv.copies and "no producer" in mv.formula


def test_policy_rules_override_selective_recompute():
    t = TrainSpec(seq=2048, recompute="selective")
    kept = replace(t, policy=_policy(attn_core="keep"))
    assert _move(_rank0(L8B, t), "attn.lse").gpu_total == 0
    assert _move(_rank0(L8B, kept), "attn.lse").gpu_total > 0
