"""The state torchtitan's first training step leaves behind, put in place by torchtitan's and
FSDP2's own functions instead of a whole warm-up step (torch, torchtitan 0.3.0).

The measured step must find what every later step of a run finds; a first step leaves (torch
2.13 distributed/fsdp/_fully_shard, torchtitan components/):
  - FSDP2's lazy init, run by the root's pre-forward (`FSDPState._lazy_init`): the root chosen,
    the shared comm context, each param group's `lazy_init` (the root's
    post_forward_mesh_info cleared under the automatic reshard policy);
  - each unit's all-gather outputs and unsharded parameters, created at the first unshard and
    freed (storage resized to 0) at its reshard, so a later step re-allocates them with
    `UntypedStorage.resize_` rather than a new tensor: `FSDPModule.unshard()` + `reshard()`,
    once per FSDP state;
  - ChunkedLossWrapper's FSDP settings on the head unit (components/loss.py `__call__`: it
    ends with set_reshard_after_forward(True), set_reshard_after_backward(True),
    set_requires_gradient_sync(True, recurse=False)): the same calls;
  - the optimizer states, as torchtitan's `init_optim_state` makes them (components/optimizer/
    utils.py, what `OptimizersContainer.state_dict` runs): zero gradients, Adam's
    `_init_group` creating `step`, `exp_avg`, `exp_avg_sq` (torch/optim/adam.py), then
    `zero_grad(set_to_none=True)` — the gradients are None, as after the first step's
    `zero_grad`. torchtitan's function reaches `_init_group` through a whole fused step at lr
    0, whose kernel changes no byte; for Adam and AdamW (every case here) `_init_group` is
    called directly (5-7 % of a 70B case's CPU time), any other optimizer runs torchtitan's.
What a first step also leaves is not held by anything the probe follows: the reduce-scatter
input buffers are released at the end of its backward (`_root_post_backward_final_callback`
clears `reduce_scatter_states`), the MoE load-balancing hook updates `expert_bias` in place,
and the caches of fake-tensor dispatch and DTensor sharding propagation only change the time.
Checked: every stored field of the cases in validation/engine-torchtitan.json is re-measured
byte-identical (benchmarks/bench_engine.py --torchtitan).
"""
from __future__ import annotations


def fsdp_states(model):
    """One module per FSDP state (a grouped `fully_shard([norm, lm_head])` is one state)."""
    from torch.distributed.fsdp import FSDPModule
    seen = {}
    for m in model.modules():
        if isinstance(m, FSDPModule):
            seen.setdefault(id(m._get_fsdp_state()), m)
    return list(seen.values())


def init_states(optim, keep_grads: bool = False) -> None:
    """torchtitan's `init_optim_state` without its step's kernel, for torch's Adam family;
    `keep_grads`: the gradients left zeroed, as 0.3's CUDA-graph step leaves them
    (`zero_grad(set_to_none=False)`, ledger.titan_graphs)."""
    import torch
    from torchtitan.components.optimizer.utils import init_optim_state
    if not isinstance(optim, torch.optim.Adam) or optim.state:
        return init_optim_state(optim)
    params = [p for g in optim.param_groups for p in g["params"]]
    if any(p.grad is not None for p in params):  # init_optim_state's own guard
        return None
    for p in params:
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    for group in optim.param_groups:
        optim._init_group(group, [], [], [], [], [], [])
    optim.zero_grad(set_to_none=not keep_grads)
    return None


def warm_state(model, opt, head=None, keep_grads: bool = False) -> None:
    """The first step's lasting state on `model` (a root FSDP module) and `opt` (torchtitan's
    OptimizersContainer); `head`: the lm_head ChunkedLossWrapper drives, or None; `keep_grads`:
    zeroed gradients left in place (`init_states`)."""
    import torch
    from torch.distributed.fsdp import FSDPModule
    if isinstance(model, FSDPModule):  # torchtitan applies no FSDP when dp_shard = 1
        model._get_fsdp_state()._lazy_init()
        with torch.no_grad():
            for m in fsdp_states(model):
                m.unshard()
                m.reshard()
    if isinstance(head, FSDPModule):  # the loss wrapper's `fsdp_enabled`
        head.set_reshard_after_forward(True)
        head.set_reshard_after_backward(True)
        head.set_requires_gradient_sync(True, recurse=False)
    for o in getattr(opt, "optimizers", [opt]):
        init_states(o, keep_grads)


def warm_pipeline(sched, stages, opt, args: tuple, target, losses, loss_kwargs) -> None:
    """The first `schedule.step`'s lasting state under PP, by torch.distributed.pipelining's own
    functions (torch 2.13 pipelining/schedules.py, stage.py): the step's preamble (each stage's
    has_backward, `clear_runtime_states`, the micro-batch split, `_check_inputs`), the stage
    initialisation every step's `_step_microbatches` starts with (`_initialize_stage(s)`: the
    metadata inference — one forward and backward per stage, which lazily initialises FSDP2
    and unshards its units — the receive buffers, `_post_metadata_inference_cleanup`: units
    resharded, gradients dropped), the `perform_reduce_grad` each stage ends a step with (the
    FSDP flags set_is_last_backward / reshard_after_backward / requires_gradient_sync(True),
    every param group's post_backward, the root's final callback), then the optimizer states
    as `warm_state`. The other micro-batches' forwards and backwards leave nothing else behind
    (the next step's `clear_runtime_states` drops the receive buffers' gradients)."""
    from torch.distributed.pipelining.microbatch import _split_tensor
    from torch.distributed.pipelining.schedules import _TARGET_CHUNK_SPEC, PipelineScheduleMulti
    for s in stages:
        s.has_backward = sched._has_backward
        s.clear_runtime_states()
    args_split, kwargs_split = sched._split_inputs(args, {})
    targets = (list(_split_tensor(target, _TARGET_CHUNK_SPEC, sched._n_microbatches))
               if target is not None else None)
    arg_mbs, kwarg_mbs = sched._check_inputs(args_split, kwargs_split, targets, losses)
    init = (sched._initialize_stages if isinstance(sched, PipelineScheduleMulti)
            else sched._initialize_stage)
    init(arg_mbs[0], kwarg_mbs[0], targets[0] if targets is not None else None, loss_kwargs)
    for s in stages:
        s.perform_reduce_grad(1)  # torchtitan's schedules run scale_grads=False
    opt.zero_grad()
    for o in getattr(opt, "optimizers", [opt]):
        init_states(o)
