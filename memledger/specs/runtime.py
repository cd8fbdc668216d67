"""RuntimeSpec: framework knobs that size the communication-buffer and runtime rows.

Defaults follow Megatron-Core (gradient buckets are views of the contiguous grad buffer, fused
Adam) and PyTorch/NCCL defaults (NCCL_BUFFSIZE 4 MiB). The CUDA context default is the 0.6 GiB
measured on an H200 with PyTorch 2.11 (REFERENCE.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from .hashing import cache_hash
from ..errors import require, require_choice, require_non_negative, require_positive

A2A_SIZING = ("dynamic", "capacity", "worst-case")
GRAD_BUCKETS = ("megatron", "deepspeed")
OPTIMIZER_IMPLS = ("fused", "foreach")
GRAD_LIFETIMES = ("persistent", "on-demand")


@cache_hash
@dataclass(frozen=True, kw_only=True)
class RuntimeSpec:
    cuda_context_bytes: int = 644_245_094  # 0.6 GiB
    allocator_slack_pct: int = 5  # reserved-but-unallocated, % of peak allocated
    a2a: str = "dynamic"  # MoE dispatch/combine sizing
    capacity_factor_pct: int = 100  # for a2a="capacity": C = 1.0
    grad_buckets: str = "megatron"
    bucket_params: int = 40_000_000  # Megatron DDP default bucket size (elements)
    zero3_prefetch_layers: int = 1
    nccl_channels: int = 8
    nccl_buffer_bytes: int = 4 * 1024**2  # NCCL_BUFFSIZE default
    optimizer_impl: str = "fused"
    grad_lifetime: str = "persistent"  # Megatron/DDP buffers; "on-demand": set_to_none grads

    def __post_init__(self):
        require_non_negative("cuda_context_bytes", self.cuda_context_bytes)
        require(isinstance(self.allocator_slack_pct, int) and 0 <= self.allocator_slack_pct <= 100,
                "allocator_slack_pct", f"must be an integer 0..100, got {self.allocator_slack_pct!r}")
        require_choice("a2a", self.a2a, A2A_SIZING)
        require_positive("capacity_factor_pct", self.capacity_factor_pct)
        require_choice("grad_buckets", self.grad_buckets, GRAD_BUCKETS)
        require_positive("bucket_params", self.bucket_params)
        require_non_negative("zero3_prefetch_layers", self.zero3_prefetch_layers)
        require_non_negative("nccl_channels", self.nccl_channels)
        require_non_negative("nccl_buffer_bytes", self.nccl_buffer_bytes)
        require_choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        require_choice("grad_lifetime", self.grad_lifetime, GRAD_LIFETIMES)
