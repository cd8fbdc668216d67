"""peft's LoRA on tiny transformers models (CPU): the `hf-cpu` profile under TrainSpec.finetune
predicts, byte for byte per layer, what autograd saves (memledger.trace), and the ledger's
weights / gradients / optimizer rows equal the parameters peft leaves trainable.

The models are built from configs (random init, nothing downloaded) in bf16, as plain peft
runs them: the frozen embedding's output needs no gradient, so layer 0's norm keeps nothing;
the ledger counts that pair where the final norm's would be (activations/finetune.py), so
layer 0 and the outside are compared through their sum. With `enable_input_require_grads()`
(HF Trainer + gradient checkpointing) layer 0 keeps the pair: 4h + 4 bytes per token more
than the ledger (test below). Outside the layers the
profile's documented constants (4-byte loss weight, 8 padded label bytes) are added as in
tests/test_hf_profile.py. The QLoRA case measures torchao's NF4Tensor storage.
"""
from __future__ import annotations

import pytest

from memledger import build_ledger
from memledger.ledger.activations import get_profile
from memledger.specs import ParallelSpec, TrainSpec
from memledger.specs.finetune import FinetuneSpec

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
from test_hf_profile import LARGE, SMALL, build, predicted  # noqa: E402

from memledger.trace import trace_causal_lm  # noqa: E402

pytestmark = pytest.mark.torch
transformers.logging.set_verbosity_error()
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# (arch, dims, targets, dropout, enable_input_require_grads)
CASES = [("llama", SMALL, ["q_proj", "v_proj"], 0.0, False),
         ("llama", SMALL, ALL, 0.1, True),
         ("llama", SMALL, ALL, 0.1, False),
         ("llama", LARGE, ["o_proj", "down_proj"], 0.0, True),
         ("qwen3moe", LARGE, ["q_proj", "k_proj", "v_proj", "o_proj"], 0.05, True),
         ("qwen3moe", LARGE, ["q_proj", "v_proj"], 0.0, False),
         ("mixtral", SMALL, ["q_proj", "v_proj", "o_proj"], 0.0, False)]
QKV = ("q_proj", "k_proj", "v_proj")


def _peft(arch, d, targets, dropout, r=8, input_grads=False):
    cfg, m = build(arch, d)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model = peft.get_peft_model(model.to(torch.bfloat16), peft.LoraConfig(
        r=r, lora_alpha=r, target_modules=targets, lora_dropout=dropout))
    if input_grads:
        model.enable_input_require_grads()
    ft = FinetuneSpec(mode="lora", lora_rank=r, lora_targets=tuple(targets),
                      lora_dropout_pct=round(dropout * 100))
    t = TrainSpec(micro_batch=d["b"], seq=d["s"], precision="bf16", profile="hf-cpu",
                  optimizer="adamw", finetune=ft)
    return model, m, t


@pytest.mark.parametrize("arch,d,targets,dropout,input_grads", CASES)
def test_lora_saved_tensors_match_trace(arch, d, targets, dropout, input_grads):
    """Layers 1.. exactly; layer 0 and the outside through their sum, off by what the rules
    say they ignore: with enable_input_require_grads layer 0 keeps its norm pair (the ledger
    drops the final norm's), without it layer 0's q/k/v adapters keep no dropout mask and
    Qwen3's q/k norm after a projection without adapter keeps nothing."""
    model, m, t = _peft(arch, d, targets, dropout, input_grads=input_grads)
    tr = trace_causal_lm(model, d["b"], d["s"])
    layers, outside = predicted(get_profile("hf-cpu"), m, t)
    got, tokens = tr.layer_bytes(), d["b"] * d["s"]
    pair = (4 * m.hidden + 4) * tokens  # an RMSNorm's fp32 input + rstd
    assert {i: v for i, v in got.items() if i} == {i: v for i, v in layers.items() if i}
    masks = sum(q in targets for q in QKV) * 4 * m.hidden * tokens if dropout else 0
    if m.qk_norm:  # q/k norms after a projection without adapter: no gradient flows there
        heads = {"q_proj": m.n_heads, "k_proj": m.n_kv_heads}
        masks += sum((4 * n * m.head_dim + 4 * n) * tokens for q, n in heads.items()
                     if q not in targets)
    if input_grads:
        assert got[0] == layers[0] and tr.outside_bytes == outside + pair
    else:
        assert got[0] == layers[0] - pair - masks and tr.outside_bytes == outside + pair
    assert tr.total_bytes == sum(layers.values()) + outside + (pair if input_grads else -masks)


def test_lora_without_qkv_targets_over_counts_layer_0():
    """Targets only o_proj / down_proj and a frozen embedding: layer 0's attention keeps
    nothing in PyTorch; the ledger counts it as a live layer (a documented limit)."""
    arch, d = "llama", LARGE
    model, m, t = _peft(arch, d, ["o_proj", "down_proj"], 0.0)
    tr = trace_causal_lm(model, d["b"], d["s"])
    layers, outside = predicted(get_profile("hf-cpu"), m, t)
    got = tr.layer_bytes()
    assert {i: v for i, v in got.items() if i} == {i: v for i, v in layers.items() if i}
    assert got[0] < layers[0]


@pytest.mark.parametrize("arch,d,targets,dropout,input_grads", CASES)
def test_lora_static_rows_match_peft_parameters(arch, d, targets, dropout, input_grads):
    model, m, t = _peft(arch, d, targets, dropout)
    # bf16 base (fp32 routers excepted by the HF model) + fp32 adapters (peft's autocast)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert all(p.dtype == torch.float32 for p in trainable)
    n = sum(p.numel() for p in trainable)
    rows = build_ledger(m, ParallelSpec(), t).peak.rows
    assert rows["weights"] == weights
    assert rows["gradients"] == 4 * n  # fp32 .grad of each fp32 adapter
    assert rows["optimizer"] == 8 * n  # AdamW exp_avg + exp_avg_sq, fp32; the adapter is its master


def test_qlora_nf4_storage_matches_torchao():
    """torchao's NF4Tensor (block 64, scalers double-quantised in blocks of 256): 4 bits per
    value + one int8 scaler per 64 values + one constant per 256 scalers. torchao keeps the
    second-level constants in the input dtype (2 bytes) where bitsandbytes and the QLoRA paper
    keep fp32 (4): the ledger models bitsandbytes, so it is above torchao by n/16384 x 2
    bytes plus torchao's 34 per-tensor bytes; both within 0.05 %."""
    nf4 = pytest.importorskip("torchao.quantization.quantize_.workflows.nf4.nf4_tensor")
    from memledger.units import format_bytes
    for rows, cols in ((4096, 1024), (1024, 14336), (8192, 8192)):
        w = torch.randn(rows, cols, dtype=torch.bfloat16)
        q = nf4.to_nf4(w, 64, 256)
        got = sum(getattr(q, k).numel() * getattr(q, k).element_size()
                  for k in q.__tensor_flatten__()[0])
        want = format_bytes("nf4:64:256", rows * cols)
        assert abs(want - got) / got < 5e-4, (rows, cols, want, got)
        assert want == rows * cols // 2 + rows * cols // 64 + 4 * (rows * cols // 64 // 256)
