"""Kernel efficiency by shape: how fast one rank's matrix multiplies, attention and element-wise
kernels run, as a fraction of the GPU's dense bf16 peak (or of its HBM bandwidth).

- GEMM: efficiency = e_max · n/(n + n_half), where n is the GEMM's *intensity-equivalent size*
  3/(1/M + 1/N + 1/K) — the edge of the square GEMM with the same arithmetic intensity
  (MNK / (MN + NK + MK)). A small h/tp, few tokens (b·s/cp) or thin experts shrink n and the
  efficiency with it. (e_max, n_half) per GPU are fitted to square bf16 GEMM throughput as a
  fraction of peak: CUTLASS 3.5 on H100 SXM at M=N=K = 1024 / 4096 / 8192 ≈ 58 / 70 / 75 %
  (NVIDIA CUTLASS performance notes, cuBLAS within a few %): e_max = 0.78, n_half = 358.
  A100: the same curve shape with e_max = 0.80 (cuBLAS fp16/bf16 large GEMMs ≈ 250 of
  312 TFLOP/s, NVIDIA "Matrix Multiplication Background" user's guide, A100 figures).
  Other GPUs reuse the H100 curve (no published sweep used here).
- Sustained clock: the datasheet peak is quoted at a boost clock a GPU does not hold through
  hours of dense tensor-core work at its power limit. A100: NVIDIA's HPL Rpeak uses the clock
  sustained at the power limit, 1305 of 1410 MHz (G. Lockwood, "peak FLOPS" notes). H100 SXM:
  the 989 TFLOP/s figure is at 1830 MHz; assumed to settle at its 1590 MHz base clock at 700 W
  (an assumption: no published sustained-clock figure was used; it is the term that moves the
  H100 reference entries most, docs/step-time.md). Microbenchmarks (CUTLASS) run too briefly
  to throttle, so the GEMM curves above are at boost clock and this factor multiplies them.
- Attention core: flash attention at e_attn · q/(q + q_half) of peak over the causal FLOPs, q
  the query rows per rank (s/cp): FlashAttention-2 (Dao 2023, arXiv 2307.08691, Fig. 6–7:
  fwd+bwd ≈ 50–60 % of A100 peak at head dim 128, lower for short sequences) and
  FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608: bf16 fwd ≈ 60–75 %, bwd ≈ 45–55 % of
  H100 peak). Without flash (Megatron-LM 2021) the scores are two batched GEMMs over the full
  s×s square (the causal mask is applied, not skipped) and the softmax/dropout traffic is
  element-wise.
- Element-wise (norms, activations, dropout, residual adds): memory-bound; the bytes one layer
  writes are what it saves for backward — Korthikanti et al. 2022 (arXiv 2205.05198) eq. 1–2:
  s·b·h·(10 + 24/t) bytes without sequence parallelism, s·b·h·34/t with it, plus 5·a·s²·b/t
  for the attention scores without flash — read and written about three times over a step
  (forward write, backward read and gradient write), at 80 % of HBM bandwidth (STREAM-like
  copy kernels).
- FP8: a recipe whose matrices are fp8 (`fp8`, Transformer Engine's fp8 weights) runs the
  layers' linear GEMMs — forward, dgrad and wgrad — at the GPU's dense fp8 peak (twice bf16 on
  H100) on the same curve: DeepGEMM's fine-grained-scaled FP8 GEMMs reach "up to 1550
  TFLOPS" on H800 SXM (deepseek-ai/DeepGEMM README), 78 % of the 1,979 dense FP8 peak the
  H800 shares with the H100, where the bf16 curve tops out at e_max = 0.78. The router, the
  attention core and the output head stay in bf16, as Transformer Engine leaves them.
Ignores: wave quantisation steps (the curve is smooth), kernel launch gaps, and FP8's cast
kernels (each GEMM input's amax and quantisation, partly fused into the norms by Transformer
Engine), so FP8 steps come out somewhat short.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GemmCurve:
    e_max: float  # fraction of dense bf16 peak a large GEMM reaches
    n_half: float  # intensity-equivalent size at which it reaches half of e_max
    e_attn: float  # flash attention fwd+bwd fraction of peak, long sequences
    q_half: float  # query rows per rank at which attention reaches half of e_attn
    clock: float  # sustained / datasheet tensor clock under a training load (power limit)
    source: str


_H100 = GemmCurve(0.78, 358.0, 0.55, 512.0, 1590 / 1830,
                  "CUTLASS 3.5 H100 bf16 square GEMMs; FlashAttention-3 (arXiv 2407.08608)")
GEMM_CURVES: dict[str, GemmCurve] = {
    "A100 80GB": GemmCurve(0.80, 358.0, 0.55, 512.0, 1305 / 1410,
                           "NVIDIA Matrix Multiplication Background (A100); FlashAttention-2 "
                           "(arXiv 2307.08691)"),
    "H100 SXM": _H100,
    "H200 SXM": _H100,
}
ELEMENTWISE_PASSES = 3  # forward write, backward read, gradient write
HBM_EFFICIENCY = 0.8


def curve(hw) -> GemmCurve:
    return GEMM_CURVES.get(hw.name, _H100)


def intensity_size(m, n, k):
    """3/(1/M + 1/N + 1/K): the square GEMM of the same arithmetic intensity."""
    m, n, k = (np.asarray(x, np.float64) for x in (m, n, k))
    return 3.0 / (1.0 / m + 1.0 / n + 1.0 / k)


def gemm_efficiency(hw, m, n, k):
    c = curve(hw)
    size = intensity_size(m, n, k)
    return c.clock * c.e_max * size / (size + c.n_half)


def gemm_seconds(hw, m, n, k, count=1, fp8: bool = False):
    """Seconds of `count` GEMMs of M×K by K×N (forward; 2·M·N·K FLOPs each); fp8: at the GPU's
    dense fp8 peak where it has one (else bf16), on the same efficiency curve."""
    flops = 2.0 * np.asarray(m, np.float64) * n * k * count
    peak = hw.fp8_flops if fp8 and hw.fp8_flops else hw.bf16_flops
    return flops / (peak * gemm_efficiency(hw, m, n, k))


def attention_seconds(hw, flops, q_rows):
    """Flash attention forward seconds for `flops` causal FLOPs with q_rows queries per rank."""
    c = curve(hw)
    q = np.asarray(q_rows, np.float64)
    return np.asarray(flops, np.float64) / (hw.bf16_flops * c.clock * c.e_attn * q / (q + c.q_half))


def elementwise_seconds(hw, n_bytes):
    """Seconds of memory-bound kernels moving n_bytes once (per pass)."""
    return np.asarray(n_bytes, np.float64) / (hw.hbm_bw * HBM_EFFICIENCY)


def layer_elementwise_bytes(tokens, h: int, tp, sp: bool, heads: int = 0, seq=0):
    """Bytes one layer's element-wise kernels write per forward (Korthikanti eq. 1–2, bf16);
    heads/seq > 0 adds the unfused attention scores (5·a·s per token ÷ tp)."""
    tokens = np.asarray(tokens, np.float64)
    per_h = 34.0 / tp if sp else 10.0 + 24.0 / tp
    scores = 5.0 * heads * np.asarray(seq, np.float64) / tp
    return tokens * (h * per_h + scores)
