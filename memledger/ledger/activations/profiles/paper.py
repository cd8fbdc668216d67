"""The `paper` profile: Korthikanti et al. 2022 (arXiv 2205.05198) §4, GPT layers with dropout
and no flash attention: sbh(34 + 5as/h) per layer; with TP sbh(10 + 24/t + 5as/(ht)); with SP
everything ÷t; selective recompute drops the 5as²b attention-core terms; full recompute keeps
the 2sbh layer input. Generalised to GQA (K, V of g·dh) and SwiGLU (fc1 of 2f) so other models
can be run through it; with the paper's models it is the paper's formula exactly.
Outside the layers (§4.3): embedding dropout mask on the first stage; final-norm input, head
input and fp32 logits (4sbv/t) on the last stage. With vocab = 0 (Figure 1) none of them.
"""
from __future__ import annotations

from memledger.ledger.activations.inventory import ActTensor as A
from memledger.ledger.activations.profiles.megatron import _vocab
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec


class PaperProfile:
    name = "paper"
    selective = frozenset({"attn_core"})

    def layer(self, m: ModelSpec, kind: str, t: TrainSpec, p: ParallelSpec) -> tuple[A, ...]:
        h, a, g, dh, s = m.hidden, m.n_heads, m.n_kv_heads, m.head_dim, t.seq
        f = m.moe.expert_ffn * m.moe.top_k if kind == "moe" else m.ffn_hidden
        fc1 = 2 * f if m.mlp == "swiglu" else f
        return (
            A("ln1.input", "norm_in", h),
            A("attn.qkv_in", "norm_out", h),
            A("attn.q", "qkv", a * dh, split="tp", flops=2 * h * a * dh),
            A("attn.k", "qkv", g * dh, split="tp", flops=2 * h * g * dh),
            A("attn.v", "qkv", g * dh, split="tp", flops=2 * h * g * dh),
            A("attn.softmax_out", "attn_core", a * s, split="tp", flops=2 * a * s * dh),
            A("attn.dropout_mask", "attn_core", a * s, "uint8", split="tp", flops=a * s),
            A("attn.dropout_out", "attn_core", a * s, split="tp", flops=a * s),
            A("attn.proj_in", "attn_out", a * dh, split="tp", flops=2 * a * s * dh),
            A("attn.out_dropout_mask", "dropout", h, "uint8"),
            A("ln2.input", "norm_in", h),
            A("mlp.in", "norm_out", h),
            A("mlp.fc1_out", "mlp_fc1", fc1, split="tp", flops=2 * h * fc1),
            A("mlp.act_out", "mlp_act", f, split="tp", flops=8 * f),
            A("mlp.dropout_mask", "dropout", h, "uint8"),
        )

    def first_stage(self, m, t, p) -> tuple[A, ...]:
        return (A("embedding.dropout_mask", "dropout", m.hidden, "uint8"),) if m.vocab else ()

    def last_stage(self, m, t, p) -> tuple[A, ...]:
        if not m.vocab:
            return ()
        v = _vocab(m, t, p)
        return (A("final_ln.input", "norm_in", m.hidden), A("head.input", "norm_out", m.hidden),
                A("loss.logits", "logits", v, "fp32", split="tp", flops=2 * m.hidden * v))

    def layer_input(self, m, t, p) -> A:
        return A("layer.input", "layer_input", m.hidden)

    def transients(self, m, t, p) -> tuple[A, ...]:
        if not m.vocab:
            return ()
        return (A("logits.grad", "logits", _vocab(m, t, p), "fp32", split="tp"),)
