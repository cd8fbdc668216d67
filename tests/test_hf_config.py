"""Claims about importing Hugging Face config.json files (memledger.model.hf_config).

Fixtures in tests/fixtures/hf are the published config.json files of the named models, plus
`tiny-*` variants for aliases and layer rules that the published files do not exercise. Tests
marked `torch` instantiate the same file with transformers on the meta device (no memory, no
download) and compare parameter counts exactly.
"""
from __future__ import annotations

import copy
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from memledger.errors import SpecError
from memledger.model.hf_config import SUPPORTED_MODEL_TYPES, from_hf_config, load_hf_config
from memledger.model.params import n_active_params, n_mtp_params, n_params, n_router_bias
from memledger.model.presets import MODELS

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
ALL_FIXTURES = sorted(p.stem for p in FIXTURES.glob("*.json"))
# transformers ignores moe_layer_freq; that fixture is checked layer by layer instead.
LAYER_FREQ_FIXTURE = "tiny-deepseek-v3-moe-layer-freq-2"
PRESET_OF = {"Meta-Llama-3-8B": "llama3-8b", "Llama-3.2-1B": "llama3.2-1b",
             "Mixtral-8x7B-v0.1": "mixtral-8x7b", "Qwen3-30B-A3B": "qwen3-30b-a3b",
             "Qwen3-235B-A22B": "qwen3-235b-a22b", "DeepSeek-V3": "deepseek-v3",
             "Kimi-K2-Instruct": "kimi-k2"}

HAVE_HF = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
needs_hf = pytest.mark.skipif(not HAVE_HF, reason="torch/transformers not importable")
needs_transformers = [pytest.mark.torch, needs_hf]


def raw(stem: str) -> dict:
    return json.loads((FIXTURES / f"{stem}.json").read_text())


def spec(stem: str):
    return load_hf_config(FIXTURES / f"{stem}.json")


def hf_model(cfg: dict):
    """What transformers instantiates from `cfg`, on the meta device (shapes only).

    kimi_k2 is not a transformers model type: the published repo runs DeepSeek-V3 classes.
    quantization_config (fp8 storage) and auto_map (remote code) are dropped: neither changes
    the architecture, and remote code is never run.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    cfg = {k: v for k, v in cfg.items() if k not in ("quantization_config", "auto_map")}
    model_type = cfg.pop("model_type")
    config = AutoConfig.for_model("deepseek_v3" if model_type == "kimi_k2" else model_type, **cfg)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def hf_n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


# -- published counts --------------------------------------------------------------------------
def test_llama3_8b_config_counts_8_030_261_248_params():
    assert n_params(spec("Meta-Llama-3-8B")) == 8_030_261_248


def test_llama3_2_1b_config_is_tied_and_counts_1_235_814_400_params():
    m = spec("Llama-3.2-1B")
    assert m.tied_embeddings and m.head_dim == 64
    assert n_params(m) == 1_235_814_400


def test_mixtral_8x7b_config_counts_46_702_792_704_params_and_12_879_925_248_active():
    """Active parameters by hand (h 4096, 32 heads of 128, 8 KV heads, fe 14336, top-2 of 8):
    per layer  attention 2·4096·4096 + 2·4096·1024          =  41,943,040
               2 active experts 2·3·4096·14336               = 352,321,536
               router 8·4096 + two norms 2·4096              =      40,960
               total                                          = 394,305,536
    32 layers 12,617,777,152 + embedding and head 2·32000·4096 (262,144,000) + final norm 4096
    = 12,879,925,248.
    """
    m = spec("Mixtral-8x7B-v0.1")
    assert n_params(m) == 46_702_792_704
    assert n_active_params(m) == 12_879_925_248


def test_qwen3_30b_a3b_config_counts_30_532_122_624_params():
    assert n_params(spec("Qwen3-30B-A3B")) == 30_532_122_624


def test_deepseek_v3_checkpoint_holds_671_026_419_200_of_which_14_848_are_router_bias_buffers():
    """671,026,419,200 (without MTP) counts the e_score_correction_bias tensors stored in the
    checkpoint; they are buffers (no gradient, no optimizer state), so n_params leaves them out,
    like transformers' model.parameters()."""
    m = spec("DeepSeek-V3")
    assert n_router_bias(m) == 58 * 256 == 14_848
    assert n_params(m) == 671_026_404_352
    assert n_params(m) + n_router_bias(m) == 671_026_419_200
    assert m.n_mtp_layers == 1 and n_mtp_params(m) > 0  # num_nextn_predict_layers, kept apart


def test_kimi_k2_checkpoint_holds_1_026_408_232_448_of_which_23_040_are_router_bias_buffers():
    m = spec("Kimi-K2-Instruct")
    assert n_router_bias(m) == 60 * 384 == 23_040
    assert n_params(m) + n_router_bias(m) == 1_026_408_232_448
    assert m.n_mtp_layers == 0


def test_kimi_k2_dims_under_model_type_deepseek_v3_import_the_same_spec():
    as_kimi = from_hf_config(raw("Kimi-K2-Instruct"), name="K2")
    as_dsv3 = from_hf_config(raw("Kimi-K2-Instruct") | {"model_type": "deepseek_v3"}, name="K2")
    assert replace(as_dsv3, source="") == replace(as_kimi, source="")


@pytest.mark.parametrize("stem", sorted(PRESET_OF))
def test_fixture_of_a_preset_imports_to_that_preset(stem):
    """Same architecture; only the router's storage dtype may differ (transformers keeps the
    DeepSeek/Kimi gate weight in fp32, the presets follow Megatron's bf16 parameters)."""
    preset = MODELS[PRESET_OF[stem]]
    m = spec(stem)
    moe = replace(m.moe, router_fp32=False) if m.moe else None
    assert replace(m, name=preset.name, source=preset.source, moe=moe) == preset
    assert (n_params(m), n_active_params(m), n_mtp_params(m)) == \
        (n_params(preset), n_active_params(preset), n_mtp_params(preset))


# -- exact agreement with transformers ---------------------------------------------------------
@pytest.mark.parametrize("stem", [pytest.param(s, marks=needs_transformers)
                                  for s in ALL_FIXTURES if s != LAYER_FREQ_FIXTURE])
def test_n_params_equals_what_transformers_instantiates(stem):
    assert n_params(spec(stem)) == hf_n_params(hf_model(raw(stem)))


@pytest.mark.torch
@needs_hf
def test_moe_layer_freq_2_counts_layer_by_layer_with_transformers_modules():
    """transformers 5.24 ignores moe_layer_freq (MoE on every layer >= first_k_dense_replace);
    DeepSeek's reference code makes layer i MoE iff i >= first_k and i % freq == 0. Build the
    expected total from transformers' own dense and MoE layers, chosen by the reference rule."""
    cfg = raw(LAYER_FREQ_FIXTURE)
    m = spec(LAYER_FREQ_FIXTURE)
    assert [i for i in range(m.n_layers) if m.is_moe_layer(i)] == [2, 4]
    all_dense = hf_model(cfg | {"first_k_dense_replace": cfg["num_hidden_layers"]})
    all_moe = hf_model(cfg | {"first_k_dense_replace": 0})
    layers = sum(hf_n_params((all_moe if m.is_moe_layer(i) else all_dense).model.layers[i])
                 for i in range(m.n_layers))
    outside = hf_n_params(all_dense) - hf_n_params(all_dense.model.layers)
    assert n_params(m) == layers + outside


@pytest.mark.torch
@needs_hf
def test_transformers_keeps_deepseek_router_bias_out_of_parameters():
    model = hf_model(raw("DeepSeek-V3") | {"num_hidden_layers": 4})
    buffers = [n for n, _ in model.named_buffers() if n.endswith("e_score_correction_bias")]
    params = [n for n, _ in model.named_parameters() if "e_score_correction_bias" in n]
    assert len(buffers) == 1 and params == []  # 4 layers, first_k_dense_replace 3


@pytest.mark.torch
@needs_hf
def test_llama_with_attention_and_mlp_bias_is_linear_bias_as_transformers_counts():
    cfg = raw("tiny-llama-head-dim-null") | {"attention_bias": True, "mlp_bias": True}
    m = from_hf_config(cfg)
    assert m.linear_bias
    assert n_params(m) == hf_n_params(hf_model(cfg))


# -- layer rules and aliases -------------------------------------------------------------------
def test_qwen_decoder_sparse_step_2_makes_odd_layers_moe():
    m = spec("tiny-qwen2-moe-sparse-step-2")
    assert [m.is_moe_layer(i) for i in range(6)] == [False, True] * 3
    assert (m.moe.first_k_dense, m.moe.dense_layers) == (1, (2, 4))


def test_qwen_mlp_only_layers_become_dense_layers():
    m = spec("tiny-qwen3-moe-mlp-only-layers")
    assert (m.moe.first_k_dense, m.moe.dense_layers) == (1, (3,))
    assert m.n_moe_layers == 4


def test_deepseek_moe_layer_freq_2_makes_even_layers_after_first_k_moe():
    m = spec(LAYER_FREQ_FIXTURE)  # first_k_dense_replace 1, moe_layer_freq 2
    assert (m.moe.first_k_dense, m.moe.dense_layers) == (2, (3, 5))


def test_deepseek_v2_lite_first_k_dense_replace_1_and_null_q_lora_rank():
    m = spec("DeepSeek-V2-Lite")
    assert (m.moe.first_k_dense, m.moe.dense_layers, m.n_moe_layers) == (1, (), 26)
    assert m.mla.q_lora_rank == 0  # null: a full q projection, no compression
    assert (m.moe.n_shared, m.moe.router_bias) == (2, False)  # topk_method greedy


def test_num_local_experts_is_read_as_the_expert_count():
    assert spec("tiny-qwen3-moe-num-local-experts").moe.n_experts == 6
    assert spec("Mixtral-8x7B-v0.1").moe.n_experts == 8


def test_expert_count_aliases_that_disagree_name_the_field():
    cfg = raw("tiny-qwen3-moe-num-local-experts") | {"num_experts": 8}
    with pytest.raises(SpecError) as e:
        from_hf_config(cfg)
    assert e.value.field == "num_experts" and "disagree" in e.value.message


def test_qwen3_moe_with_zero_experts_is_dense_but_mixtral_needs_experts():
    cfg = raw("tiny-qwen3-moe-num-local-experts") | {"num_local_experts": 0}
    assert from_hf_config(cfg).moe is None
    with pytest.raises(SpecError) as e:
        from_hf_config(raw("Mixtral-8x7B-v0.1") | {"num_local_experts": 0})
    assert e.value.field == "num_local_experts"


def test_missing_head_dim_is_hidden_over_heads():
    assert spec("Mistral-7B-v0.1").head_dim == 4096 // 32
    m = spec("tiny-llama-head-dim-null")  # null, and num_key_value_heads absent
    assert (m.head_dim, m.n_kv_heads) == (96 // 6, 6)


def test_qwen3_without_head_dim_is_rejected_because_transformers_would_use_128():
    cfg = {k: v for k, v in raw("Qwen3-8B").items() if k != "head_dim"}
    with pytest.raises(SpecError) as e:
        from_hf_config(cfg)
    assert e.value.field == "head_dim"


def test_mistral_without_num_key_value_heads_is_rejected_because_transformers_would_use_8():
    cfg = {k: v for k, v in raw("Mistral-7B-v0.1").items() if k != "num_key_value_heads"}
    with pytest.raises(SpecError) as e:
        from_hf_config(cfg)
    assert e.value.field == "num_key_value_heads"


def test_qwen2_has_qkv_bias_by_architecture_and_qwen3_has_qk_norm():
    assert spec("Qwen2-7B").qkv_bias and not spec("Qwen2-7B").qk_norm
    assert spec("Qwen3-8B").qk_norm and not spec("Qwen3-8B").qkv_bias


def test_qwen2_moe_has_one_gated_shared_expert_of_its_own_size():
    moe = spec("tiny-qwen2-moe-sparse-step-2").moe
    assert (moe.n_shared, moe.shared_ffn, moe.shared_gate) == (1, 96, True)


def test_gelu_gate_counts_as_a_gated_mlp():
    cfg = raw("Meta-Llama-3-8B") | {"hidden_act": "gelu_pytorch_tanh"}
    assert from_hf_config(cfg).mlp == "swiglu"
    assert n_params(from_hf_config(cfg)) == 8_030_261_248


# -- errors name the field ---------------------------------------------------------------------
def test_unknown_model_type_names_the_field():
    with pytest.raises(SpecError) as e:
        from_hf_config({"model_type": "gpt_neox", "hidden_size": 64})
    assert e.value.field == "model_type"
    assert "'gpt_neox'" in e.value.message
    assert all(t in e.value.message for t in SUPPORTED_MODEL_TYPES)


def test_missing_required_field_names_it():
    cfg = {k: v for k, v in raw("Meta-Llama-3-8B").items() if k != "intermediate_size"}
    with pytest.raises(SpecError) as e:
        from_hf_config(cfg)
    assert e.value.field == "intermediate_size" and "missing" in e.value.message


def test_deepseek_q_lora_rank_absent_is_missing_not_zero():
    cfg = {k: v for k, v in raw("DeepSeek-V3").items() if k != "q_lora_rank"}
    with pytest.raises(SpecError) as e:
        from_hf_config(cfg)
    assert e.value.field == "q_lora_rank"


@pytest.mark.parametrize("bad", ["4096", 4096.0, True, [4096], -4096, 0])
def test_non_integer_or_non_positive_size_names_the_field(bad):
    with pytest.raises(SpecError) as e:
        from_hf_config(raw("Meta-Llama-3-8B") | {"hidden_size": bad})
    assert e.value.field == "hidden_size"


def test_non_boolean_tie_word_embeddings_names_the_field():
    with pytest.raises(SpecError) as e:
        from_hf_config(raw("Llama-3.2-1B") | {"tie_word_embeddings": "true"})
    assert e.value.field == "tie_word_embeddings"


def test_mlp_only_layers_out_of_range_names_the_field():
    with pytest.raises(SpecError) as e:
        from_hf_config(raw("tiny-qwen3-moe-mlp-only-layers") | {"mlp_only_layers": [6]})
    assert e.value.field == "mlp_only_layers"


def test_top_k_above_expert_count_names_the_config_key():
    with pytest.raises(SpecError) as e:
        from_hf_config(raw("Mixtral-8x7B-v0.1") | {"num_experts_per_tok": 9})
    assert e.value.field == "num_experts_per_tok"


def test_attention_bias_alone_is_rejected_naming_the_field():
    with pytest.raises(SpecError) as e:
        from_hf_config(raw("Qwen3-8B") | {"attention_bias": True})
    assert e.value.field == "attention_bias"


def test_unsupported_hidden_act_names_the_field():
    with pytest.raises(SpecError) as e:
        from_hf_config(raw("Meta-Llama-3-8B") | {"hidden_act": "relu2"})
    assert e.value.field == "hidden_act"


def test_config_that_is_not_an_object_names_config():
    with pytest.raises(SpecError) as e:
        from_hf_config(["model_type", "llama"])
    assert e.value.field == "config"


def test_load_hf_config_rejects_invalid_json_naming_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{'model_type': 'llama'}")
    with pytest.raises(SpecError) as e:
        load_hf_config(path)
    assert e.value.field == "config"


def test_load_hf_config_names_the_spec_after_the_file_and_leaves_the_dict_alone():
    cfg = raw("DeepSeek-V3")
    before = copy.deepcopy(cfg)
    from_hf_config(cfg)
    assert cfg == before
    m = spec("DeepSeek-V3")
    assert m.name == "DeepSeek-V3" and "DeepSeek-V3.json" in m.source


# -- the router family the `hf` activation profile tells apart ---------------------------------
def test_deepseek_v2_router_is_its_own_family_never_renormalised():
    moe = spec("DeepSeek-V2-Lite").moe  # topk_method greedy, norm_topk_prob false
    assert (moe.router, moe.norm_topk, moe.group_limited, moe.router_fp32) == ("deepseek_v2", False, False, True)
    # transformers' DeepseekV2TopkRouter ignores norm_topk_prob: the spec follows what it builds
    moe = from_hf_config(raw("DeepSeek-V2-Lite") | {"norm_topk_prob": True,
                                                     "topk_method": "group_limited_greedy"}).moe
    assert (moe.norm_topk, moe.group_limited) == (False, True)


def test_qwen2_moe_router_reads_norm_topk_prob_with_transformers_default_false():
    assert (spec("tiny-qwen2-moe-sparse-step-2").moe.router,
            spec("tiny-qwen2-moe-sparse-step-2").moe.norm_topk) == ("qwen", False)
    cfg = raw("tiny-qwen2-moe-sparse-step-2") | {"norm_topk_prob": True}
    assert from_hf_config(cfg).moe.norm_topk is True
    with pytest.raises(SpecError) as e:
        from_hf_config(raw("tiny-qwen2-moe-sparse-step-2") | {"norm_topk_prob": "yes"})
    assert e.value.field == "norm_topk_prob"


@pytest.mark.parametrize("stem", [s for s in ALL_FIXTURES
                                  if raw(s)["model_type"] not in ("deepseek_v2", "qwen2_moe")])
def test_other_moe_types_keep_the_inferred_router(stem):
    moe = spec(stem).moe
    assert moe is None or (moe.router, moe.norm_topk, moe.group_limited) == ("auto", True, False)


def test_router_fields_are_validated():
    from memledger.specs.model import MoESpec
    with pytest.raises(SpecError) as e:
        MoESpec(n_experts=4, top_k=2, expert_ffn=8, router="switch")
    assert e.value.field == "router" and "deepseek_v2" in e.value.message
    with pytest.raises(SpecError) as e:
        MoESpec(n_experts=4, top_k=2, expert_ffn=8, group_limited=True)
    assert e.value.field == "group_limited" and "'auto'" in e.value.message
