"""Plausibility bounds: the largest value each specification field may take, and why.

The specs enforce these in `__post_init__`, so the Python API, the CLI, the Hugging Face
importer and the share-link decoder reject the same inputs with the same message. Each bound is
about ten times the largest value published for a real model or cluster (sources in the reason),
generous for anything real, and small enough that no request can make the ledger, the planner or
a chart do unbounded work or overflow the planner's int64 arithmetic.

Sources of the "largest published" figures: Llama 3 405B (Meta 2024: 126 layers, 128 heads,
16M-token batches), Megatron-Turing NLG 530B (Smith et al. 2022: hidden 20,480), PaLM 540B
(Chowdhery et al. 2022: FFN 73,728), Gemma 3 (vocabulary 262,144; head_dim 256), Qwen3-Next
(512 experts), Llama 4 Scout (10M-token context), xAI Colossus (~200,000 GPUs, 2024).
Ignores: whether a combination inside the bounds fits in memory (that is the ledger's answer).
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.errors import SpecError


@dataclass(frozen=True)
class Bound:
    limit: int
    reason: str


_LAYERS = Bound(1_280, "10x the deepest published decoder, Llama 3 405B's 126 layers")
_WIDTH = Bound(204_800, "10x the widest published hidden size, Megatron-Turing NLG's 20,480")
_FFN = Bound(737_280, "10x the largest published FFN size, PaLM 540B's 73,728")
_HEADS = Bound(1_280, "10x the most attention heads published, 128 (Llama 3 405B, DeepSeek-V3)")
_SEQ = Bound(134_217_728, "2^27, over 10x the longest published context, Llama 4 Scout's 10M")
_BATCH = Bound(20_480, "10x the largest published global batch in sequences, 2,048 (Llama 3)")
_WORLD = Bound(2_097_152, "2^21, 10x the largest published GPU cluster, ~200,000 (xAI Colossus)")

BOUNDS: dict[str, Bound] = {
    # ModelSpec
    "n_layers": _LAYERS,
    "hidden": _WIDTH,
    "n_heads": _HEADS,
    "n_kv_heads": _HEADS,
    "head_dim": Bound(2_560, "10x the largest published head size, Gemma's 256"),
    "ffn_hidden": _FFN,
    "vocab": Bound(2_621_440, "10x the largest published vocabulary, Gemma 3's 262,144"),
    "pos_embeddings": _SEQ,
    "n_mtp_layers": Bound(64, "DeepSeek-V3 predicts 1 extra token; 64 is far beyond any model"),
    "name": Bound(512, "characters: a model name, not a document"),
    # MoESpec
    "n_experts": Bound(5_120, "10x the most routed experts published, Qwen3-Next's 512"),
    "top_k": Bound(5_120, "at most n_experts"),
    "expert_ffn": _FFN,
    "n_shared": Bound(5_120, "no more shared experts than routed ones can be"),
    "shared_ffn": _FFN,
    "dense_layers": Bound(1_280, "entries: at most one per layer"),
    # MLASpec (a rank or head size is at most a width)
    "q_lora_rank": _WIDTH,
    "kv_lora_rank": _WIDTH,
    "qk_rope_dim": _WIDTH,
    "qk_nope_dim": _WIDTH,
    "v_dim": _WIDTH,
    # ParallelSpec: every degree and their product (the world size)
    "world": _WORLD,
    "tp": _WORLD, "pp": _WORLD, "ep": _WORLD, "etp": _WORLD, "cp": _WORLD, "dp": _WORLD,
    "dp_replicate": _WORLD,
    "vpp": Bound(1_280, "virtual stages hold at least one layer each"),
    # TrainSpec
    "seq": _SEQ,
    "micro_batch": _BATCH,
    "micro_batches": Bound(1_048_576, "2^20 gradient-accumulation steps, 500x the largest "
                                      "published global batch in sequences"),
    "tokens_per_step": Bound(268_435_456, "micro_batch x seq x micro_batches: 2^28, 16x Llama "
                                          "3's 16M-token batch"),
    "recompute_every": _LAYERS,
    # PlanSpec (the planner's question)
    "global_batch": Bound(1_048_576, "sequences per step: 2^20, 500x the largest published "
                                     "global batch, 2,048 (Llama 3)"),
    "gpus_per_node": Bound(1_024, "over 10x the largest NVLink domain, GB200 NVL72's 72 GPUs"),
    "worlds": Bound(64, "world sizes searched in one plan: each is a full search"),
    "vocab_pad": Bound(65_536, "vocabulary padding multiples are 64..256 in practice"),
    # FinetuneSpec (lora_rank is bounded by "hidden": a rank is at most a layer's width)
    "lora_targets": Bound(64, "entries: module names and sets; a model has ~20 linear kinds"),
}


def bound_message(key: str, value: int) -> str:
    b = BOUNDS[key]
    return f"{value:,} exceeds the plausible maximum {b.limit:,} ({b.reason})"


def check_bound(key: str, value: int, field: str | None = None) -> None:
    """Raise SpecError(field or key) when an integer is above its plausibility bound."""
    if isinstance(value, int) and value > BOUNDS[key].limit:
        raise SpecError(field or key, bound_message(key, value))


def check_bounds(obj, keys) -> None:
    for k in keys:
        check_bound(k, getattr(obj, k))


def check_length(key: str, n: int, field: str | None = None) -> None:
    """Raise when a text or list has more than its bound's items."""
    if n > BOUNDS[key].limit:
        raise SpecError(field or key, f"has {n:,} entries or characters; at most "
                                      f"{BOUNDS[key].limit:,} ({BOUNDS[key].reason})")


def table() -> list[tuple[str, int, str]]:
    """(field, bound, reason) rows, for docs and the CLI."""
    return [(k, b.limit, b.reason) for k, b in BOUNDS.items()]
