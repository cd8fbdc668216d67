"""One training step of torchtitan's own code at real scale: FakeTensorMode + the fake process
group, rank 0 of a world of hundreds, every storage followed op by op (torch, torchtitan).

What runs is torchtitan's, in the order its Trainer runs it (torchtitan/trainer.py, 0.3.0):
the config registry's Trainer.Config, `model_config.update_from_config`, the model built on
the meta device in fp32 (`training.dtype`), the model spec's `parallelize_fn` (TP with loss
parallel, SelectiveAC / FullAC, FSDP2 `apply_fsdp_to_decoder` with
MixedPrecisionPolicy(bf16, fp32)), `to_empty` + `init_weights`, the optimizer container
(`config.optimizer.build`), the loss (`ChunkedLossWrapper` with `set_lm_head`), the state a
first step leaves (titan_warm.py: FSDP2's lazy init and unsharded parameters, the head unit
as the loss wrapper leaves it, the optimizer states) and the measured step: forward / loss /
backward / `optimizers.step()` / `zero_grad()`.
Five stand-ins, each because fake tensors or the CPU cannot run the original, each holding
what the CUDA run holds:
  - the attention kernel: torchtitan's language models use compiled FlexAttention
    (`FlexAttention.compiled_flex_attn`, a torch.compile'd kernel that fake mode on the CPU
    cannot build); it is replaced by `scaled_dot_product_attention(is_causal=True)`, which
    keeps the same tensors for backward (q, k, v, output, logsumexp), and that op joins
    SelectiveAC's save list where torchtitan lists the flex HOP; MLA's unequal q·k / v head
    sizes have no fused CPU kernel, so there an op that saves flex's tensors
    (titan_parallel.flex_shaped_attention) takes its place;
  - RMSNorm: on CUDA `torch.rms_norm` runs the fused `aten::_fused_rms_norm` kernel, whose
    autograd node saves the input, the weight and the fp32 rstd (aten layer_norm.cpp
    rms_norm_symint; tools/autograd/derivatives.yaml _fused_rms_norm: backward
    `_fused_rms_norm_backward(grad, input, normalized_shape, result1, weight)`); torch 2.13's
    CPU build has only the op's CompositeImplicitAutograd kernel (`rms_norm_composite`), whose
    decomposed ops save an fp32 upcast of the input and the fp32 product before the weight
    (8·h bytes a token where CUDA keeps the 2·h input). torchtitan's RMSNorm.forward is a
    `torch.autograd.Function` here, saving what the CUDA node saves and running
    `_fused_rms_norm_backward` (fake tensors take its decomposition's output shapes);
  - weight init: `trunc_normal_` draws values data-dependently; values do not change memory;
  - the MoE router gate: its fp32 autocast disables itself on a CPU; the gate makes CUDA's
    fp32 casts itself (titan_parallel.cuda_fp32_router_gate);
  - the device: torchtitan picks "cuda" when no accelerator is found (tools/utils.py); the
    meshes are built on "cpu" instead.
Context parallelism runs torchtitan's k/v all-gather and the Trainer's input sharding; expert
parallelism torchtitan's token dispatcher with balanced split lists, the one data-dependent
value (memledger/engine/titan_parallel.py). The MoE configs' compiled loss
(`compile.components=["loss"]`) runs eager: inductor cannot run on fake tensors.
Pipeline parallel cases (pp > 1) run torchtitan's `pipeline_llm` and schedule: titan_pp.py.
`prepare` + `build_and_measure` also run with real tensors on gloo CPU processes at small
sizes (titan_gloo.py), the check that fake mode measures what real execution holds.
`parallelism.spmd_backend = "partial_dtensor"` (FSDP2 + DTensor TP, the path of torchtitan 0.2
and of its published runs); 0.3's default `spmd_types` path is not run.
Measured (bytes, rank 0): weights / gradients / optimizer from the local shards; activations as
the live bytes the forward leaves behind minus the FSDP units it leaves unsharded; the peak of
live bytes over the measured step; the unsharded bytes at the forward's end.
"""
from __future__ import annotations

import importlib
import time

from memledger.engine.extras import require_module
from memledger.engine.titan_cases import TitanCase
from memledger.engine.titan_parallel import (balanced_token_counts, cuda_fp32_router_gate,
                                             flex_shaped_attention,
                                             param_meshes, step_inputs)

INSTALL = "pip install 'torchtitan==0.3.0' triton   (or: pip install -e '.[validation]')"


def require_torchtitan() -> None:
    require_module("torchtitan.models.llama3", "torchtitan", INSTALL)


def _stand_ins(torch) -> None:
    import torch.nn.functional as F

    import torchtitan.distributed.activation_checkpoint as ac
    from torchtitan.models.common.attention import FlexAttention
    if getattr(FlexAttention.forward, "_memledger", False):
        return

    def sdpa(self, q_BLNH, k_BLNH, v_BLNH, *, attention_masks=None, scale=None,
             enable_gqa=False, out_transform=None, **kwargs):  # FlexAttention.forward's names
        if q_BLNH.shape[-1] != v_BLNH.shape[-1]:  # MLA: no fused CPU kernel, see the op
            out, _ = flex(q_BLNH.transpose(1, 2), k_BLNH.transpose(1, 2), v_BLNH.transpose(1, 2))
            return out.transpose(1, 2)
        out = F.scaled_dot_product_attention(q_BLNH.transpose(1, 2), k_BLNH.transpose(1, 2),
                                             v_BLNH.transpose(1, 2), is_causal=True,
                                             scale=scale, enable_gqa=enable_gqa)
        return out.transpose(1, 2)
    sdpa._memledger = True
    FlexAttention.forward = sdpa
    _fused_rms_norm_stand_in(torch)
    orig = ac._get_default_save_ops
    flex = flex_shaped_attention(torch)
    ac._get_default_save_ops = lambda: orig() | {
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, flex}
    import sys
    for name, mod in list(sys.modules.items()):
        if name.startswith("torchtitan") and getattr(mod, "device_type", None) == "cuda":
            mod.device_type = "cpu"


def _fused_rms_norm_stand_in(torch) -> None:
    """torchtitan's RMSNorm as CUDA runs it: the `_fused_rms_norm` autograd node (see above)."""
    from torchtitan.models.common.nn_modules import RMSNorm
    aten = torch.ops.aten

    class FusedRMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, shape, eps):
            y, rstd = aten._fused_rms_norm.default(x, shape, weight, eps)
            ctx.save_for_backward(x, weight, rstd)
            ctx.shape = shape
            return y

        @staticmethod
        def backward(ctx, grad):
            x, weight, rstd = ctx.saved_tensors
            mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[1]]
            gx, gw = aten._fused_rms_norm_backward.default(grad, x, ctx.shape, rstd, weight, mask)
            return gx, gw, None, None

    def forward(self, x):  # nn.RMSNorm.forward's arguments (torch/nn/modules/normalization.py)
        return FusedRMSNorm.apply(x, self.weight, list(self.normalized_shape), self.eps)
    RMSNorm.forward = forward


def _trainer_config(case: TitanCase):
    from memledger.engine.titan_ac import ac_config
    reg = importlib.import_module(f"torchtitan.models.{case.family}.config_registry")
    cfg = getattr(reg, case.config_fn)()
    if case.flavor:  # another flavor under this config (titan_cases: why)
        cfg.model_spec = importlib.import_module(f"torchtitan.models.{case.family}") \
            .model_registry(case.flavor)
    cfg.training.seq_len, cfg.training.local_batch_size = case.seq, case.local_batch
    cfg.compile.enable = False  # the MoE configs compile the loss; inductor cannot run on fakes
    p = cfg.parallelism
    p.spmd_backend = "partial_dtensor"
    # HSDP: replicas of the shard group; dp_shard = -1 takes the rest (parallel_dims._validate)
    p.data_parallel_shard_degree, p.data_parallel_replicate_degree = -1, case.dp_replicate
    p.tensor_parallel_degree, p.context_parallel_degree = case.tp, case.cp
    p.pipeline_parallel_degree, p.expert_parallel_degree = 1, case.ep
    p.fsdp_reshard_after_forward = case.reshard
    if case.pp > 1:
        from memledger.engine.titan_pp import pp_config
        pp_config(cfg, case)
    cfg.activation_checkpoint = ac_config(case)  # 0.3's modes and 0.2's interval
    if case.loss == "materialized":  # the registry's inner loss on the whole logits
        cfg.loss = cfg.loss.loss_fn
    return cfg


def prepare(case: TitanCase):
    """The stand-ins installed and the Trainer.Config of `case` (shared with titan_gloo)."""
    import torch

    from memledger.engine.fake import _real_mesh_concatenate
    _real_mesh_concatenate()
    _stand_ins(torch)
    from memledger.engine.titan_speed import fast_cache_keys, one_scan_per_op
    one_scan_per_op(torch)  # fused AdamW's O(N²) propagation, same result (titan_speed)
    fast_cache_keys(torch)  # FakeTensor dispatch-cache keys, the same keys (titan_speed)
    if case.ep > 1:
        balanced_token_counts(torch)
    cuda_fp32_router_gate(torch)  # the router gate as CUDA's fp32 autocast runs it
    cfg = _trainer_config(case)
    from torchtitan.distributed import utils as dist_utils
    dist_utils.set_spmd_backend(cfg.parallelism.spmd_backend)  # as Trainer.__init__ does
    return cfg


def run_titan(case: TitanCase) -> dict:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    t0 = time.perf_counter()
    cfg = prepare(case)
    if case.pp > 1:
        from memledger.engine.titan_pp import run_titan_pp
        return run_titan_pp(case, cfg)
    dist.init_process_group("fake", rank=0, world_size=case.world, store=FakeStore())
    try:
        res = build_and_measure(case, cfg, fake=True)
    finally:
        dist.destroy_process_group()
    return {**res, "seconds": round(time.perf_counter() - t0, 2)}


def run_titan_fresh(case: TitanCase) -> dict:
    """`run_titan`, a pipeline case in a fresh process: after a pp rank > 0 under TP, a later
    case in the same process finds a DTensor buffer's mesh on a destroyed process group
    (torchtitan's init_states re-distributes it); cause not found, isolation sidesteps it."""
    if case.pp == 1:
        return run_titan(case)
    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(run_titan, (case,))


def build_and_measure(case: TitanCase, cfg, fake: bool, on_model=None) -> dict:
    """One rank of an initialised process group: torchtitan's mesh, model, parallelize_fn,
    optimizer and loss, then the measured step. `fake`: under FakeTensorMode (weight init values
    skipped); otherwise real tensors on the CPU (a gloo world: titan_gloo, whose `on_model`
    adjusts the parallelized model for gloo)."""
    import contextlib

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torchtitan.components.loss import ChunkedLossWrapper
    from torchtitan.distributed import ParallelDims

    from memledger.engine import probe
    init = torch.nn.init._no_grad_trunc_normal_
    try:
        dims = ParallelDims.from_config(cfg.parallelism, case.world)
        dims.build_mesh()
        spec = cfg.model_spec
        spec.model.update_from_config(config=cfg)
        with torch.device("meta"):
            model = spec.model.build()
        model = spec.parallelize_fn(model, parallel_dims=dims, training=cfg.training,
                                    parallelism=cfg.parallelism, compile_config=cfg.compile,
                                    ac_config=cfg.activation_checkpoint, dump_folder="")
        meshes = param_meshes(model)  # HSDP: (dp_replicate, fsdp) meshes
        if on_model is not None:
            on_model(model)
        if fake:
            torch.nn.init._no_grad_trunc_normal_ = lambda t, *a, **k: t
        with FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext():
            model.to_empty(device="cpu")
            with torch.no_grad():
                model.init_weights(buffer_device=None)
            model.train()
            opt = cfg.optimizer.build(model_parts=[model])
            if case.early_step:  # 0.2's optimizer in backward (titan_inbwd.py)
                from memledger.engine.titan_inbwd import InBackward
                opt = InBackward(opt, model)
            loss_fn = cfg.loss.build(compile_config=cfg.compile)
            chunked = isinstance(loss_fn, ChunkedLossWrapper)
            if chunked:
                loss_fn.set_lm_head(model.lm_head)
                model._skip_lm_head = True
            inputs = step_inputs(case, dims, cfg, torch)
            res = _measure(case, model, opt, loss_fn, inputs, probe, torch, chunked)
    finally:
        torch.nn.init._no_grad_trunc_normal_ = init
    return {**res, "chunked_loss": chunked, "param_meshes": meshes}


def _measure(case, model, opt, loss_fn, inputs, probe, torch, chunked: bool = True) -> dict:
    """One measured step. Activations are what the step holds to its backward, beyond its
    states and the unsharded FSDP units: at the forward's end under the chunked loss (it runs
    each chunk's forward and backward at once, holding nothing), after the loss forward for a
    materialised loss (its saved log-probabilities; the model's logits freed)."""
    tokens, labels, extra = inputs
    loss_kwargs = {k: v for k, v in extra.items() if k == "positions"}  # as the Trainer
    gvt = torch.tensor(float(labels.numel()))
    states = lambda: [o.state for o in getattr(opt, "optimizers", [opt])]  # noqa: E731
    marks: dict[str, int] = {}

    def step(live=None):
        if live is not None:
            marks["before_forward"] = live.current
        pred = model(tokens, **extra)
        if live is not None:
            marks["forward_end"] = live.current
            marks["unsharded_at_forward_end"] = probe.unsharded_bytes(model)
        loss, _ = loss_fn(pred, labels, gvt, **loss_kwargs)
        del pred
        if live is not None and not chunked:
            marks["after_loss"] = live.current
            marks["unsharded_after_loss"] = probe.unsharded_bytes(model)
        loss.backward()
        if live is not None:
            marks["after_backward"] = live.current
            marks["gradients"] = getattr(opt, "made", 0) + sum(
                probe.nbytes(p.grad) for p in model.parameters() if p.grad is not None)
        opt.step()
        opt.zero_grad(set_to_none=not case.keep_grads)  # 0.3's CUDA-graph step keeps them

    # what the first step leaves: FSDP2 initialised, the head unit as ChunkedLossWrapper leaves
    # it, the optimizer states (titan_warm.py)
    from memledger.engine.titan_warm import warm_state
    warm_state(model, opt, getattr(loss_fn, "lm_head", None), case.keep_grads)
    live = probe.LiveBytes()
    live.track(*model.parameters(), *model.buffers())
    live.track(*(p.grad for p in model.parameters() if p.grad is not None))
    for st in states():
        for s in st.values():
            live.track(*s.values())
    live.track(tokens, labels, *(v for v in extra.values() if isinstance(v, torch.Tensor)))
    base = live.current
    live.samples.clear()
    with live:
        step(live)
    rows = probe.static_rows([model], states())
    if chunked:
        activations = marks["forward_end"] - marks["before_forward"] - \
            marks["unsharded_at_forward_end"]
    else:
        activations = marks["after_loss"] - marks["before_forward"] - \
            marks["unsharded_after_loss"]
    return {"weights": rows["weights"], "gradients": marks["gradients"],
            "optimizer": rows["optimizer"], "activations": activations,
            "unsharded_at_forward_end": marks["unsharded_at_forward_end"],
            "base_live": base, "peak_live": live.peak, "marks": marks,
            "timeline": live.timeline(), "at_peak": live.at_peak()}
