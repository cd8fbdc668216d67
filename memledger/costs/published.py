"""Published trainings with their full layouts and measured throughput: the reference set the
step-time model is checked against (docs/step-time.md, tests/test_reference_runs.py).

- Megatron-LM weak scaling, Narayanan et al. 2021 (arXiv 2104.04473) Table 1: GPT models of
  1.7B to 1T parameters on A100 80GB (DGX A100: 8 per node, 8 × 200 Gb/s HDR per node), seq
  2048, vocabulary 51,200, activation recomputation on, fp16 mixed precision with Adam, no
  ZeRO. Planned with the `paper` activation profile and eager attention: Megatron-LM's GPT of
  2021 kept dropout (`--hidden-dropout` and `--attention-dropout` default to 0.1 in
  megatron/arguments.py) and computed attention as batched GEMMs + fused softmax (flash
  attention, Dao et al. 2022, came later) — the layer Korthikanti et al. 2022 (arXiv
  2205.05198) §4 counts as sbh(34 + 5as/h); no sequence parallelism (introduced there, 2022:
  `framework` megatron-2021 turns it off on the memory side too, `PlanSpec.sequence_parallel`).
  "Achieved TFLOP/s per GPU" there counts FLOPs with the paper's eq. 3,
  96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per step — recompute included, attention over the full
  s×s square — so the prediction is converted with the same formula.
- Megatron-LM with sequence parallelism, Korthikanti et al. 2022 (arXiv 2205.05198) Table 5:
  seconds per step of GPT 22B, 175B, 530B and 1T (Table 3: tp 8; pp 1, 8, 35, 64, interleaved
  v = 3 at 175B and 530B; dp 1; batch 4, 64, 280, 512; micro-batch 4, 1, 1, 1; A100 80GB,
  fp16, seq 2048) with full recomputation and no SP (the baseline: `megatron-2021`'s features)
  and with SP + selective recomputation (`megatron-2022`). Transcribed, with the layouts, in
  calculon-ai/calculon `validation/seqsel/tab5`; their model-FLOP rates are the 41.5 / 51.4 /
  56.0 / 56.3 % MFU NVIDIA/Megatron-LM's README prints for these runs (a test checks that).
  TFLOP/s here: eq. 3 for the full-recompute rows (as Table 1), the model FLOPs
  72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) for the selective ones.
- Llama 3, Dubey et al. 2024 (arXiv 2407.21783) Table 4: Llama 3 405B on H100 80GB (700 W),
  tp 8, pp 16, cp 1 or 16, 16M tokens per batch, "TFLOPs/GPU" and BF16 MFU; FLOPs counted
  here as the model's 3 × forward FLOPs (causal attention; `memledger.model.flops`).
- DeepSeek-V3, DeepSeek-AI 2024 (arXiv 2412.19437) §3.2 and §4.2: 2,048 H800 GPUs, pp 16
  (DualPipe), ep 64 over 8 nodes, ZeRO-1 data parallelism, no TP, seq 4096, final batch
  15,360 sequences. Trained in FP8 on H800 (NVLink 400 GB/s): the report gives GPU-hours per
  trillion tokens, not TFLOP/s, and the planner models bf16 on H100, so this entry checks the
  layout (fits, rank) and not the throughput.
- Layout comparisons, Narayanan et al. 2021 Figs. 12–16 (`LAYOUT_FIGURES`): one model's
  configurations measured side by side — no table of numbers, but the paper's findings are
  orderings a ranking model must reproduce: Fig. 12 (GPT 175B on 96 A100) faster interleaved
  at every batch; Fig. 13 fastest at tp = 8, the GPUs of a node; Figs. 14 and 15 slower at
  every step up in pp or tp, at every batch size; Fig. 16 (GPT 91B, tp 8 × pp 8) fastest at
  micro-batch 2 (§5.5).
The open search of an entry is bounded by what its framework can run (`costs.overlap`: the
2021 Megatron runs are ranked among layouts without ZeRO, CP, uneven stages or DualPipe, and
interleaved only where Megatron-LM 2021 allowed it) and by `constraints` (full recompute, as
run).
Entries the papers do not pin are left to the planner: an entry's prediction is the fastest
configuration with the published axes fixed (the Megatron rows pin everything, micro-batch
size and interleaving included, from the paper's run scripts; Llama 3 leaves micro-batch and
vpp, DeepSeek-V3 the micro-batch, to the planner).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from memledger.model.presets import model
from memledger.specs.model import ModelSpec

MEGATRON_VOCAB = 51200
MEGATRON_SEQ = 2048


@dataclass(frozen=True, kw_only=True)
class PublishedRun:
    name: str
    model: ModelSpec
    gpu: str  # preset in memledger.presets.gpus
    world: int
    seq: int
    global_batch: int  # sequences
    layout: dict  # published axes: tp, pp, cp, dp, ep, zero, recompute, schedule
    tflops_per_gpu: float | None  # as published (None: not published)
    flops_convention: str  # "megatron-eq3" | "megatron-model" | "model"
    framework: str
    precision: str = "megatron"
    profile: str = "megatron"  # activation profile the framework's layers match (TrainSpec)
    attention: str = "flash"  # attention kernel the run used (TrainSpec)
    source: str = ""
    constraints: dict = field(default_factory=dict)  # search bounds beyond the layout


def gpt(params_b: str, heads: int, hidden: int, layers: int) -> ModelSpec:
    return ModelSpec(name=f"GPT {params_b}B (Megatron-LM 2021)", n_layers=layers, hidden=hidden,
                     n_heads=heads, n_kv_heads=heads, head_dim=hidden // heads,
                     ffn_hidden=4 * hidden, vocab=MEGATRON_VOCAB, mlp="gelu", norm="layernorm",
                     linear_bias=True, tied_embeddings=True, pos_embeddings=MEGATRON_SEQ,
                     source="Narayanan et al. 2021 (arXiv 2104.04473) Table 1")


def megatron_eq3_flops(m: ModelSpec, seq: int, global_batch: int) -> float:
    """FLOPs of one step by Narayanan et al. 2021 eq. 3 (recompute included)."""
    h, l, v = m.hidden, m.n_layers, m.vocab
    return 96.0 * global_batch * seq * l * h * h * (1 + seq / (6 * h) + v / (16 * l * h))


def megatron_model_flops(m: ModelSpec, seq: int, global_batch: int) -> float:
    """Model FLOPs of one step (no recompute): Korthikanti et al. 2022 §6, the count behind its
    MFU, 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))."""
    h, l, v = m.hidden, m.n_layers, m.vocab
    return 72.0 * global_batch * seq * l * h * h * (1 + seq / (6 * h) + v / (12 * l * h))


# a run's FLOP convention -> its FLOPs per step (m, seq, global batch); "model" is this
# project's 3 × forward count (`planner.answer.reference.step_flops`)
FLOP_COUNTS = {"megatron-eq3": megatron_eq3_flops, "megatron-model": megatron_model_flops}


# What these runs used beyond what the framework bounds (`costs.overlap`'s megatron-2021: no
# ZeRO, no CP, 1F1B or interleaved with its limits, equal stages): full activation
# recomputation, as the sc21 scripts run every Table 1 model (`--checkpoint-activations`)
MEGATRON_2021_FEATURES = dict(recompute="full")

# params (B), heads, hidden, layers, tp, pp, GPUs, batch, achieved TFLOP/s per GPU (Table 1);
# micro-batch size and layers per virtual stage (vpp = layers / pp / that; 1: no interleaving)
# from the paper's own run scripts, NVIDIA/Megatron-LM examples/sc21/run_table_1.sh
_MEGATRON_TABLE1 = (
    ("1.7", 24, 2304, 24, 1, 1, 32, 512, 137, 16, 1),
    ("3.6", 32, 3072, 30, 2, 1, 64, 512, 138, 16, 1),
    ("7.5", 32, 4096, 36, 4, 1, 128, 512, 142, 16, 1),
    ("18.4", 48, 6144, 40, 8, 1, 256, 1024, 135, 8, 1),
    ("39.1", 64, 8192, 48, 8, 2, 512, 1536, 138, 4, 1),
    ("76.1", 80, 10240, 60, 8, 4, 1024, 1792, 140, 2, 3),
    ("145.6", 96, 12288, 80, 8, 8, 1536, 2304, 148, 2, 2),
    ("310.1", 128, 16384, 96, 8, 16, 1920, 2160, 155, 1, 2),
    ("529.6", 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, 3),
    ("1008.0", 160, 25600, 128, 8, 64, 3072, 3072, 163, 1, 1),
)


def megatron_2021_run(name: str, m: ModelSpec, world: int, global_batch: int, tp: int, pp: int,
                      micro_batch: int, vpp: int, tflops_per_gpu: float | None,
                      source: str) -> PublishedRun:
    """A run of the 2021 paper: A100 80GB, fp16, the `paper` profile with eager attention,
    no ZeRO or CP, full recompute, FLOPs by eq. 3, planned as `megatron-2021`."""
    return PublishedRun(
        name=name, model=m, gpu="a100-80gb", world=world, seq=MEGATRON_SEQ,
        global_batch=global_batch,
        layout=dict(tp=tp, pp=pp, cp=1, dp=world // (tp * pp), zero=0, recompute="full",
                    micro_batch=micro_batch, vpp=vpp,
                    schedule="interleaved" if vpp > 1 else "1f1b"),
        tflops_per_gpu=tflops_per_gpu, flops_convention="megatron-eq3", framework="megatron-2021",
        precision="fp16", profile="paper", attention="eager",
        source=f"Narayanan et al. 2021 (arXiv 2104.04473) {source}",
        constraints=MEGATRON_2021_FEATURES)


MEGATRON_2021 = tuple(
    megatron_2021_run(f"Megatron-LM GPT {p}B", gpt(p, a, h, l), n, b, tp, pp, mb, vpp, f,
                      "Table 1")
    for p, a, h, l, tp, pp, n, b, f, mb, vpp in _MEGATRON_TABLE1)

# GPUs, tp, cp, pp, dp, seq, batch per dp replica, TFLOP/s per GPU (Table 4)
_LLAMA3_TABLE4 = (
    (8192, 8, 1, 16, 64, 8192, 32, 430),
    (16384, 8, 1, 16, 128, 8192, 16, 400),
    (16384, 8, 16, 16, 8, 131072, 16, 380),
)

LLAMA3 = tuple(
    PublishedRun(name=f"Llama 3 405B, {n:,} GPUs, seq {s:,}", model=model("llama3.1-405b"),
                 gpu="h100", world=n, seq=s, global_batch=dp * per_dp,
                 layout=dict(tp=tp, pp=pp, cp=cp, dp=dp), tflops_per_gpu=f,
                 flops_convention="model", framework="megatron-core",
                 source="Dubey et al. 2024 (arXiv 2407.21783) Table 4")
    for n, tp, cp, pp, dp, s, per_dp, f in _LLAMA3_TABLE4)

DEEPSEEK_V3 = PublishedRun(
    name="DeepSeek-V3, 2,048 GPUs", model=model("deepseek-v3"), gpu="h100", world=2048, seq=4096,
    global_batch=15360, layout=dict(tp=1, pp=16, ep=64, cp=1, dp=128, zero=1,
                                    schedule="dualpipe"),
    tflops_per_gpu=None, flops_convention="model", framework="megatron-core",
    source="DeepSeek-AI 2024 (arXiv 2412.19437) §3.2, §4.2 (H800, FP8; run here as H100 bf16)")

# model, heads, hidden, layers, pp, vpp, GPUs, batch, micro-batch, seconds per step with
# full recompute and with SP + selective (Korthikanti et al. 2022 Tables 3 and 5; tp 8, dp 1)
_KORTHIKANTI_TABLE5 = (
    ("22B", 64, 6144, 48, 1, 1, 8, 4, 4, 1.42, 1.10),
    ("175B", 96, 12288, 96, 8, 3, 64, 64, 1, 18.13, 13.75),
    ("530B", 128, 20480, 105, 35, 3, 280, 280, 1, 49.05, 37.83),
    ("1T", 160, 25600, 128, 64, 1, 512, 512, 1, 94.42, 71.49),
)


def korthikanti_2022_run(p: str, m: ModelSpec, pp: int, vpp: int, world: int, batch: int,
                         mb: int, seconds: float, selective: bool) -> PublishedRun:
    """A run of Table 5 (tp 8, dp 1); its TFLOP/s per GPU from the measured step."""
    rc, convention = ("selective", "megatron-model") if selective else ("full", "megatron-eq3")
    run = megatron_2021_run(
        f"Korthikanti 2022 GPT {p}, " + ("SP + selective" if selective else "full recompute"),
        m, world, batch, 8, pp, mb, vpp, None, "Table 5")
    flops = FLOP_COUNTS[convention](m, run.seq, batch)
    return replace(run, layout=run.layout | {"recompute": rc},
                   tflops_per_gpu=flops / (seconds * world) / 1e12, flops_convention=convention,
                   framework="megatron-2022" if selective else "megatron-2021",
                   source=f"Korthikanti et al. 2022 (arXiv 2205.05198) Tables 3 and 5: "
                          f"{seconds} s a step",
                   constraints={"recompute": rc})


KORTHIKANTI_2022 = tuple(
    korthikanti_2022_run(p, replace(gpt(p, a, h, l), name=f"GPT {p} (Korthikanti et al. 2022)",
                                    source="Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"),
                         pp, vpp, n, b, mb, t, sel)
    for p, a, h, l, pp, vpp, n, b, mb, t_full, t_sel in _KORTHIKANTI_TABLE5
    for t, sel in ((t_full, False), (t_sel, True)))

REFERENCE_RUNS: tuple[PublishedRun, ...] = (MEGATRON_2021 + KORTHIKANTI_2022 + LLAMA3
                                            + (DEEPSEEK_V3,))


@dataclass(frozen=True)
class Layout:
    """One configuration a figure measured: tp × pp and what else its run script varied (the
    micro-batch size; vpp > 1: the interleaved schedule with that many virtual stages)."""

    tp: int
    pp: int
    micro_batch: int = 1
    vpp: int = 1

    def label(self, shows: tuple[str, ...]) -> str:
        names = {"tp": f"tp{self.tp}", "pp": f"pp{self.pp}", "micro_batch": f"mb{self.micro_batch}",
                 "vpp": "1F1B" if self.vpp == 1 else f"interleaved v{self.vpp}"}
        return "×".join(names[k] for k in shows)


@dataclass(frozen=True, kw_only=True)
class LayoutFigure:
    """Configurations of one model that Narayanan et al. 2021 measured side by side, and what
    they found: `fastest`, the configuration that ran fastest at every batch size, or None when
    each ran slower than the one before it. Everything else as in the paper's run scripts
    (NVIDIA/Megatron-LM examples/sc21/run_figure_*.sh): A100 80GB in DGX nodes of 8, full
    recompute, dp = world / (tp·pp). `shows`: the axes the figure varies (its labels)."""

    name: str
    model: ModelSpec
    layouts: tuple[Layout, ...]
    global_batches: tuple[int, ...]
    fastest: Layout | None
    world: int = 64
    shows: tuple[str, ...] = ("tp", "pp")

    def run(self, layout: Layout, global_batch: int) -> PublishedRun:
        return megatron_2021_run(
            f"{self.name}: {layout.label(('tp', 'pp', 'micro_batch', 'vpp'))}, batch "
            f"{global_batch}", self.model, self.world, global_batch, layout.tp, layout.pp,
            layout.micro_batch, layout.vpp, None, self.name.split(":")[0])


_DEGREES = (2, 4, 8, 16, 32)
LAYOUT_FIGURES: tuple[LayoutFigure, ...] = (
    # run_figure_12.sh: tp 8, pp 12, mb 1, 96 layers; interleaved with 2 layers per virtual
    # stage (vpp = 96 / 12 / 2 = 4) or not; §5.3.2: interleaved faster, the gap closing with batch
    LayoutFigure(name="Fig. 12: GPT 175B, interleaved vs non-interleaved schedule",
                 model=gpt("175", 96, 12288, 96), layouts=(Layout(8, 12), Layout(8, 12, vpp=4)),
                 global_batches=(12, 24, 36, 48, 60), fastest=Layout(8, 12, vpp=4), world=96,
                 shows=("vpp",)),
    LayoutFigure(name="Fig. 13: GPT 162.2B, tensor vs pipeline parallelism",
                 model=gpt("162.2", 128, 20480, 32),
                 layouts=tuple(Layout(64 // p, p) for p in _DEGREES),
                 global_batches=(32, 128), fastest=Layout(8, 8)),
    LayoutFigure(name="Fig. 14: GPT 5.9B, pipeline vs data parallelism",
                 model=gpt("5.9", 32, 3840, 32), layouts=tuple(Layout(1, p) for p in _DEGREES),
                 global_batches=(32, 512), fastest=None),
    LayoutFigure(name="Fig. 15: GPT 5.9B, tensor vs data parallelism",
                 model=gpt("5.9", 32, 3840, 32), layouts=tuple(Layout(t, 1) for t in _DEGREES),
                 global_batches=(32, 128, 512), fastest=None),
    # run_figure_16.sh: tp 8, pp 8, 32 layers, h 15360, 128 heads, mb 1–8, batch 128 and 512;
    # §5.5: "the best microbatch size is 2 for this model"
    LayoutFigure(name="Fig. 16: GPT 91B, micro-batch size",
                 model=gpt("91", 128, 15360, 32),
                 layouts=tuple(Layout(8, 8, micro_batch=b) for b in (1, 2, 4, 8)),
                 global_batches=(128, 512), fastest=Layout(8, 8, micro_batch=2),
                 shows=("micro_batch",)),
)
