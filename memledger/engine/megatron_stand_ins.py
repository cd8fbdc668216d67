"""Stand-ins that let Megatron-Core 0.16.1's training step run on the CPU (torch; imported by
`memledger.engine.megatron_core` inside its gloo workers).

The first three because the CPU cannot run Megatron's CUDA calls, none changing what is held;
the last three put what the GPU kernels keep in place of a CPU kernel that keeps something else
(each case says which it runs, and one case of each of the first two runs the original):
  - `torch.cuda.current_device()` answers "cpu": Megatron places its buffers, RoPE frequencies
    and token counters on the current GPU with it (models/common/embeddings/
    rotary_pos_embedding.py:162, distributed/param_and_grad_buffer.py, optimizer/optimizer.py,
    pipeline_parallel/p2p_communication.py's receive buffers), and `torch.cuda.synchronize()`
    (p2p_communication.py:398, after batch_isend_irecv) returns at once: CPU ops and gloo's
    waited requests are complete when they return; `torch.cuda.Stream` is one object standing
    for every stream (MoE's copy stream, partial DistOpt's communication stream: `_one_stream`);
  - a TorchFunctionMode maps a literal `device="cuda"` to the CPU (optimizer/optimizer.py:485
    `_scale_one`, pipeline_parallel/schedules.py:596 `total_num_tokens`,
    transformer/utils.py:35 the causal mask) and lets `Tensor.type()` answer the
    `torch.cuda.*Tensor` names that the optimizers test parameters against
    (optimizer/distrib_optimizer.py:361, 420): same shapes and dtypes, another device;
  - `CudaRNGStatesTracker.fork` is a null context and the checkpoint's CUDA RNG state is the
    CPU's (tensor_parallel/random.py: `model_parallel_cuda_manual_seed` seeds CUDA generators):
    the forks only pick the dropout stream (which random values, not what is kept);
    `CheckpointWithoutOutput` (the "layernorm" selective recompute) asks Transformer Engine
    whether fp8 is on even when it is not (tensor_parallel/random.py:636 `self.fp8 = fp8 is not
    None` is True for the default False, then :589 `FP8GlobalStateManager` and :592
    `activation_recompute_forward`, imported only with TE at :27-28): it is told "off", and TE's
    fp8 recompute contexts are null contexts;
  - core attention (case.attention="sdpa"): `scaled_dot_product_attention(is_causal=True)` in
    place of `DotProductAttention`, standing in for TEDotProductAttention's flash kernel, the
    attention the megatron profile models (it keeps q, k, v, output, logsumexp for backward).
    case.attention="local" runs Megatron's DotProductAttention itself;
  - RMSNorm (case.norm="fused"): torch.nn.RMSNorm, which the local spec builds
    (transformer/torch_norm.py WrappedTorchNorm, Apex absent), runs as one autograd function
    that keeps the input and the fp32 rstd, as torch's `_fused_rms_norm` CUDA kernel, TENorm and
    Apex's FusedRMSNorm keep; torch's CPU dispatch of the same op is a decomposition
    (torch/_decomp/decompositions.py `_fused_rms_norm`) that keeps an fp32 copy of the input and
    of the normalised input (case.norm="torch-cpu" runs it as it is). With sequence parallel
    (case.sp) the local spec's `WrappedTorchNorm` refuses to build (transformer/torch_norm.py:32);
    it builds the same torch.nn.RMSNorm with its weight marked `sequence_parallel`, as Apex's
    and TE's norms are, so its gradient is all-reduced over tp;
  - dropout (case.hidden_dropout > 0): `torch.nn.functional.dropout` in training runs
    `native_dropout`, the op CUDA tensors take, which keeps a bool mask (the CPU's own path keeps
    a bf16 noise tensor).
"""
from __future__ import annotations

import contextlib

from memledger.engine.megatron_cases import MegatronCase


def cpu_mode(torch):
    from torch.overrides import TorchFunctionMode

    def dev(d):
        if isinstance(d, str) and d.startswith("cuda"):
            return "cpu"
        return torch.device("cpu") if isinstance(d, torch.device) and d.type == "cuda" else d

    class CudaOnCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.type and len(args) == 1 and not kwargs:
                name = func(*args)
                return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
            if func is torch.Tensor.cuda:
                return args[0]
            if "device" in kwargs:
                kwargs["device"] = dev(kwargs["device"])
            if func is torch.Tensor.to and len(args) > 1:
                args = (args[0], dev(args[1]), *args[2:])
            return func(*args, **kwargs)
    return CudaOnCpu()


def stand_ins(torch, case: MegatronCase) -> None:
    from megatron.core.tensor_parallel import random as mrandom
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *a, **k: None  # CPU ops are done when they return
    if case.experts or case.instances > 1:
        _one_stream(torch)
    if case.experts:
        from megatron.core.transformer.moe import moe_utils
        # moe_utils.py:1192 tests `te_general_gemm is not None`, a name bound only when TE imports
        # (:34): without TE it is unbound, and the router's gate takes torch.mm (:1196) if None
        moe_utils.te_general_gemm = getattr(moe_utils, "te_general_gemm", None)
        from megatron.core.transformer.moe import token_dispatcher

        def to_host(tensor, as_numpy=False, record_stream=False):
            # moe_utils.py:1093 copies only CUDA tensors; the dispatcher's split sizes arrive on
            # the host as numpy (what all_to_all_single's split lists take), so CPU ones too
            if as_numpy and torch.is_tensor(tensor):
                return tensor.numpy()
            return tensor
        token_dispatcher.maybe_move_tensor_to_cpu = to_host
        if case.etp > 1:
            _uneven_collectives(torch)
    mrandom.CudaRNGStatesTracker.fork = lambda self, name="model-parallel-rng": \
        contextlib.nullcontext()
    mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    mrandom._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    if not hasattr(mrandom, "FP8GlobalStateManager"):  # Transformer Engine's, absent
        class NoFP8:
            is_fp8_enabled = staticmethod(lambda: False)
            get_fp8_recipe = staticmethod(lambda: None)
        mrandom.FP8GlobalStateManager = NoFP8
        mrandom.activation_recompute_forward = lambda **_: contextlib.nullcontext()
        mrandom.fp8_autocast = lambda **_: contextlib.nullcontext()
    if case.norm == "fused":
        torch.nn.RMSNorm.forward = _fused_rms_norm(torch)
    if case.hidden_dropout:
        _cuda_dropout(torch)
    if case.sp:
        from megatron.core.transformer.torch_norm import WrappedTorchNorm

        def norm(cls, config, hidden_size, eps=1e-5, **_):
            # as Apex's FusedLayerNorm (fusions/fused_layer_norm.py:119) marks its weights, so
            # finalize_model_grads all-reduces their gradients over tp
            n = torch.nn.RMSNorm(normalized_shape=hidden_size, eps=eps)
            setattr(n.weight, "sequence_parallel", config.sequence_parallel)
            return n
        WrappedTorchNorm.__new__ = norm


def _cuda_dropout(torch):
    """F.dropout in training as CUDA runs it: aten's `dropout` takes `native_dropout` for CUDA
    tensors with 0 < p < 1 (aten/src/ATen/native/Dropout.cpp `is_fused_kernel_acceptable`),
    whose autograd keeps the bool mask (derivatives.yaml native_dropout: result1); its CPU path,
    `_dropout_impl`, keeps a noise tensor in the input's dtype instead. Megatron's embedding
    dropout and the compiled bias-dropout-add (fusions/fused_bias_dropout.py, jit_fuser =
    torch.compile) both call torch.nn.functional.dropout."""
    functional = torch.nn.functional
    orig = functional.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and 0.0 < p < 1.0 and not inplace:
            return torch.native_dropout(input, p, True)[0]
        return orig(input, p, training, inplace)
    functional.dropout = dropout


def _one_stream(torch):
    """One stream that is every stream: the alltoall dispatcher's device-to-host copy stream
    (transformer/moe/token_dispatcher.py:445, :871-899) orders nothing on the CPU; nor does
    partial DistOpt's communication stream, which DDP makes whenever
    num_distributed_optimizer_instances > 1 (distributed/distributed_data_parallel.py:229) and
    uses only with overlap_grad_reduce (param_and_grad_buffer.py:411-422, :527-529)."""
    class Stream:
        def __new__(cls, *a, **k):
            return ONE

        def wait_stream(self, other):
            return None

        def record_event(self, *a):
            return self

        def synchronize(self):
            return None
    ONE = object.__new__(Stream)
    torch.cuda.Stream = Stream
    torch.cuda.current_stream = lambda *a, **k: ONE
    torch.cuda.stream = lambda s=None: contextlib.nullcontext()


def _uneven_collectives(torch):
    """The alltoall dispatcher's gather and reduce-scatter over the expert TP group carry each
    rank's own token count (tensor_parallel/mappings.py:114, :155 with split sizes); NCCL takes
    unequal tensors, gloo refuses them: here each is padded to the largest, moved equal-sized and
    cut back (same values; the padded copies live only inside the collective)."""
    import torch.distributed as dist
    gather, scatter = dist.all_gather, dist.reduce_scatter

    def all_gather(outputs, tensor, group=None, async_op=False):
        rows = max(o.shape[0] for o in outputs)
        if all(o.shape[0] == rows for o in outputs):
            return gather(outputs, tensor, group=group, async_op=async_op)
        pad = lambda t: torch.cat([t, t.new_zeros((rows - t.shape[0], *t.shape[1:]))])  # noqa: E731
        full = [torch.empty((rows, *o.shape[1:]), dtype=o.dtype) for o in outputs]
        gather(full, pad(tensor), group=group)
        for o, f in zip(outputs, full):
            o.copy_(f[:o.shape[0]])

    def reduce_scatter(output, inputs, op=dist.ReduceOp.SUM, group=None, async_op=False):
        rows = max(i.shape[0] for i in inputs)
        if all(i.shape[0] == rows for i in inputs):
            return scatter(output, inputs, op=op, group=group, async_op=async_op)
        pad = lambda t: torch.cat([t, t.new_zeros((rows - t.shape[0], *t.shape[1:]))])  # noqa: E731
        full = torch.empty((rows, *output.shape[1:]), dtype=output.dtype)
        scatter(full, [pad(i) for i in inputs], op=op, group=group)
        output.copy_(full[:output.shape[0]])
    dist.all_gather, dist.reduce_scatter = all_gather, reduce_scatter
    torch.distributed.all_gather, torch.distributed.reduce_scatter = all_gather, reduce_scatter


def sdpa_attention(torch):
    import torch.nn.functional as F
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class SdpaAttention(DotProductAttention):
        """Flash attention's saved set (q, k, v, out, lse) in Megatron's [s, b, n, d] layout."""

        def forward(self, query, key, value, attention_mask, attn_mask_type=None,
                    attention_bias=None, packed_seq_params=None):
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                 enable_gqa=k.shape[1] != q.shape[1])
            s, b = query.shape[0], query.shape[1]
            return out.permute(2, 0, 1, 3).reshape(s, b, -1)
    return SdpaAttention


ROWS = 128  # rows per slice: the kernels' transients (fp32 upcasts) stay a few hundred KB


def _fused_rms_norm(torch):
    class FusedRMSNorm(torch.autograd.Function):
        """Keeps x and the fp32 rstd; computes slice by slice, so its fp32 transients are a
        slice's, as a fused kernel's (rows in registers), not whole fp32 copies of x."""

        @staticmethod
        def forward(ctx, x, w, eps):
            rows = x.reshape(-1, x.shape[-1])
            out = torch.empty_like(rows)
            rstd = torch.empty(rows.shape[0], 1, dtype=torch.float32)
            for i in range(0, rows.shape[0], ROWS):
                xf = rows[i:i + ROWS].float()
                rstd[i:i + ROWS] = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
                out[i:i + ROWS] = (xf * rstd[i:i + ROWS] * w.float()).to(x.dtype)
            ctx.save_for_backward(x, w, rstd)
            return out.view(x.shape)

        @staticmethod
        def backward(ctx, g):
            x, w, rstd = ctx.saved_tensors
            rows, grows = x.reshape(-1, x.shape[-1]), g.reshape(-1, x.shape[-1])
            gx = torch.empty_like(rows)
            gw = torch.zeros(x.shape[-1], dtype=torch.float32)
            for i in range(0, rows.shape[0], ROWS):
                xhat = rows[i:i + ROWS].float() * rstd[i:i + ROWS]
                gf = grows[i:i + ROWS].float()
                gw += (gf * xhat).sum(0)
                gf = gf * w.float()
                gx[i:i + ROWS] = (rstd[i:i + ROWS] * (gf - xhat * (gf * xhat).mean(
                    -1, keepdim=True))).to(x.dtype)
            return gx.view(x.shape), gw.to(w.dtype), None

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return FusedRMSNorm.apply(x, self.weight, eps)
    return forward
