"""Parameter groups of a model: what one layer (dense or MoE), the embedding and the head hold.

Counts follow the Hugging Face / Megatron-Core module definitions (docs/design.md §4):
attention h·a·dh + 2·h·g·dh + a·dh·h (+ biases, + q/k norms), SwiGLU 3·h·f, GeLU 2·h·f,
MoE E·3·h·fe + shared + router h·E, MLA h·qr + qr + qr·a·(dn+dr) + h·(kvr+dr) + kvr
+ kvr·a·(dn+dv) + a·dv·h. DeepSeek-V3's router correction bias (E values) is a buffer, not a
parameter: see `n_router_bias`. Each group names its sharding rule (a key of `memledger.ledger.static.sharding`)
and whether it is a 2-D hidden matrix (Muon, fp8, Adafactor factoring act on those).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from memledger.specs.model import ModelSpec


@dataclass(frozen=True)
class ParamGroup:
    name: str
    count: int  # parameters in one layer instance, unsharded
    shard: str  # "tp" | "replicated" | "vocab" | "expert"
    matrix: bool  # a 2-D hidden matrix (not embedding/head, not a vector)
    rows: int = 1  # shape of one matrix of the group (for factored states and gathers)
    cols: int = 1
    fp32: bool = False  # kept in fp32 whatever the recipe (HF DeepSeek-V3 router, fp32 adapters)
    frozen: bool = False  # requires_grad=False: no gradient, no optimizer state (fine-tuning)
    store: str | None = None  # storage format other than the recipe's (a quantised base)

    @property
    def expert(self) -> bool:
        return self.shard == "expert"


def _mat(name, rows, cols, shard, n=1):
    return ParamGroup(name, n * rows * cols, shard, True, rows, cols)


def _vec(name, n, shard="replicated"):
    return ParamGroup(name, n, shard, False, n, 1)


def _attention(m: ModelSpec) -> list[ParamGroup]:
    h, a, g, dh = m.hidden, m.n_heads, m.n_kv_heads, m.head_dim
    if m.mla is not None:
        return _mla(m)
    qkv = (a + 2 * g) * dh
    # q, k, v as separate matrices (HF layout; Megatron fuses them, same count) so that
    # per-matrix optimizers (Muon, Adafactor) see the shapes they orthogonalise/factor.
    out = [_mat("attn.q", h, a * dh, "tp"), _mat("attn.kv", h, g * dh, "tp", 2),
           _mat("attn.o", a * dh, h, "tp")]
    if m.qkv_bias or m.linear_bias:
        out.append(_vec("attn.qkv_bias", qkv, "tp"))
    if m.linear_bias:
        out.append(_vec("attn.o_bias", h))
    if m.qk_norm:
        out.append(_vec("attn.qk_norm", m.norm_params_of(dh) * 2))
    return out


def _mla(m: ModelSpec) -> list[ParamGroup]:
    x, h, a = m.mla, m.hidden, m.n_heads
    out = []
    if x.q_lora_rank:
        out += [_mat("attn.q_down", h, x.q_lora_rank, "replicated"),
                _vec("attn.q_norm", m.norm_params_of(x.q_lora_rank)),
                _mat("attn.q_up", x.q_lora_rank, a * x.qk_dim, "tp")]
    else:
        out.append(_mat("attn.q", h, a * x.qk_dim, "tp"))
    out += [_mat("attn.kv_down", h, x.kv_lora_rank + x.qk_rope_dim, "replicated"),
            _vec("attn.kv_norm", m.norm_params_of(x.kv_lora_rank)),
            _mat("attn.kv_up", x.kv_lora_rank, a * (x.qk_nope_dim + x.v_dim), "tp"),
            _mat("attn.o", a * x.v_dim, h, "tp")]
    return out


def _mlp(m: ModelSpec, f: int, prefix: str, shard: str = "tp", n: int = 1) -> list[ParamGroup]:
    h = m.hidden
    if m.mlp == "swiglu":  # gate and up: two h×f matrices (Megatron fuses them, same count)
        out = [_mat(f"{prefix}.fc1", h, f, shard, 2 * n), _mat(f"{prefix}.fc2", f, h, shard, n)]
    else:
        out = [_mat(f"{prefix}.fc1", h, f, shard, n), _mat(f"{prefix}.fc2", f, h, shard, n)]
    if m.linear_bias:
        out += [_vec(f"{prefix}.fc1_bias", n * f * (2 if m.mlp == "swiglu" else 1), shard),
                _vec(f"{prefix}.fc2_bias", n * h, "replicated" if shard == "tp" else shard)]
    return out


def _moe(m: ModelSpec, active: bool) -> list[ParamGroup]:
    x, h = m.moe, m.hidden
    n = x.top_k if active else x.n_experts
    # No group for router_bias: it is a buffer (see n_router_bias), not a trained parameter.
    router = _mat("moe.router", x.n_experts, h, "replicated")
    out = [replace(router, fp32=True) if x.router_fp32 else router]
    out += _mlp(m, x.expert_ffn, "moe.experts", "expert", n)
    if x.n_shared:
        out += _mlp(m, x.n_shared * x.shared_ffn_size, "moe.shared")
    if x.shared_gate:
        out.append(_vec("moe.shared_gate", h))
    return out


@lru_cache(maxsize=256)
def layer_groups(m: ModelSpec, kind: str, active: bool = False) -> tuple[ParamGroup, ...]:
    """Groups of one transformer layer of `kind` ("dense" or "moe"); `active` = top-K experts."""
    norms = [_vec("norm.attn", m.norm_params), _vec("norm.mlp", m.norm_params)]
    ffn = _moe(m, active) if kind == "moe" else _mlp(m, m.ffn_hidden, "mlp")
    return tuple(norms + _attention(m) + ffn)


@lru_cache(maxsize=256)
def mtp_groups(m: ModelSpec) -> tuple[ParamGroup, ...]:
    """One DeepSeek-V3 MTP module: enorm, hnorm, eh_proj (2h -> h), a MoE block, its head norm.

    The embedding and output head are shared with the main model (DeepSeek-V3 report §2.2).
    """
    h = m.hidden
    extra = (_vec("mtp.norms", 3 * m.norm_params), _mat("mtp.eh_proj", 2 * h, h, "tp"))
    kind = "moe" if m.moe is not None else "dense"
    return extra + tuple(ParamGroup("mtp." + g.name, g.count, g.shard, g.matrix, g.rows, g.cols)
                         for g in layer_groups(m, kind))


def padded_vocab(m: ModelSpec, tp: int, multiple: int) -> int:
    """Megatron pads the vocabulary to a multiple of `multiple`·tp; multiple=1 means no padding
    beyond what divides evenly across tp ranks."""
    step = multiple * tp
    return -(-m.vocab // step) * step if multiple > 1 else m.vocab


def embedding_groups(m: ModelSpec, vocab: int) -> tuple[ParamGroup, ...]:
    out = [ParamGroup("embedding", vocab * m.hidden, "vocab", False, vocab, m.hidden)] if vocab else []
    if m.pos_embeddings:
        out.append(ParamGroup("pos_embedding", m.pos_embeddings * m.hidden, "replicated", False,
                              m.pos_embeddings, m.hidden))
    return tuple(out)


def head_groups(m: ModelSpec, vocab: int, tied_same_rank: bool) -> tuple[ParamGroup, ...]:
    """Final norm and output head; a tied head on the embedding's rank adds no parameters."""
    out = [_vec("final_norm", m.norm_params)]
    if vocab and not tied_same_rank:
        out.append(ParamGroup("head", vocab * m.hidden, "vocab", False, vocab, m.hidden))
    return tuple(out)


def layer_kind(m: ModelSpec, i: int) -> str:
    return "moe" if m.is_moe_layer(i) else "dense"


def _total(m: ModelSpec, active: bool) -> int:
    body = sum(g.count for g in layer_groups(m, "dense", active)) * m.n_dense_layers
    if m.n_moe_layers:
        body += sum(g.count for g in layer_groups(m, "moe", active)) * m.n_moe_layers
    emb = sum(g.count for g in embedding_groups(m, m.vocab))
    head = sum(g.count for g in head_groups(m, m.vocab, m.tied_embeddings))
    return body + emb + head


@lru_cache(maxsize=256)
def n_params(m: ModelSpec) -> int:
    """All parameters a framework instantiates for the model (MTP modules excluded, as in HF)."""
    return _total(m, active=False)


@lru_cache(maxsize=256)
def n_active_params(m: ModelSpec) -> int:
    """Parameters touched per token: top-K routed experts instead of all E."""
    return _total(m, active=True)


@lru_cache(maxsize=256)
def n_mtp_params(m: ModelSpec) -> int:
    return m.n_mtp_layers * sum(g.count for g in mtp_groups(m))


def n_router_bias(m: ModelSpec) -> int:
    """Values of DeepSeek-V3's e_score_correction_bias: E fp32 values per MoE layer.

    transformers 5.24 registers it as a buffer (nn.Buffer) and Megatron-Core as `expert_bias`:
    it is updated by the load-balancing rule, not by gradients, so it has no gradient or
    optimizer state and `model.parameters()` does not count it. Checkpoints do store it, so
    published totals (DeepSeek-V3 671,026,419,200) equal n_params + n_router_bias.
    """
    moe = m.moe
    return m.n_moe_layers * moe.n_experts if moe is not None and moe.router_bias else 0
