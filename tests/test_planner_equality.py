"""The vectorised evaluator gives, for every configuration, exactly the most-loaded-rank
`peak_total_bytes` of the scalar ledger — checked byte for byte on seeded random samples of
every configuration the planner evaluated (fitting or not), across dense, MoE, MLA, tied,
vocab-less models, every precision recipe family, optimizers with odd state shapes (8-bit
blocks, factored, Muon with its step workspace), the megatron, paper and traced-HF activation
profiles (whose inventory depends on the micro-batch), amp's autocast casts, non-default
runtime knobs (buffer sizing rules, DeepSpeed ZeRO-3, NCCL protocols), every training-loop
preset (on-demand gradients: the walked timeline's peak, planner.memory.lifetimes) and the
megatron-2021 framework, whose tp > 1 rows run without sequence parallelism."""
import random
from dataclasses import replace
from pathlib import Path

import pytest

from memledger import build_ledger, gpu, model
from memledger.model.hf_config import load_hf_config
from memledger.planner import Constraints, PlanSpec, plan
from memledger.specs.finetune import FinetuneSpec
from memledger.specs.runtime import RuntimeSpec



def _v2_group_limited():
    """DeepSeek-V2-Lite cut to 4 layers, with the full V2's group_limited_greedy routing."""
    m = load_hf_config(Path(__file__).parent / "fixtures" / "hf" / "DeepSeek-V2-Lite.json")
    return replace(m, n_layers=4, moe=replace(m.moe, group_limited=True))


SCENARIOS = {
    "llama3-8b": dict(model="llama3-8b", worlds=(8,), seq=8192, global_batch=64),
    "llama3.2-1b tied, fp8, adam8bit": dict(
        model="llama3.2-1b", worlds=(16,), seq=2048, global_batch=64, precision="fp8",
        optimizer="adam8bit"),
    "mixtral capacity a2a": dict(
        model="mixtral-8x7b", worlds=(16,), seq=4096, global_batch=32,
        runtime=RuntimeSpec(a2a="capacity", capacity_factor_pct=125)),
    "deepseek-v3 MLA+MoE+MTP": dict(
        model="deepseek-v3", worlds=(64,), seq=4096, global_batch=64,
        constraints=Constraints(max_vpp=3)),
    "qwen3-30b worst-case a2a, muon, deepspeed buckets": dict(
        model="qwen3-30b-a3b", worlds=(32,), seq=4096, global_batch=64, optimizer="muon",
        runtime=RuntimeSpec(a2a="worst-case", grad_buckets="deepspeed")),
    "gpt3 paper profile, adafactor, foreach": dict(
        model="gpt3-175b", worlds=(16,), seq=2048, global_batch=32, profile="paper",
        optimizer="adafactor", runtime=RuntimeSpec(optimizer_impl="foreach")),
    "korthikanti-22b vocab 0, mixed16": dict(
        model="korthikanti-22b", worlds=(8,), seq=2048, global_batch=16, precision="mixed16",
        profile="paper"),
    "llama3-70b bf16 sgd, no slack, two worlds": dict(
        model="llama3-70b", worlds=(16, 32), seq=4096, global_batch=64, precision="bf16",
        optimizer="sgd", runtime=RuntimeSpec(allocator_slack_pct=0, cuda_context_bytes=0),
        constraints=Constraints(max_vpp=4)),
    "kimi-k2 fp32 adamw-bf16 on h200": dict(
        model="kimi-k2", worlds=(64,), seq=2048, global_batch=64, precision="fp32",
        optimizer="adamw-bf16", gpu="h200", constraints=Constraints(max_vpp=2, max_cp=2)),
    "amp autocast casts": dict(model="llama3.2-1b", worlds=(8,), seq=2048, global_batch=32,
                               precision="amp"),
    "mixtral fp16 recipe": dict(
        model="mixtral-8x7b", worlds=(16,), seq=2048, global_batch=32, precision="fp16",
        constraints=Constraints(max_vpp=2)),
    "qwen3 deepep low-latency buffers": dict(
        model="qwen3-30b-a3b", worlds=(16,), seq=2048, global_batch=32,
        runtime=RuntimeSpec(a2a="deepep-ll"), constraints=Constraints(max_vpp=2)),
    "deepspeed zero-3, LL buffers, no overlap": dict(
        model="llama3-8b", worlds=(16,), seq=4096, global_batch=32,
        runtime=RuntimeSpec(zero3_impl="deepspeed", nccl_ll_buffer_bytes=524288,
                            grad_buckets="deepspeed", overlap_comm=False)),
    "muon foreach, full gather": dict(
        model="llama3-8b", worlds=(8,), seq=2048, global_batch=16, optimizer="muon",
        runtime=RuntimeSpec(optimizer_impl="foreach", muon_gather="full")),
    "hf profile, eager attention": dict(model="llama3.2-1b", worlds=(8,), seq=1024,
                                        global_batch=16, profile="hf", attention="eager"),
    "hf-cpu profile, MLA + MoE": dict(
        model="deepseek-v3", worlds=(64,), seq=1024, global_batch=64, profile="hf-cpu",
        constraints=Constraints(max_vpp=2, max_cp=2)),
    "loop pytorch (set_to_none, foreach), llama3-8b": dict(
        model="llama3-8b", worlds=(16,), seq=4096, global_batch=32,
        runtime=RuntimeSpec(loop="pytorch")),
    "loop hf-trainer, amp with full recompute (cast cache, recompute set)": dict(
        model="llama3.2-1b", worlds=(8,), seq=2048, global_batch=32, precision="amp",
        profile="hf", runtime=RuntimeSpec(loop="hf-trainer")),
    "loop torchtitan, deepseek-v3 without MTP": dict(
        model="deepseek-v3", worlds=(64,), seq=2048, global_batch=64,
        runtime=RuntimeSpec(loop="torchtitan", pp_engine="megatron"),
        constraints=Constraints(max_vpp=2)),
    "loop deepspeed, mixtral": dict(
        model="mixtral-8x7b", worlds=(16,), seq=2048, global_batch=32,
        runtime=RuntimeSpec(loop="deepspeed", grad_buckets="deepspeed")),
    "loop megatron, hf profile": dict(
        model="qwen3-30b-a3b", worlds=(16,), seq=2048, global_batch=32, profile="hf",
        runtime=RuntimeSpec(loop="megatron"), constraints=Constraints(max_vpp=2)),
    "on-demand, chunked loss, for-loop AdamW, mixed16 cast": dict(
        model="qwen3-30b-a3b", worlds=(16,), seq=2048, global_batch=16, precision="mixed16",
        runtime=RuntimeSpec(loop="pytorch", loss="chunked", optimizer_impl="for-loop")),
    "muon with HF's 3-D experts left to AdamW, on-demand": dict(
        model="qwen3-30b-a3b", worlds=(16,), seq=2048, global_batch=16, optimizer="muon",
        profile="hf", runtime=RuntimeSpec(loop="hf-trainer"), constraints=Constraints(max_vpp=2)),
    "on-demand, alternating dense/MoE layers (run ends)": dict(
        model=load_hf_config(Path(__file__).parent / "fixtures" / "hf" /
                             "tiny-deepseek-v3-moe-layer-freq-2.json"),
        worlds=(4,), seq=256, global_batch=16, runtime=RuntimeSpec(loop="pytorch")),
    "hf profile, persistent gradients (a dense layer's backward set)": dict(
        model="llama3.2-1b", worlds=(8,), seq=2048, global_batch=32, profile="hf",
        runtime=RuntimeSpec(loop="megatron")),
    "hf profile, amp, persistent, full recompute (backward set on the recompute set)": dict(
        model="llama3.2-1b", worlds=(8,), seq=1024, global_batch=16, precision="amp",
        profile="hf", runtime=RuntimeSpec(loop="megatron")),
    "hf-cpu, persistent, alternating dense/MoE (backward set on dense-only ranks)": dict(
        model=load_hf_config(Path(__file__).parent / "fixtures" / "hf" /
                             "tiny-deepseek-v3-moe-layer-freq-2.json"),
        worlds=(4,), seq=256, global_batch=16, profile="hf-cpu",
        runtime=RuntimeSpec(loop="megatron")),
    "hf profile, amp, DeepSeek-V2 router (fp32 input, group mask, no renormalisation)": dict(
        model=_v2_group_limited(),
        worlds=(8,), seq=1024, global_batch=16, precision="amp", profile="hf"),
    "hf profile, Qwen2-MoE shared_expert_gate, alternating dense/MoE": dict(
        model=load_hf_config(Path(__file__).parent / "fixtures" / "hf" /
                             "tiny-qwen2-moe-sparse-step-2.json"),
        worlds=(4,), seq=256, global_batch=16, profile="hf"),
    # megatron-2021 has no sequence parallelism: tp > 1 rows with sp False at every site (its
    # search is small — no ZeRO, CP or selective recompute — so the spaces here are larger)
    "megatron-2021 (no SP), llama3-8b": dict(
        model="llama3-8b", worlds=(32,), seq=4096, global_batch=128, framework="megatron-2021"),
    "megatron-2021 (no SP), paper profile, eager, fp16 (the 2021 reference runs)": dict(
        model="gpt3-175b", worlds=(64,), seq=2048, global_batch=256, precision="fp16",
        profile="paper", attention="eager", framework="megatron-2021",
        constraints=Constraints(max_vpp=2)),
    "megatron-2022 (SP, selective), paper profile, eager, fp16 (the 2022 reference runs)": dict(
        model="korthikanti-22b", worlds=(16,), seq=2048, global_batch=64, precision="fp16",
        profile="paper", attention="eager", framework="megatron-2022"),
    "megatron-2021 (no SP), amp autocast casts": dict(
        model="llama3.2-1b", worlds=(32,), seq=2048, global_batch=256, precision="amp",
        framework="megatron-2021"),
    # fine-tuning (ledger/static/finetune.py, activations/finetune.py): frozen groups, adapters
    # split over tp, a quantised base with per-tensor constants, fewer saved inputs
    "lora all-linear, fp32 adapters, dropout, hf profile": dict(
        model="llama3-8b", worlds=(8,), seq=2048, global_batch=16, profile="hf",
        finetune=FinetuneSpec(mode="lora", lora_rank=16, lora_targets=("all-linear",),
                              lora_dropout_pct=5)),
    "qlora nf4 double-quant, mixtral, megatron profile": dict(
        model="mixtral-8x7b", worlds=(8,), seq=2048, global_batch=16,
        finetune=FinetuneSpec(mode="qlora", lora_targets=("attention",), base_weights="nf4"),
        constraints=Constraints(max_vpp=2)),
    "freeze head, attention and layers 8-15 (the embedding trains)": dict(
        model="llama3-8b", worlds=(8,), seq=2048, global_batch=16, profile="hf",
        finetune=FinetuneSpec(mode="freeze", freeze=("head", "attention", "layers:8-15"))),
}
SAMPLES = 300


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_vectorised_peak_equals_scalar_ledger_byte_for_byte(name):
    kw = dict(SCENARIOS[name])
    m = kw.pop("model")
    spec = PlanSpec(model=model(m) if isinstance(m, str) else m,
                    hardware=gpu(kw.pop("gpu", "h100")), **kw)
    result = plan(spec, keep_all=True)
    n = result.n_evaluated
    assert n == len(result.evaluated.peak_bytes) > SAMPLES
    rng = random.Random(name)
    rows = result.rows(sorted(rng.sample(range(n), SAMPLES)))
    mismatches = []
    for row in rows:
        p, t = result.specs(row)
        want = build_ledger(spec.model, p, t, spec.runtime).peak.peak_total_bytes
        if want != row["peak_bytes"]:
            mismatches.append((row, want))
    assert not mismatches, f"{len(mismatches)} of {SAMPLES} differ, e.g. {mismatches[0]}"
