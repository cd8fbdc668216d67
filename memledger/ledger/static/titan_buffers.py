"""torchtitan's model buffers beside the parameters (the weights row): RoPE caches and the MoE
layers' expert-load counters.

torchtitan 0.3 gives every attention layer its own RoPE module, whose `cache` buffer is
precomputed for `max_seq_len`, resized to `training.seq_len` before the model is built
(models/common/rope.py `RoPE.__init__` register_buffer("cache"); models/common/decoder.py
`update_from_config`), replicated over TP and CP (decoder_sharding.py: `cache` Replicate):
  ComplexRoPE (Llama 3, DeepSeek-V3)   (seq, d/2) complex64 = seq · d · 4 B per layer
  CosSinRoPE  (Qwen3)                   (seq, 2d)  fp32      = seq · d · 8 B per layer
d = the rotary dimension (head_dim; MLA: qk_rope_dim). Older eras keep one `freqs_cis`
((seq, d/2) complex64) per model chunk (torchtitan 0.2 / 2024 models/llama3/model.py).
Each MoE layer also keeps `tokens_per_expert_E` and, with the default load_balance_coeff 1e-3,
`expert_bias_E`: 2 × E × fp32 (models/common/moe.py `MoE.__init__`).
Measured: every `validate --engine torchtitan` case without PP holds exactly these bytes before
its forward, beside its parameters, optimizer states and token ids (8B at 65,536 tokens:
32 × 33.5 MB of RoPE caches).
Ignores: RoPE forms of other torchtitan models; a Qwen3 model is recognised by its qk-norm
without MLA (the torchtitan models with a cos/sin cache).
"""
from __future__ import annotations

from memledger.ledger.fsdp2 import torchtitan_runs
from memledger.ledger.items import Item
from memledger.ledger.torchtitan_eras import era
from memledger.model.params import layer_kind

NAME = "RoPE cache buffers (torchtitan)"
MOE_NAME = "MoE expert-load buffers (torchtitan)"
NAMES = (NAME, MOE_NAME)
SRC = ("torchtitan 0.3 models/common/rope.py (ComplexRoPE, CosSinRoPE: one cache per attention "
       "layer), models/common/decoder.py update_from_config (max_seq_len = training.seq_len); "
       "older eras: one freqs_cis per model (models/llama3/model.py)")


def rope_form(m) -> tuple[int, int, str]:
    """(rotary dim d, bytes per position per d, form)."""
    if m.mla is not None:
        return m.mla.qk_rope_dim, 4, "complex64 (seq, d/2)"
    if m.qk_norm:
        return m.head_dim, 8, "fp32 cos/sin (seq, 2d)"
    return m.head_dim, 4, "complex64 (seq, d/2)"


def buffer_items(m, t, rt, loop, place) -> list[Item]:
    if not torchtitan_runs(t, loop) or not place.layers:
        return []
    d, per, form = rope_form(m)
    caches = len(place.layers) if era(rt).rope_per_layer else len(place.stages)
    one = t.seq * d * per
    what = "attention layers on this rank" if era(rt).rope_per_layer else "model chunks on this rank"
    out = [Item("weights", NAME, caches * one,
                f"{caches} {what} × seq {t.seq} × d {d} × {per} B ({form})", SRC)]
    moe_layers = sum(1 for i in place.layers if layer_kind(m, i) == "moe")
    if moe_layers:
        e = m.moe.n_experts
        out.append(Item("weights", MOE_NAME, moe_layers * 2 * e * 4,
                        f"{moe_layers} MoE layers × (tokens_per_expert + expert_bias) × E {e} × fp32",
                        "torchtitan 0.3 models/common/moe.py MoE.__init__ (register_buffer)"))
    return out
