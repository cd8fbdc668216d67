"""The `hf` profile predicts, byte for byte, what transformers 5.x saves for backward.

Each case builds a tiny model from a config (random init, nothing downloaded), traces one
training forward (labels included) on CPU, and compares the saved bytes of every layer and of
everything outside the layers with `tensor_bytes` over the profile's inventory
(`HFProfile(device="cpu")`: CPU sdpa kernels; the CUDA variant differs only for MLA, see
memledger/activations/hf.py). Exact up to the constants the profile documents as ignored:
4·E bytes of int32 expert offsets per MoE layer, the loss's 4-byte fp32 weight, and 8 bytes of
padded labels when the batch is a single sequence.
"""
from __future__ import annotations

import pytest

from memledger.ledger.activations import tensor_bytes
from memledger.ledger.activations.profiles.hf import HFProfile
from memledger.model.params import layer_kind
from memledger.specs import MLASpec, ModelSpec, MoESpec, ParallelSpec, TrainSpec

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from memledger.trace import trace_causal_lm  # noqa: E402

pytestmark = pytest.mark.torch
transformers.logging.set_verbosity_error()
P = ParallelSpec()


def build(arch: str, d: dict):
    """The transformers config and the ModelSpec of one architecture, from the same dims."""
    h, a, g, dh, L, V = d["h"], d["heads"], d["kv"], d["dh"], d["layers"], d["vocab"]
    common = dict(hidden_size=h, num_attention_heads=a, num_key_value_heads=g, head_dim=dh,
                  num_hidden_layers=L, vocab_size=V, intermediate_size=d["ffn"])
    spec = dict(name=arch, n_layers=L, hidden=h, n_heads=a, n_kv_heads=g, head_dim=dh,
                ffn_hidden=d["ffn"], vocab=V)
    if arch == "llama":
        return transformers.LlamaConfig(**common), ModelSpec(**spec)
    E, K, fe = d.get("E", 4), d.get("K", 2), d.get("fe", 32)
    if arch == "mixtral":
        cfg = transformers.MixtralConfig(**common, num_local_experts=E, num_experts_per_tok=K,
                                         experts_implementation=d.get("experts"))
        return cfg, ModelSpec(**spec, moe=MoESpec(n_experts=E, top_k=K, expert_ffn=d["ffn"]))
    if arch == "qwen3moe":
        dense = tuple(d.get("dense", ()))
        cfg = transformers.Qwen3MoeConfig(**common, num_experts=E, num_experts_per_tok=K,
                                          moe_intermediate_size=fe, norm_topk_prob=True,
                                          mlp_only_layers=list(dense),
                                          experts_implementation=d.get("experts"))
        return cfg, ModelSpec(**spec, qk_norm=True,
                              moe=MoESpec(n_experts=E, top_k=K, expert_ffn=fe, dense_layers=dense))
    if arch == "qwen2moe":  # softmax router, weights cast back; a sigmoid-gated shared expert
        norm, fs = d.get("norm", False), d.get("fs", 48)
        cfg = transformers.Qwen2MoeConfig(**common, num_experts=E, num_experts_per_tok=K,
                                          moe_intermediate_size=fe, norm_topk_prob=norm,
                                          shared_expert_intermediate_size=fs,
                                          experts_implementation=d.get("experts"))
        moe = MoESpec(n_experts=E, top_k=K, expert_ffn=fe, n_shared=1, shared_ffn=fs,
                      shared_gate=True, router="qwen", norm_topk=norm)
        return cfg, ModelSpec(**spec, qkv_bias=True, moe=moe)
    if arch == "dsv2":  # fp32 softmax router over an fp32 copy of its input, never renormalised
        qr, kvr, dr, dn, dv = d["qr"], d["kvr"], d["dr"], d["dn"], d["dv"]
        method = d.get("topk_method", "greedy")
        del common["head_dim"]
        cfg = transformers.DeepseekV2Config(
            **{**common, "num_key_value_heads": a}, n_routed_experts=E, num_experts_per_tok=K,
            moe_intermediate_size=fe, topk_method=method, n_group=2, topk_group=1,
            first_k_dense_replace=1, n_shared_experts=2, q_lora_rank=qr or None, kv_lora_rank=kvr,
            qk_rope_head_dim=dr, qk_nope_head_dim=dn, v_head_dim=dv,
            experts_implementation=d.get("experts"))
        mla = MLASpec(q_lora_rank=qr, kv_lora_rank=kvr, qk_rope_dim=dr, qk_nope_dim=dn, v_dim=dv)
        moe = MoESpec(n_experts=E, top_k=K, expert_ffn=fe, n_shared=2, first_k_dense=1,
                      router_fp32=True, router="deepseek_v2", norm_topk=False,
                      group_limited=method == "group_limited_greedy")
        return cfg, ModelSpec(**{**spec, "n_kv_heads": a}, mla=mla, moe=moe)
    assert arch == "dsv3"
    qr, kvr, dr, dn, dv = d["qr"], d["kvr"], d["dr"], d["dn"], d["dv"]
    del common["head_dim"]  # DeepSeek-V3 derives its rotary dim from qk_rope_head_dim
    cfg = transformers.DeepseekV3Config(
        **{**common, "num_key_value_heads": a}, n_routed_experts=E, num_experts_per_tok=K,
        moe_intermediate_size=fe, n_group=2, topk_group=1, first_k_dense_replace=1,
        n_shared_experts=1, q_lora_rank=qr or None, kv_lora_rank=kvr, qk_rope_head_dim=dr,
        qk_nope_head_dim=dn, v_head_dim=dv, experts_implementation=d.get("experts"))
    mla = MLASpec(q_lora_rank=qr, kv_lora_rank=kvr, qk_rope_dim=dr, qk_nope_dim=dn, v_dim=dv)
    moe = MoESpec(n_experts=E, top_k=K, expert_ffn=fe, n_shared=1, first_k_dense=1, router_bias=True)
    return cfg, ModelSpec(**{**spec, "n_kv_heads": a}, mla=mla, moe=moe)


SMALL = dict(h=64, heads=4, kv=2, dh=16, ffn=96, layers=2, vocab=128, b=1, s=40,
             qr=32, kvr=32, dr=16, dn=32, dv=32)
LARGE = dict(h=128, heads=4, kv=2, dh=32, ffn=160, layers=3, vocab=200, b=2, s=72, E=6, fe=48,
             qr=48, kvr=40, dr=16, dn=24, dv=32)
PRECISION = {"bf16": "bf16", "amp": "amp", "fp32": "fp32"}


def run(arch, d, attention="flash", precision="bf16", gc=False, experts="grouped_mm"):
    cfg, m = build(arch, d)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        cfg, attn_implementation="eager" if attention == "eager" else "sdpa")
    if precision == "bf16":
        model.to(torch.bfloat16)
    if gc:  # transformers 5.x name; the older gradient_checkpointing_enable is deprecated
        model.activation_checkpointing_enable()
    if m.moe is not None:
        assert model.config._experts_implementation == experts, "config did not take"
    tr = trace_causal_lm(model, d["b"], d["s"],
                         autocast_dtype=torch.bfloat16 if precision == "amp" else None)
    t = TrainSpec(micro_batch=d["b"], seq=d["s"], precision=PRECISION[precision], profile="hf",
                  attention=attention, recompute="full" if gc else "none")
    return tr, m, t, HFProfile(device="cpu", experts=experts)


def predicted(prof, m, t):
    def total(xs):
        return sum(tensor_bytes(x, m, t, P) for x in xs)
    layers = {i: total(prof.layer(m, layer_kind(m, i), t, P)) + (4 * m.moe.n_experts if m.is_moe_layer(i) else 0)
              for i in range(m.n_layers)}
    outside = total(prof.first_stage(m, t, P) + prof.last_stage(m, t, P)) + 4 + (8 if t.micro_batch == 1 else 0)
    return layers, outside


ARCHS = ("llama", "mixtral", "qwen3moe", "dsv3", "dsv2", "qwen2moe")
CASES = [(arch, size, att, prec) for arch in ARCHS
         for size in ("small", "large") for att in ("flash", "eager") for prec in ("bf16", "amp")]


@pytest.mark.parametrize("arch,size,attention,precision", CASES)
def test_profile_matches_trace(arch, size, attention, precision):
    d = SMALL if size == "small" else LARGE
    tr, m, t, prof = run(arch, d, attention, precision)
    layers, outside = predicted(prof, m, t)
    assert tr.layer_bytes() == layers
    assert tr.outside_bytes == outside


@pytest.mark.parametrize("arch,d", [
    ("llama", {**SMALL, "s": 33}),  # fp32 weights and activations: norm keeps its input itself
    ("dsv3", {**LARGE, "qr": 0}),  # MLA without q compression (q_proj reads the layer input)
    ("qwen3moe", {**LARGE, "dense": (1,)}),  # mlp_only_layers: a dense layer inside a MoE model
    ("dsv2", {**LARGE, "topk_method": "group_limited_greedy"}),  # keeps the E-byte group mask
    ("qwen2moe", {**LARGE, "norm": True}),  # norm_topk_prob: the division keeps sum and weights
])
def test_profile_variants(arch, d):
    prec = "fp32" if arch == "llama" else "bf16"
    for attention in ("flash", "eager"):
        tr, m, t, prof = run(arch, d, attention, prec)
        assert (tr.layer_bytes(), tr.outside_bytes) == predicted(prof, m, t)


@pytest.mark.parametrize("arch", ["mixtral", "qwen3moe", "dsv3", "dsv2", "qwen2moe"])
def test_pure_fp32_moe_families(arch):
    """fp32 weights and activations: norms keep their input itself. For MLA that input is a
    split view of kv_a_proj's output, so the rope part (dr values) stays alive with it."""
    for attention in ("flash", "eager"):
        tr, m, t, prof = run(arch, {**SMALL, "b": 2}, attention, "fp32")
        assert (tr.layer_bytes(), tr.outside_bytes) == predicted(prof, m, t)


@pytest.mark.parametrize("arch,precision", [("mixtral", "bf16"), ("mixtral", "amp"),
                                            ("qwen3moe", "bf16"), ("dsv3", "amp"),
                                            ("dsv2", "amp"), ("qwen2moe", "bf16")])
def test_eager_expert_loop(arch, precision):
    """experts_implementation="eager": rows per expert vary with routing, their sum is T·K."""
    tr, m, t, prof = run(arch, {**SMALL, "experts": "eager"}, "flash", precision, experts="eager")
    layers, outside = predicted(prof, m, t)
    moe_layers = [i for i in range(m.n_layers) if m.is_moe_layer(i)]
    for i in moe_layers:  # the eager loop keeps no per-expert offsets: drop that constant
        layers[i] -= 4 * m.moe.n_experts
    assert (tr.layer_bytes(), tr.outside_bytes) == (layers, outside)


@pytest.mark.parametrize("arch,precision", [("llama", "bf16"), ("dsv3", "amp"), ("mixtral", "bf16")])
def test_full_recompute_keeps_layer_inputs(arch, precision):
    """HF gradient checkpointing: each layer saves only its input; outside is unchanged except
    that the RoPE tables are held by the checkpoint frames instead of saved tensors."""
    tr, m, t, prof = run(arch, SMALL, "flash", precision, gc=True)
    per_layer = tensor_bytes(prof.layer_input(m, t, P), m, t, P)
    assert tr.layer_bytes() == {i: per_layer for i in range(m.n_layers)}
    _, outside = predicted(prof, m, t)
    rope = sum(tensor_bytes(x, m, t, P) for x in prof.first_stage(m, t, P) if x.cls == "rope")
    assert tr.outside_bytes == outside - rope


def test_cuda_and_cpu_variants_differ_only_for_mla_sdpa():
    """In bf16, per token, CPU flash-for-CPU saves what CUDA's fused kernels save (GQA); MLA's
    unequal head dims push CPU to the fp32 math path, which keeps more."""
    for arch in ("llama", "mixtral", "qwen3moe", "dsv3"):
        cfg, m = build(arch, SMALL)
        for att in ("flash", "eager"):
            t = TrainSpec(seq=40, precision="bf16", profile="hf", attention=att)
            cpu = sum(tensor_bytes(x, m, t, P) for x in HFProfile(device="cpu").layer(m, "moe" if m.moe else "dense", t, P))
            cuda = sum(tensor_bytes(x, m, t, P) for x in HFProfile().layer(m, "moe" if m.moe else "dense", t, P))
            assert (cpu == cuda) == (arch != "dsv3" or att == "eager"), (arch, att)


def test_backward_transient_is_two_fp32_logit_gradients_and_forward_is_logits_plus_upcast():
    """Backward: 8 bytes per logit above the saved log-probs, the peak measured on an H200
    (tests/data/hf_traces_h200.json, meta.logits_transient). Forward (class "forward", one
    working set in the ledger): the bf16 logits and their fp32 upcast, 6 bytes per logit."""
    m = build("llama", SMALL)[1]
    t = TrainSpec(micro_batch=2, seq=64, precision="bf16", profile="hf")
    xs = HFProfile().transients(m, t, P)
    backward = [x for x in xs if x.cls != "forward"]
    forward = [x for x in xs if x.cls == "forward"]
    assert [tensor_bytes(x, m, t, P) for x in backward] == [8 * 2 * 64 * 128]
    assert sum(tensor_bytes(x, m, t, P) for x in forward) == 6 * 2 * 64 * 128


def test_registered_as_hf():
    from memledger.ledger.activations import get_profile
    assert isinstance(get_profile("hf"), HFProfile)
    assert get_profile("hf").device == "cuda"


def _fixture(stem: str, **shrink):
    import json
    from pathlib import Path
    from memledger.model.hf_config import from_hf_config
    cfg = json.loads((Path(__file__).parent / "fixtures" / "hf" / f"{stem}.json").read_text()) | shrink
    hf = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "auto_map"})
    return hf, from_hf_config(cfg)


@pytest.mark.parametrize("stem,shrink", [
    ("tiny-qwen2-moe-sparse-step-2", {}),  # as shipped: dense and MoE layers alternate
    ("DeepSeek-V2-Lite", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                              num_hidden_layers=2, vocab_size=128, intermediate_size=96,
                              moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2,
                              kv_lora_rank=32,
                              qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32)),
])
@pytest.mark.parametrize("precision", ["bf16", "amp"])
def test_imported_router_family_matches_trace(stem, shrink, precision):
    """The importer's MoESpec.router / norm_topk (not a hand-built spec) make the profile exact:
    Qwen2-MoE's shared_expert_gate and DeepSeek-V2's fp32 router input, end to end."""
    cfg, m = _fixture(stem, **shrink)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model.to(torch.bfloat16 if precision == "bf16" else torch.float32)  # V2-Lite says bf16
    tr = trace_causal_lm(model, 1, 40, autocast_dtype=torch.bfloat16 if precision == "amp" else None)
    t = TrainSpec(micro_batch=1, seq=40, precision=precision, profile="hf", attention="flash")
    assert (tr.layer_bytes(), tr.outside_bytes) == predicted(HFProfile(device="cpu"), m, t)


def test_shared_gate_and_v2_router_items_have_their_formulas():
    """Per token, bf16, against the families' earlier fall-through rules: Qwen2-MoE adds the
    gate's sigmoid (1 value) and the shared output (h) the product keeps, drops Qwen3's
    renormalisation (sum + K fp32) when norm_topk_prob is false; DeepSeek-V2 keeps an fp32 copy
    of the router input (h fp32) and, group-limited, an E-byte mask."""
    prof, t = HFProfile(device="cpu"), TrainSpec(micro_batch=1, seq=1, precision="bf16", profile="hf")

    def items(m):
        return {x.name: tensor_bytes(x, m, t, P) for x in prof.layer(m, "moe", t, P)}
    _, q2 = build("qwen2moe", SMALL)
    got = items(q2)
    assert (got["shared.gate_sigmoid"], got["shared.out"]) == (2, 2 * 64)
    assert "moe.topk_sum" not in got and got["experts.weight"] == 2 * 2  # K bf16 weights
    _, v2 = build("dsv2", {**SMALL, "topk_method": "group_limited_greedy"})
    got = items(v2)
    assert (got["moe.router_in_fp32"], got["moe.group_mask"], got["experts.weight"]) == (4 * 64, 4, 4 * 2)
    assert "moe.topk_sum" not in got and "moe.topk_weights" not in got
