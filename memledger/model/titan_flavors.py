"""torchtitan's model flavors (`[model] name` + `flavor`) as the models memledger builds.

torchtitan 0.3 registers its flavors in `torchtitan/models/{llama3,qwen3,deepseek_v3}/__init__.py`
(`llama3_configs`, `qwen3_configs`, `deepseekv3_configs`); the 0.2 and TOML eras name the same
flavors. Each flavor is a memledger preset or a shipped Hub config when one is the same model,
else the flavor's own shape spelled as the config.json `memledger.model.hf_config` reads.
`tests/test_titan_flavors.py` builds every flavor with torchtitan's own code on the meta device
and checks that memledger counts the same parameters (torchtitan installed: the validation
extra). Ignores: torchtitan's RoPE caches and MoE counters (buffers, not parameters:
ledger.static.titan_buffers) and `debugmodel_non_fused_qkv` (the debug model with q, k, v apart:
the same parameters, another op-SAC mm order, which memledger sets by era, not by flavor).
"""
from __future__ import annotations

SOURCE = "torchtitan 0.3 models/{llama3,qwen3,deepseek_v3}/__init__.py (the flavor functions)"

_LLAMA = (("model_type", "llama"), ("hidden_act", "silu"), ("vocab_size", 128256))
_QWEN3 = (("model_type", "qwen3"), ("head_dim", 128), ("vocab_size", 151936),
          ("hidden_act", "silu"))
_DSV3 = (("model_type", "deepseek_v3"), ("qk_nope_head_dim", 128), ("qk_rope_head_dim", 64),
         ("v_head_dim", 128), ("kv_lora_rank", 512), ("tie_word_embeddings", False),
         ("num_nextn_predict_layers", 0), ("hidden_act", "silu"))


def _cfg(base: tuple, **kw) -> tuple:
    return base + tuple(kw.items())


# Qwen/Qwen3-32B config.json (its model card), as torchtitan's qwen3 "32B" flavor builds it
QWEN3_32B = (("model_type", "qwen3"), ("hidden_size", 5120), ("num_hidden_layers", 64),
             ("num_attention_heads", 64), ("num_key_value_heads", 8), ("head_dim", 128),
             ("intermediate_size", 25600), ("vocab_size", 151936),
             ("tie_word_embeddings", False), ("rms_norm_eps", 1e-6),
             ("max_position_embeddings", 40960), ("hidden_act", "silu"))

# deepseek_v3 "16B" (`_16b`: MLA with no q low-rank, 64 routed experts top-6 softmax, 2 shared,
# 1 dense layer; DeepSeek-V2-Lite's shape); torchtitan's flavors build no MTP module
DSV3_16B = _cfg(_DSV3, hidden_size=2048, num_hidden_layers=27, num_attention_heads=16,
                q_lora_rank=None, intermediate_size=10944, moe_intermediate_size=1408,
                n_routed_experts=64, num_experts_per_tok=6, n_shared_experts=2,
                first_k_dense_replace=1, vocab_size=102400)

# deepseek-ai/DeepSeek-V3 config.json as the "671B" flavor builds it (`_671b`): no MTP module
DSV3_671B = _cfg(_DSV3, hidden_size=7168, num_hidden_layers=61, num_attention_heads=128,
                 q_lora_rank=1536, intermediate_size=18432, moe_intermediate_size=2048,
                 n_routed_experts=256, num_experts_per_tok=8, n_shared_experts=1,
                 first_k_dense_replace=3, vocab_size=129280)

# (family, flavor lower-cased) -> "preset:<name>", "hf:<Hub id>" or a config.json as pairs
FLAVORS: dict[tuple[str, str], str | tuple] = {
    ("llama3", "debugmodel"): _cfg(_LLAMA, hidden_size=256, num_hidden_layers=6,
                                   num_attention_heads=16, num_key_value_heads=16,
                                   intermediate_size=768, vocab_size=2048,
                                   tie_word_embeddings=False),
    ("llama3", "1b"): "hf:meta-llama/Llama-3.2-1B",
    ("llama3", "3b"): _cfg(_LLAMA, hidden_size=3072, num_hidden_layers=28,
                           num_attention_heads=24, num_key_value_heads=8,
                           intermediate_size=8192, tie_word_embeddings=True),
    ("llama3", "8b"): "hf:meta-llama/Llama-3.1-8B",
    ("llama3", "70b"): "preset:llama3-70b",
    ("llama3", "405b"): "preset:llama3.1-405b",
    ("qwen3", "debugmodel"): _cfg(_QWEN3, hidden_size=256, num_hidden_layers=8,
                                  num_attention_heads=16, num_key_value_heads=8,
                                  intermediate_size=3072, vocab_size=2048,
                                  tie_word_embeddings=True),
    ("qwen3", "0.6b"): _cfg(_QWEN3, hidden_size=1024, num_hidden_layers=28,
                            num_attention_heads=16, num_key_value_heads=8,
                            intermediate_size=3072, tie_word_embeddings=True),
    ("qwen3", "1.7b"): _cfg(_QWEN3, hidden_size=2048, num_hidden_layers=28,
                            num_attention_heads=16, num_key_value_heads=8,
                            intermediate_size=6144, tie_word_embeddings=True),
    ("qwen3", "4b"): _cfg(_QWEN3, hidden_size=2560, num_hidden_layers=36,
                          num_attention_heads=32, num_key_value_heads=8,
                          intermediate_size=9728, tie_word_embeddings=True),
    ("qwen3", "8b"): "hf:Qwen/Qwen3-8B",
    ("qwen3", "14b"): _cfg(_QWEN3, hidden_size=5120, num_hidden_layers=40,
                           num_attention_heads=40, num_key_value_heads=8,
                           intermediate_size=17408, tie_word_embeddings=False),
    ("qwen3", "32b"): "hf:Qwen/Qwen3-32B",
    ("qwen3", "debugmodel_moe"): (("model_type", "qwen3_moe"), ("hidden_size", 256),
                                  ("num_hidden_layers", 8), ("num_attention_heads", 16),
                                  ("num_key_value_heads", 8), ("head_dim", 128),
                                  ("intermediate_size", 3072), ("moe_intermediate_size", 768),
                                  ("num_experts", 64), ("num_experts_per_tok", 8),
                                  ("vocab_size", 2048), ("tie_word_embeddings", False),
                                  ("hidden_act", "silu")),
    ("qwen3", "30b-a3b"): "hf:Qwen/Qwen3-30B-A3B",
    ("qwen3", "235b-a22b"): "hf:Qwen/Qwen3-235B-A22B",
    ("deepseek_v3", "debugmodel"): _cfg(_DSV3, hidden_size=256, num_hidden_layers=6,
                                        num_attention_heads=16, q_lora_rank=None,
                                        intermediate_size=1024, moe_intermediate_size=256,
                                        n_routed_experts=8, num_experts_per_tok=3,
                                        n_shared_experts=2, first_k_dense_replace=1,
                                        vocab_size=2048),
    ("deepseek_v3", "16b"): DSV3_16B,
    # DeepSeek-V2's shape (`_236b`): q low-rank 1536, 160 routed experts top-6, 2 shared
    ("deepseek_v3", "236b"): _cfg(_DSV3, hidden_size=5120, num_hidden_layers=60,
                                  num_attention_heads=128, q_lora_rank=1536,
                                  intermediate_size=12288, moe_intermediate_size=1536,
                                  n_routed_experts=160, num_experts_per_tok=6,
                                  n_shared_experts=2, first_k_dense_replace=1,
                                  vocab_size=102400),
    ("deepseek_v3", "671b"): "preset:deepseek-v3",  # the torchtitan loop builds no MTP module
}


def flavor_names() -> str:
    return ", ".join(f"{a} {b}" for a, b in FLAVORS)


def flavor_model(family: str, flavor: str):
    """(kind, value): ("preset", name), ("hf", Hub id) or ("spec", ModelSpec); None when
    torchtitan has no such flavor in memledger's table."""
    hit = FLAVORS.get((family.lower(), flavor.lower()))
    if hit is None:
        return None
    if isinstance(hit, str):
        kind, value = hit.split(":", 1)
        return kind, value
    from memledger.model.hf_config import from_hf_config
    return "spec", from_hf_config(dict(hit), name=f"torchtitan {family} {flavor}")
