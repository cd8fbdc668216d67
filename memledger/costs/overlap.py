"""What each training framework overlaps, and which kernels it runs — the part of a step time
that is a property of the software, not of the layout.

- megatron-2021: Megatron-LM as measured in Narayanan et al. 2021 (arXiv 2104.04473): no
  flash attention (scores as batched GEMMs + fused softmax), no sequence parallelism (norms and
  dropout replicated over tp), tensor-parallel all-reduces exposed, blocking pipeline
  send/recv. Data-parallel gradients: the paper's runs (NVIDIA/Megatron-LM
  examples/sc21/run_table_1.sh) use PyTorch DDP (`--DDP-impl torch`) without pipelining —
  `forward_backward_no_pipelining` wraps all but the last micro-batch in `model.no_sync()`, so
  the bucketed all-reduce runs during the last backward — and Megatron's own DDP
  (`--DDP-impl local`) with pipelining, which all-reduces after the flush (§2.2), exposed.
  Pipeline send/recv with the scatter/gather optimisation (§4.1, on by default; the sc21
  scripts turn it off only for Fig. 18's comparison): each tp rank sends 1/tp of the
  activation over its own NIC and the receivers all-gather it over NVLink. Weight gradients
  accumulate over micro-batches in a separate memory-bound add (Megatron's DDP hook
  `main_grad.add_(grad)` after every micro-batch's backward into its zeroed buffer; PyTorch
  DDP's autograd `AccumulateGrad` adds in place from the second micro-batch on): fp16
  gradients, since `--accumulate-allreduce-grads-in-fp32` is forced for bf16 only.
- megatron-2022: Megatron-LM as measured in Korthikanti et al. 2022 (arXiv 2205.05198): the
  2021 framework with the paper's two techniques, sequence parallelism (norms and dropout split
  over tp; all-gather + reduce-scatter in place of each all-reduce) and selective activation
  recomputation (the attention core recomputed, the rest kept). Nothing else is documented as
  changed for those runs, so everything else is the 2021 framework's — TP exposed, blocking
  send/recv, the separate gradient-accumulation add, no ZeRO or CP. (Two Megatron-LM features
  of that time would shorten its steps — gradient-accumulation fusion, in apex's port of
  Megatron's tensor-parallel layers by March 2022 (NVIDIA/apex PR 1317), and the backward's TP
  all-reduce overlapped with the weight-gradient GEMM; whether the paper's runs had them is not
  said, so they are not modelled here: docs/step-time.md, "Korthikanti et al. 2022", gives
  what each would change.)
- megatron-core: Megatron-Core ≥ 0.5 defaults a large run turns on: flash attention, sequence
  parallel, `--overlap-grad-reduce` / `--overlap-param-gather` (the data-parallel reduce hides
  behind the last micro-batch's backward), context-parallel ring attention overlapping each K/V
  hop with the previous block's attention (Megatron-Core `context_parallel` docs), TP
  communication exposed (`--tp-comm-overlap` off by default), ZeRO-3-style gathers prefetched.
  Under DualPipe the MoE all-to-all of one micro-batch hides behind the other's compute
  (DeepSeek-V3 report, arXiv 2412.19437 §3.2.1), up to that compute's length. Gradient
  accumulation fusion on (its default; `--no-gradient-accumulation-fusion` turns it off): the
  weight-gradient GEMM accumulates into the fp32 main gradient itself, no separate add.
Used by `memledger.costs.stepmodel`; the planner runs `megatron-core` unless told otherwise.

Each framework also bounds the planner's search to what it can run (`planner.question.space`,
`planner.sweep.evaluate`). Megatron-LM as of the 2021 paper (its sc21 scripts): pipeline schedules
1F1B and interleaved only (zero-bubble and DualPipe came in 2023–24); interleaving refused at
pp ≤ 2 (`parallel_state`: "pipeline-model-parallel size should be greater than 2 with
interleaved schedule") and for micro-batch counts pp does not divide (its interleaved schedule:
"number of microbatches is not divisible by pipeline-parallel size"); stages of equal layer
counts only (`ParallelTransformer` asserts n_layers divisible by pp); no context parallelism
(2023), no distributed optimizer (ZeRO-1 in Megatron came in 2022), and full activation
recomputation (`--checkpoint-activations`) or none — selective recomputation came with
Korthikanti et al. 2022. `megatron-2022` has the same bounds with selective recomputation
added (the distributed optimizer postdates the paper's runs). `megatron-core` keeps the
planner's whole space (uneven stages via its first/last-stage layer counts; interleaving at
pp ≥ 2 with m ≥ pp, `ledger.pipeline.engines`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from memledger.errors import lookup


@dataclass(frozen=True, kw_only=True)
class Framework:
    name: str
    flash: bool  # flash attention: causal blocks skipped, no s² traffic
    sp: bool  # sequence parallel: element-wise work split over tp
    tp_hidden: float  # fraction of TP communication hidden behind GEMMs
    dp_overlap: bool  # gradient reduce overlapped with the last micro-batch's backward
    dp_overlap_no_pipeline: bool  # ... but only when pp = 1 (PyTorch DDP + no_sync, 2021)
    pp_scatter_gather: bool  # without SP: send/recv 1/tp per rank, all-gather over NVLink
    cp_overlap: bool  # ring attention overlaps each K/V hop with a block's attention
    dualpipe_hides_ep: bool  # DualPipe: all-to-all hidden behind the paired compute
    prefetch: bool  # ZeRO-3 gathers prefetched behind compute
    grad_accum_fused: bool  # weight-gradient GEMMs accumulate into the gradient buffer
    description: str = ""
    # what it can run (the planner's search bounds)
    schedules: tuple[str, ...] = ("1f1b", "interleaved", "dualpipe")
    uneven_stages: bool = True  # stages of unequal layer counts
    interleave_min_pp: int = 2  # interleaving needs pp ≥ this
    interleave_m_multiple: bool = False  # interleaving needs micro-batches divisible by pp
    context_parallel: bool = True
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str, ...] = ("none", "selective", "full")


_MEGATRON_2021 = Framework(
    name="megatron-2021", flash=False, sp=False, tp_hidden=0.0, dp_overlap=False,
    dp_overlap_no_pipeline=True, pp_scatter_gather=True, cp_overlap=False,
    dualpipe_hides_ep=False, prefetch=False, grad_accum_fused=False,
    description="Megatron-LM as in Narayanan et al. 2021: no flash, no SP, DP reduce overlapped "
                "only without pipelining",
    schedules=("1f1b", "interleaved"), uneven_stages=False, interleave_min_pp=3,
    interleave_m_multiple=True, context_parallel=False, zero_stages=(0,),
    recompute=("none", "full"))

FRAMEWORKS: dict[str, Framework] = {
    f.name: f for f in (
        _MEGATRON_2021,
        # scatter/gather stays on: under SP a rank sends its 1/tp share anyway (stepmodel)
        replace(_MEGATRON_2021, name="megatron-2022", sp=True,
                recompute=("none", "selective", "full"),
                description="Megatron-LM as in Korthikanti et al. 2022: the 2021 framework "
                            "with sequence parallelism and selective recomputation"),
        Framework(name="megatron-core", flash=True, sp=True, tp_hidden=0.0, dp_overlap=True,
                  dp_overlap_no_pipeline=True, pp_scatter_gather=False, cp_overlap=True,
                  dualpipe_hides_ep=True, prefetch=True, grad_accum_fused=True,
                  description="Megatron-Core: flash, SP, DP reduce and CP ring overlapped, "
                              "TP exposed"),
    )
}


def framework(name: str) -> Framework:
    return lookup("framework", FRAMEWORKS, name, "framework")
