"""Validation cases as data, and the ledger's prediction for each (pure; no torch here).

A case is a Hugging Face config (model_type + dims) trained for one step on one GPU: micro-batch
b × sequence s, m micro-batches all held before the first backward (GPipe order, as the ledger's
pp = 1 gpipe schedule assumes), a precision recipe, an optimizer, attention kernel and recompute.
Models are scaled-down members of real families (Llama, Mixtral, Qwen3-MoE, DeepSeek-V3) so
that a dozen cases run in minutes; every dimension the ledger reads is exercised.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from memledger.ledger import build_ledger
from memledger.model.hf_config import from_hf_config
from memledger.specs import ParallelSpec, TrainSpec
from memledger.specs.finetune import FinetuneSpec
from memledger.specs.runtime import RuntimeSpec

VOCAB = 32000


def llama(hidden=2048, layers=16, heads=16, kv=8, ffn=5632, vocab=VOCAB, tied=False):
    return {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": ffn,
            "vocab_size": vocab, "tie_word_embeddings": tied, "rms_norm_eps": 1e-5,
            "max_position_embeddings": 16384, "hidden_act": "silu"}


def mixtral(hidden=1024, layers=8, heads=16, kv=8, ffn=2816, experts=8, k=2):
    return {"model_type": "mixtral", "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": ffn,
            "num_local_experts": experts, "num_experts_per_tok": k, "vocab_size": VOCAB,
            "max_position_embeddings": 16384, "hidden_act": "silu", "router_jitter_noise": 0.0}


def qwen3_moe(hidden=1024, layers=8, heads=16, kv=4, experts=32, k=4, moe_ffn=384):
    return {"model_type": "qwen3_moe", "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 128,
            "intermediate_size": 3072, "moe_intermediate_size": moe_ffn, "num_experts": experts,
            "num_experts_per_tok": k, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "norm_topk_prob": True, "vocab_size": VOCAB, "max_position_embeddings": 16384,
            "hidden_act": "silu", "tie_word_embeddings": False}


def deepseek_v3(hidden=1024, layers=6, heads=16, experts=16, k=4, moe_ffn=512):
    return {"model_type": "deepseek_v3", "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": heads, "intermediate_size": 2816,
            "moe_intermediate_size": moe_ffn, "n_routed_experts": experts,
            "num_experts_per_tok": k, "n_shared_experts": 1, "first_k_dense_replace": 1,
            "moe_layer_freq": 1, "q_lora_rank": 384, "kv_lora_rank": 256, "qk_rope_head_dim": 32,
            "qk_nope_head_dim": 64, "v_head_dim": 64, "n_group": 4, "topk_group": 2,
            "routed_scaling_factor": 2.5, "norm_topk_prob": True, "vocab_size": VOCAB,
            "max_position_embeddings": 16384, "hidden_act": "silu", "tie_word_embeddings": False,
            "rope_scaling": None}


@dataclass(frozen=True, kw_only=True)
class Case:
    name: str
    config: dict = field(hash=False, compare=False)
    seq: int = 2048
    micro_batch: int = 1
    micro_batches: int = 1
    precision: str = "bf16"  # bf16 | mixed16 | amp
    optimizer: str = "adamw"  # adamw | muon
    attention: str = "flash"  # flash (sdpa) | eager
    recompute: str = "none"  # none | full
    finetune: FinetuneSpec = FinetuneSpec()  # peft LoRA / frozen modules (measure.apply_finetune)

    def train(self, device: str = "cuda") -> TrainSpec:
        return TrainSpec(micro_batch=self.micro_batch, seq=self.seq, micro_batches=self.micro_batches,
                         precision=self.precision, optimizer=self.optimizer,
                         profile="hf" if device == "cuda" else "hf-cpu",
                         attention=self.attention, recompute=self.recompute,
                         finetune=self.finetune)


GPU_CASES: tuple[Case, ...] = (
    Case(name="llama-0.6b bf16 s2k", config=llama()),
    Case(name="llama-0.6b bf16 s8k", config=llama(), seq=8192),
    Case(name="llama-0.6b bf16 s8k full-recompute", config=llama(), seq=8192, recompute="full"),
    Case(name="llama-0.6b bf16 s4k m=4 held", config=llama(), seq=4096, micro_batches=4),
    Case(name="llama-0.6b amp s4k", config=llama(), seq=4096, precision="amp"),
    Case(name="llama-0.6b mixed16 s4k", config=llama(), seq=4096, precision="mixed16"),
    Case(name="llama-0.6b amp s4k full-recompute", config=llama(), seq=4096, precision="amp",
         recompute="full"),
    Case(name="llama-0.6b bf16 muon s4k", config=llama(), seq=4096, optimizer="muon"),
    Case(name="llama-0.6b bf16 eager s2k", config=llama(), attention="eager"),
    Case(name="llama-3.2-1b-dims bf16 s4k b2", config=llama(2048, 16, 32, 8, 8192, 128256, True),
         seq=4096, micro_batch=2),
    Case(name="mixtral-small bf16 s4k", config=mixtral(), seq=4096),
    Case(name="mixtral-small bf16 s4k full-recompute", config=mixtral(), seq=4096, recompute="full"),
    Case(name="mixtral-small bf16 eager s2k", config=mixtral(), attention="eager"),
    Case(name="qwen3-moe-small bf16 s4k", config=qwen3_moe(), seq=4096),
    Case(name="qwen3-moe-small amp s2k m=2", config=qwen3_moe(), micro_batches=2, precision="amp"),
    Case(name="deepseek-v3-small bf16 s2k", config=deepseek_v3()),
    Case(name="deepseek-v3-small bf16 s4k m=2", config=deepseek_v3(), seq=4096, micro_batches=2),
    Case(name="deepseek-v3-small bf16 s4k full-recompute", config=deepseek_v3(), seq=4096,
         recompute="full"),
)

# Tiny versions of each family for CPU runs inside the test suite (seconds, not minutes).
CPU_CASES: tuple[Case, ...] = (
    Case(name="llama-tiny bf16", config=llama(256, 2, 4, 2, 704, 1024), seq=128),
    Case(name="llama-tiny amp m=2", config=llama(256, 2, 4, 2, 704, 1024), seq=128,
         micro_batches=2, precision="amp"),
    Case(name="mixtral-tiny bf16", config={**mixtral(256, 2, 4, 2, 512, 4, 2), "vocab_size": 1024},
         seq=128),
    Case(name="qwen3-moe-tiny bf16", config={**qwen3_moe(256, 2, 4, 2, 8, 2, 128), "head_dim": 64,
                                              "vocab_size": 1024}, seq=128),
    Case(name="deepseek-v3-tiny bf16", config={**deepseek_v3(256, 2, 4, 8, 2, 128),
                                                "q_lora_rank": 96, "kv_lora_rank": 64,
                                                "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
                                                "v_head_dim": 32, "n_group": 2, "topk_group": 1,
                                                "vocab_size": 1024}, seq=128),
)


_LLAMA_T = llama(256, 4, 4, 2, 704, 1024)
_QWEN_T = {**qwen3_moe(256, 4, 4, 2, 8, 2, 128), "head_dim": 64, "vocab_size": 1024}
_MIXTRAL_T = {**mixtral(256, 4, 4, 2, 512, 4, 2), "vocab_size": 1024}
_ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Fine-tuning on the CPU (peft 0.21 LoRA, requires_grad=False freezing): validation/
# validation-finetune-cpu.json. Four layers, so that layer 0 (whose input needs no gradient
# under a frozen embedding) is one layer in four.
FINETUNE_CPU_CASES: tuple[Case, ...] = (
    Case(name="llama-tiny lora q,v r8", config=_LLAMA_T, seq=128,
         finetune=FinetuneSpec(mode="lora")),
    Case(name="llama-tiny lora all-linear r16 dropout", config=_LLAMA_T, seq=128, micro_batches=2,
         finetune=FinetuneSpec(mode="lora", lora_rank=16, lora_alpha=32, lora_targets=_ALL,
                               lora_dropout_pct=5)),
    Case(name="llama-tiny lora attention r32 b2", config=_LLAMA_T, seq=96, micro_batch=2,
         finetune=FinetuneSpec(mode="lora", lora_rank=32, lora_targets=("attention",))),
    Case(name="llama-tiny freeze embeddings+attention", config=_LLAMA_T, seq=128,
         finetune=FinetuneSpec(mode="freeze", freeze=("embeddings", "attention"))),
    Case(name="llama-tiny freeze embeddings+layers 0-1 (LLaMA-Factory freeze)", config=_LLAMA_T,
         seq=128, finetune=FinetuneSpec(mode="freeze", freeze=("embeddings", "layers:0-1"))),
    Case(name="llama-tiny lora q,v on layers 2-3 only", config=_LLAMA_T, seq=128,
         finetune=FinetuneSpec(mode="lora", freeze=("layers:0-1",))),
    Case(name="llama-tiny freeze head+norms+mlp", config=_LLAMA_T, seq=128,
         finetune=FinetuneSpec(mode="freeze", freeze=("head", "norms", "mlp"))),
    Case(name="qwen3-moe-tiny lora attention dropout", config=_QWEN_T, seq=128,
         finetune=FinetuneSpec(mode="lora", lora_targets=("attention",), lora_dropout_pct=10)),
    Case(name="qwen3-moe-tiny freeze experts+router", config=_QWEN_T, seq=128,
         finetune=FinetuneSpec(mode="freeze", freeze=("experts", "router"))),
    Case(name="mixtral-tiny lora q,v,o", config=_MIXTRAL_T, seq=128,
         finetune=FinetuneSpec(mode="lora", lora_targets=("q_proj", "v_proj", "o_proj"))),
    Case(name="llama-tiny lora all-linear r16 8 layers dropout", config=llama(256, 8, 4, 2, 704, 1024),
         seq=128, finetune=FinetuneSpec(mode="lora", lora_rank=16, lora_targets=_ALL,
                                        lora_dropout_pct=5)),
)


def predict(case: Case, device: str = "cuda"):
    """The ledger for a case: one GPU, no context/slack (allocated bytes only), and the loop the
    measurement runs (measure.Stepper): the transformers model and its loss, fused AdamW,
    zero_grad(set_to_none=False) — persistent gradients — and mixed16's per-tensor fp32 cast."""
    model = from_hf_config(case.config, name=case.name)
    parallel = ParallelSpec(schedule="gpipe")
    runtime = RuntimeSpec(cuda_context_bytes=0, allocator_slack_pct=0, nccl_channels=0,
                          loop="pytorch", grad_lifetime="persistent", optimizer_impl="fused")
    return build_ledger(model, parallel, case.train(device), runtime)


def cases_named(names: list[str] | None,
                pool=GPU_CASES + CPU_CASES + FINETUNE_CPU_CASES) -> tuple[Case, ...]:
    return pick_named(names, pool, "case")


def pick_named(names: list[str] | None, pool: tuple, what: str) -> tuple:
    """The cases of `pool` called `names` (all of them when none), in that order; SpecError
    naming the unknown ones and the valid names."""
    if not names:
        return pool
    by_name = {c.name: c for c in pool}
    missing = [n for n in names if n not in by_name]
    if missing:
        from memledger.errors import SpecError
        raise SpecError("cases", f"unknown {what}(s) {missing}; valid: {', '.join(by_name)}")
    return tuple(by_name[n] for n in names)


def with_seq(case: Case, seq: int) -> Case:
    return replace(case, seq=seq)
