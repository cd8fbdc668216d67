"""RuntimeSpec: framework knobs that size the communication-buffer and runtime rows, and the
moves of the static rows (ZeRO-Offload, gradient offload, ZeRO-3 parameter offload, Muon's
gather).

Defaults follow Megatron-Core (gradient buckets are views of the contiguous grad buffer, fused
Adam) and PyTorch/NCCL defaults (NCCL_BUFFSIZE 4 MiB for the Simple protocol; the LL and LL128
buffers are off by default here and their NCCL defaults are `NCCL_LL_DEFAULT_BYTES` /
`NCCL_LL128_DEFAULT_BYTES`). DeepSpeed defaults: reduce/allgather buckets 5e8 elements,
stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9 (DeepSpeed config docs).
The CUDA context default is the 0.6 GiB measured on an H200 with PyTorch 2.11 (docs/reference.md).
Pipeline: `pp_engine` picks whose order of a schedule the ledger follows ("auto": the first
engine that runs the micro-batch count) and `zb_w_holds` what a zero-bubble I/W split keeps
between I and W — default "graph", PyTorch's (docs/schedules.md, memledger.ledger.pipeline.order).
Static-row engines (memledger.ledger.static.engines, docs/engine-validation.md): `tp_engine`
"megatron" shards the vocab-parallel embedding's gradient V/tp; "dtensor" (torch 2.13
`parallelize_module`) keeps it full size on every tp rank below ZeRO-2. `zero1_partition`
"even" splits every state N/d (Megatron's distributed optimizer); "greedy-params" gives each dp
rank whole tensors, largest first (torch `ZeroRedundancyOptimizer`).
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.errors import (SpecError, require, require_choice, require_non_negative,
                              require_positive)
from memledger.specs.hashing import cache_hash

A2A_SIZING = ("dynamic", "capacity", "worst-case", "deepep-ll")
GRAD_BUCKETS = ("megatron", "deepspeed")
# Training-loop knobs (memledger.specs.loop): "auto" takes the loop preset's value
OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "for-loop")
GRAD_LIFETIMES = ("auto", "persistent", "on-demand")
LOSSES = ("auto", "materialized", "chunked")
MTP_CHOICES = ("auto", "built", "skipped")
MASTER_GRADS = ("auto", "in-place", "cast-per-tensor")
MUON_EXPERTS = ("auto", "split", "adamw")
LOOP_CHOICES = ("auto", "pytorch", "hf-trainer", "torchtitan", "megatron", "deepspeed")
ZERO3_IMPLS = ("fsdp", "deepspeed")
MUON_GATHER = ("on-demand", "full")
# Whose order of a pipeline schedule to follow, and what a zero-bubble I/W split keeps between I
# and W (memledger.ledger.pipeline.order, docs/schedules.md).
ENGINES = ("auto", "megatron", "pytorch", "deepseek")
W_HOLDS = ("graph", "w-inputs")
# Whose tensor parallelism and whose ZeRO-1 partition the static rows follow
TP_ENGINES = ("megatron", "dtensor")
ZERO1_PARTITIONS = ("even", "greedy-params")
# torchtitan parallelism.fsdp_reshard_after_forward (torchtitan/distributed/fsdp.py
# get_fsdp_reshard_after_forward_policy): default = reshard unless PP is on
RESHARD_AFTER_FORWARD = ("default", "always", "never")
CUDA_GRAPHS = ("auto", "on", "off")  # torchtitan 0.3's CUDA-graph step (ledger.titan_graphs)
# FSDP2's placement of 3-D expert tensors (memledger.ledger.fsdp2): auto = torchtitan's rule under
# torchtitan as it runs, plain fully_shard's dim 0 (padded) elsewhere
EXPERT_SHARDS = ("auto", "dim0", "dim1-if-fewer")
# torchtitan releases where the modelled rules differ (memledger.ledger.torchtitan_eras.ERAS):
# 0.3 fuses wq/wk/wv into wqkv (Llama 3, Qwen3; models/common/attention.py), 0.2 (the TOML era)
# keeps three mms; the published benchmarks' commits 2025-06 (e7c0cae) and 2024-12 (9dec370)
# differ in whether training.compile compiles the loss
TORCHTITAN_VERSIONS = ("0.3", "0.2", "2025-06", "2024-12")
# torchtitan model.converters = ["float8"] with float8.recipe_name (torchao Float8Linear)
FLOAT8_RECIPES = ("off", "tensorwise", "rowwise", "rowwise_with_gw_hp")
# whether the loss function is compiled: auto = the era's rule under torch_compile
COMPILE_LOSS = ("auto", "on", "off")

# NCCL src/init.cc: DEFAULT_LL_BUFFSIZE = 8 lines × 512 threads × 8 steps × 16 B,
# DEFAULT_LL128_BUFFSIZE = 120 elems × 640 threads × 8 steps × 8 B, DEFAULT_BUFFSIZE = 4 MiB.
NCCL_SIMPLE_DEFAULT_BYTES = 4 * 1024**2
NCCL_LL_DEFAULT_BYTES = 8 * 512 * 8 * 16
NCCL_LL128_DEFAULT_BYTES = 120 * 640 * 8 * 8


@cache_hash
@dataclass(frozen=True, kw_only=True)
class RuntimeSpec:
    cuda_context_bytes: int = 644_245_094  # 0.6 GiB
    allocator_slack_pct: int = 5  # reserved-but-unallocated, % of peak allocated
    a2a: str = "dynamic"  # MoE dispatch/combine sizing
    capacity_factor_pct: int = 100  # for a2a="capacity": C = 1.0
    deepep_max_tokens: int = 0  # DeepEP LL num_max_dispatch_tokens_per_rank; 0 = tokens per rank
    grad_buckets: str = "megatron"
    bucket_params: int = 40_000_000  # Megatron DDP default bucket size (elements)
    overlap_comm: bool = True  # DeepSpeed ZeRO overlap_comm (4.5x the buckets)
    reduce_bucket_params: int = 500_000_000  # DeepSpeed reduce_bucket_size
    allgather_bucket_params: int = 500_000_000  # DeepSpeed allgather_bucket_size
    zero3_impl: str = "fsdp"
    zero3_prefetch_layers: int = 1  # FSDP: units prefetched beyond the current one
    zero3_prefetch_params: int = 50_000_000  # DeepSpeed stage3_prefetch_bucket_size
    zero3_max_live_params: int = 1_000_000_000  # DeepSpeed stage3_max_live_parameters
    nccl_channels: int = 8
    nccl_buffer_bytes: int = NCCL_SIMPLE_DEFAULT_BYTES  # NCCL_BUFFSIZE (Simple protocol)
    nccl_ll_buffer_bytes: int = 0  # NCCL_LL_BUFFSIZE; NCCL default NCCL_LL_DEFAULT_BYTES
    nccl_ll128_buffer_bytes: int = 0  # NCCL_LL128_BUFFSIZE; NCCL default NCCL_LL128_DEFAULT_BYTES
    loop: str = "auto"  # training-loop preset (specs/loop.py); auto: by activation profile
    optimizer_impl: str = "auto"  # fused | foreach | for-loop; auto: the loop's
    grad_lifetime: str = "auto"  # persistent (Megatron/DDP buffers) | on-demand (set_to_none)
    loss: str = "auto"  # materialized | chunked (fused linear cross-entropy)
    mtp: str = "auto"  # built | skipped (multi-token-prediction modules)
    master_grads: str = "auto"  # in-place | cast-per-tensor (fp32 copy at step time)
    muon_experts: str = "auto"  # split | adamw (3-D expert tensors fall back to AdamW)
    optimizer_offload: bool = False  # ZeRO-Offload: master + states and the step on the CPU
    grad_offload: bool = False  # gradient shards on the CPU, a two-chunk double buffer on the GPU
    grad_offload_chunk_params: int = 0  # chunk of the double buffer; 0 = bucket_params
    param_offload: bool = False  # ZeRO-3 parameter shards in host memory (+ gradients with
    # optimizer_offload): FSDP CPU offload, DeepSpeed offload_param
    muon_gather: str = "on-demand"  # Muon: gather one matrix at a time, or all at once
    pp_engine: str = "auto"  # whose pipeline order: auto, megatron, pytorch, deepseek
    zb_w_holds: str = "graph"  # zero-bubble I..W: whole graph (torch) or only W's inputs
    tp_engine: str = "megatron"  # megatron | dtensor (embedding gradient sharded or full)
    zero1_partition: str = "even"  # even N/d | greedy-params (whole tensors, largest first)
    fsdp_reshard_after_forward: str = "default"  # FSDP2: default (not under PP) | always | never
    torch_compile: bool = False  # torchtitan [compile] model: the partitioner's saved set
    loss_parallel: bool = True  # torchtitan disable_loss_parallel=False: logits stay V/tp
    fsdp_expert_shard: str = "auto"  # FSDP2 3-D experts: dim0 (padded) | dim1-if-fewer (torchtitan)
    torchtitan_version: str = "0.3"  # era: op SAC's mm sequence, compiled loss (torchtitan_eras)
    compile_loss: str = "auto"  # torch.compile of the loss: auto (the era's) | on | off
    float8: str = "off"  # torchao Float8Linear recipe on the layers' Linears (not the output head)
    float8_fsdp_all_gather: bool = False  # float8.enable_fsdp_float8_all_gather (tensorwise)
    float8_precompute_scale: bool = False  # float8.precompute_float8_dynamic_scale_for_fsdp
    float8_force_recompute_weight: bool = False  # float8.force_recompute_fp8_weight_in_bwd
    # the optimizer steps each parameter from its post-accumulate-grad hook inside the backward
    # and frees its gradient there (torchtitan 0.2 optimizer.early_step_in_backward, torchtune
    # optimizer_in_bwd): memledger.ledger.step_in_backward
    optimizer_in_backward: bool = False
    # torchtitan 0.3 training.disable_cuda_graphs: the step under a CUDA graph, its gradients
    # zeroed in place (persistent); auto = where 0.3 runs it (no PP, no EP): ledger.titan_graphs
    cuda_graphs: str = "auto"

    def __post_init__(self):
        require_non_negative("cuda_context_bytes", self.cuda_context_bytes)
        require(isinstance(self.allocator_slack_pct, int) and 0 <= self.allocator_slack_pct <= 100,
                "allocator_slack_pct", f"must be an integer 0..100, got {self.allocator_slack_pct!r}")
        require_choice("a2a", self.a2a, A2A_SIZING)
        require_positive("capacity_factor_pct", self.capacity_factor_pct)
        require_non_negative("deepep_max_tokens", self.deepep_max_tokens)
        require_choice("grad_buckets", self.grad_buckets, GRAD_BUCKETS)
        for f in ("bucket_params", "reduce_bucket_params", "allgather_bucket_params",
                  "zero3_max_live_params"):
            require_positive(f, getattr(self, f))
        require_choice("zero3_impl", self.zero3_impl, ZERO3_IMPLS)
        require_non_negative("zero3_prefetch_layers", self.zero3_prefetch_layers)
        require_non_negative("zero3_prefetch_params", self.zero3_prefetch_params)
        for f in ("nccl_channels", "nccl_buffer_bytes", "nccl_ll_buffer_bytes",
                  "nccl_ll128_buffer_bytes", "grad_offload_chunk_params"):
            require_non_negative(f, getattr(self, f))
        require_choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        require_choice("grad_lifetime", self.grad_lifetime, GRAD_LIFETIMES)
        require_choice("loop", self.loop, LOOP_CHOICES)
        require_choice("loss", self.loss, LOSSES)
        require_choice("mtp", self.mtp, MTP_CHOICES)
        require_choice("master_grads", self.master_grads, MASTER_GRADS)
        require_choice("muon_experts", self.muon_experts, MUON_EXPERTS)
        require_choice("muon_gather", self.muon_gather, MUON_GATHER)
        require_choice("pp_engine", self.pp_engine, ENGINES)
        require_choice("zb_w_holds", self.zb_w_holds, W_HOLDS)
        require_choice("tp_engine", self.tp_engine, TP_ENGINES)
        require_choice("zero1_partition", self.zero1_partition, ZERO1_PARTITIONS)
        require_choice("fsdp_reshard_after_forward", self.fsdp_reshard_after_forward,
                       RESHARD_AFTER_FORWARD)
        require_choice("fsdp_expert_shard", self.fsdp_expert_shard, EXPERT_SHARDS)
        require_choice("torchtitan_version", self.torchtitan_version, TORCHTITAN_VERSIONS)
        require_choice("cuda_graphs", self.cuda_graphs, CUDA_GRAPHS)
        require_choice("compile_loss", self.compile_loss, COMPILE_LOSS)
        require_choice("float8", self.float8, FLOAT8_RECIPES)
        for f in ("torch_compile", "loss_parallel", "float8_fsdp_all_gather", "param_offload",
                  "float8_precompute_scale", "float8_force_recompute_weight",
                  "optimizer_in_backward"):
            require(isinstance(getattr(self, f), bool), f,
                    f"must be true or false, got {getattr(self, f)!r}")
        self._check_float8()
        if self.grad_offload and not self.optimizer_offload:
            raise SpecError("grad_offload", "gradient offload needs optimizer_offload=True: the "
                                            "optimizer step must run where the gradients are (CPU)")
        if self.param_offload and self.zero3_impl == "fsdp" and not self.optimizer_offload:
            raise SpecError("param_offload", "FSDP's CPU offload moves parameters, gradients and "
                                             "the optimizer step to the CPU together: add "
                                             "optimizer_offload=True (--optimizer-offload); "
                                             "parameters alone are DeepSpeed's offload_param "
                                             "(zero3_impl='deepspeed')")

    def _check_float8(self) -> None:
        """torchtitan's own checks (its float8 converter: components/quantization/float8.py;
        2024-12 torchtitan/float8.py): FSDP float8 all-gather only with the tensorwise recipe;
        precompute_float8_dynamic_scale_for_fsdp is a no-op without that all-gather."""
        flags = ("float8_fsdp_all_gather", "float8_precompute_scale",
                 "float8_force_recompute_weight")
        for f in flags if self.float8 == "off" else ():
            require(not getattr(self, f), f, "needs float8 on (tensorwise, rowwise or "
                                             "rowwise_with_gw_hp), got float8='off'")
        require(not self.float8_fsdp_all_gather or self.float8 == "tensorwise",
                "float8_fsdp_all_gather", f"FSDP float8 all-gather is tensorwise only, got "
                                          f"float8={self.float8!r}")

    @property
    def grad_chunk_params(self) -> int:
        return self.grad_offload_chunk_params or self.bucket_params

    @property
    def pipeline_engine(self) -> str:
        """pp_engine with "auto" made concrete where the loop fixes it: torchtitan pipelines with
        torch.distributed.pipelining (torchtitan/distributed/pipeline_parallel.py
        `pipeline_llm`, `build_pipeline_schedule`), so its order and buffers are PyTorch's;
        elsewhere "auto" stays (the engines table picks the first that runs the count)."""
        if self.pp_engine == "auto" and self.loop == "torchtitan":
            return "pytorch"
        return self.pp_engine
