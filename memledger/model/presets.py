"""Model presets. Each `source` names the config it was read from; counts are checked in tests.

Dimensions come from the models' published Hugging Face `config.json` files (or, for GPT-3 and
the Korthikanti et al. 2022 models, the papers' tables). The Korthikanti models follow the
paper's Figure 1 convention: vocabulary not counted (vocab = 0), GPT blocks with 4h GeLU MLP.
"""
from __future__ import annotations

from memledger.errors import lookup
from memledger.specs.model import MLASpec, ModelSpec, MoESpec


def _llama(name, layers, hidden, heads, kv, ffn, vocab, head_dim=128, tied=False, src=""):
    return ModelSpec(name=name, n_layers=layers, hidden=hidden, n_heads=heads, n_kv_heads=kv,
                     head_dim=head_dim, ffn_hidden=ffn, vocab=vocab, tied_embeddings=tied,
                     source=src)


def _gpt(name, layers, hidden, heads, vocab, pos, src):
    return ModelSpec(name=name, n_layers=layers, hidden=hidden, n_heads=heads, n_kv_heads=heads,
                     head_dim=hidden // heads, ffn_hidden=4 * hidden, vocab=vocab, mlp="gelu",
                     norm="layernorm", linear_bias=True, tied_embeddings=vocab > 0,
                     pos_embeddings=pos, source=src)


def _qwen3_moe(name, layers, hidden, heads, kv, ffn, expert_ffn, src):
    return ModelSpec(name=name, n_layers=layers, hidden=hidden, n_heads=heads, n_kv_heads=kv,
                     head_dim=128, ffn_hidden=ffn, vocab=151936, qk_norm=True,
                     moe=MoESpec(n_experts=128, top_k=8, expert_ffn=expert_ffn), source=src)


_DSV3_MLA = MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_rope_dim=64, qk_nope_dim=128, v_dim=128)

MODELS: dict[str, ModelSpec] = {
    "llama3-8b": _llama("Llama-3 8B", 32, 4096, 32, 8, 14336, 128256,
                        src="meta-llama/Meta-Llama-3-8B config.json"),
    "llama3-70b": _llama("Llama-3 70B", 80, 8192, 64, 8, 28672, 128256,
                         src="meta-llama/Meta-Llama-3-70B config.json"),
    "llama3.1-405b": _llama("Llama-3.1 405B", 126, 16384, 128, 8, 53248, 128256,
                            src="meta-llama/Llama-3.1-405B config.json"),
    "llama3.2-1b": _llama("Llama-3.2 1B", 16, 2048, 32, 8, 8192, 128256, head_dim=64, tied=True,
                          src="meta-llama/Llama-3.2-1B config.json (tie_word_embeddings: true)"),
    "mixtral-8x7b": ModelSpec(
        name="Mixtral 8x7B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, head_dim=128,
        ffn_hidden=14336, vocab=32000, moe=MoESpec(n_experts=8, top_k=2, expert_ffn=14336),
        source="mistralai/Mixtral-8x7B-v0.1 config.json"),
    "qwen3-30b-a3b": _qwen3_moe("Qwen3-30B-A3B", 48, 2048, 32, 4, 6144, 768,
                                src="Qwen/Qwen3-30B-A3B config.json"),
    "qwen3-235b-a22b": _qwen3_moe("Qwen3-235B-A22B", 94, 4096, 64, 4, 12288, 1536,
                                  src="Qwen/Qwen3-235B-A22B config.json"),
    "deepseek-v3": ModelSpec(
        name="DeepSeek-V3", n_layers=61, hidden=7168, n_heads=128, n_kv_heads=128, head_dim=128,
        ffn_hidden=18432, vocab=129280, mla=_DSV3_MLA,
        moe=MoESpec(n_experts=256, top_k=8, expert_ffn=2048, n_shared=1, first_k_dense=3,
                    router_bias=True),
        n_mtp_layers=1, source="deepseek-ai/DeepSeek-V3 config.json (num_nextn_predict_layers: 1)"),
    "kimi-k2": ModelSpec(
        name="Kimi K2", n_layers=61, hidden=7168, n_heads=64, n_kv_heads=64, head_dim=128,
        ffn_hidden=18432, vocab=163840, mla=_DSV3_MLA,
        moe=MoESpec(n_experts=384, top_k=8, expert_ffn=2048, n_shared=1, first_k_dense=1,
                    router_bias=True),
        source="moonshotai/Kimi-K2-Instruct config.json (deepseek_v3 layout)"),
    "gpt3-175b": _gpt("GPT-3 175B", 96, 12288, 96, 50257, 2048,
                      "Brown et al. 2020 (arXiv 2005.14165) Table 2.1; GPT-2 vocabulary"),
    "korthikanti-22b": _gpt("Korthikanti 22B", 48, 6144, 64, 0, 0,
                            "Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"),
    "korthikanti-175b": _gpt("Korthikanti 175B (GPT-3)", 96, 12288, 96, 0, 0,
                             "Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"),
    "korthikanti-530b": _gpt("Korthikanti 530B (MT-NLG)", 105, 20480, 128, 0, 0,
                             "Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"),
    "korthikanti-1t": _gpt("Korthikanti 1T", 128, 25600, 160, 0, 0,
                           "Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"),
}


def model(name: str) -> ModelSpec:
    return lookup("model", MODELS, name)
