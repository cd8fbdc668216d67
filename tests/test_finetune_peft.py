"""peft's LoRA on tiny transformers models (CPU): the `hf-cpu` profile under TrainSpec.finetune
predicts, byte for byte per layer, what autograd saves (memledger.trace), and the ledger's
weights / gradients / optimizer rows equal the parameters peft leaves trainable.

The models are built from configs (random init, nothing downloaded) in bf16, with
`enable_input_require_grads()` (what HF Trainer and peft's prepare_model_for_kbit_training do),
the case the activation rules assume (activations/finetune.py). Outside the layers the
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
CASES = [("llama", SMALL, ["q_proj", "v_proj"], 0.0), ("llama", SMALL, ALL, 0.1),
         ("llama", LARGE, ["o_proj", "down_proj"], 0.0),
         ("qwen3moe", LARGE, ["q_proj", "k_proj", "v_proj", "o_proj"], 0.05),
         ("mixtral", SMALL, ["q_proj", "v_proj", "o_proj"], 0.0)]


def _peft(arch, d, targets, dropout, r=8):
    cfg, m = build(arch, d)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model = peft.get_peft_model(model.to(torch.bfloat16), peft.LoraConfig(
        r=r, lora_alpha=r, target_modules=targets, lora_dropout=dropout))
    model.enable_input_require_grads()
    ft = FinetuneSpec(mode="lora", lora_rank=r, lora_targets=tuple(targets),
                      lora_dropout_pct=round(dropout * 100))
    t = TrainSpec(micro_batch=d["b"], seq=d["s"], precision="bf16", profile="hf-cpu",
                  optimizer="adamw", finetune=ft)
    return model, m, t


@pytest.mark.parametrize("arch,d,targets,dropout", CASES)
def test_lora_saved_tensors_match_trace(arch, d, targets, dropout):
    model, m, t = _peft(arch, d, targets, dropout)
    tr = trace_causal_lm(model, d["b"], d["s"])
    layers, outside = predicted(get_profile("hf-cpu"), m, t)
    assert tr.layer_bytes() == layers
    assert tr.outside_bytes == outside


@pytest.mark.parametrize("arch,d,targets,dropout", CASES)
def test_lora_static_rows_match_peft_parameters(arch, d, targets, dropout):
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
