"""The optimizer step inside the backward: each parameter is stepped from its
post-accumulate-grad hook and its gradient freed there (torchtitan 0.2
`optimizer.early_step_in_backward`, torchtune `optimizer_in_bwd`). What it changes in the ledger,
and which layouts the frameworks refuse.

Lifetimes (memledger.ledger.timeline, `RankShape.step_in_backward`): a unit's gradients exist
only from its post-backward to the end of its parameters' steps, so the gradient column of the
walk never accumulates — the unit's gradients and one parameter's step temporaries are alive
after its backward's high point (its recompute working set freed), and nothing is alive at the
end-of-step `optimizer.step()` (a no-op). The gradients row still lists every gradient the
step makes; the runtime row's "lifetimes at the peak" item takes out those not alive at the
peak. The per-parameter step's temporaries: one optimizer per parameter (torchtitan
`OptimizersInBackwardContainer`, torchtune `create_optim_in_bwd_wrapper`), so a foreach step
holds one copy of the parameter it steps and a for-loop step two (the largest tensor sizes
both); a fused step none.
Ignores: the hook's Python time; gradient clipping (refused by torchtune with optimizer in
backward; torchtitan 0.2 clips nothing that exists then).
"""
from __future__ import annotations

from memledger.errors import SpecError
from memledger.ledger.items import Item
from memledger.ledger.optimizer_step import largest_local
from memledger.units import format_bytes

# (field, its value, refused when, why, source): the frameworks' own refusals, in order
RULES = (
    ("pp", lambda p, t, rt, loop: p.pp, lambda p, t, rt, loop: p.pp > 1,
     "pipeline parallelism: a stage's backward runs once per micro-batch",
     "torchtitan 0.2 components/optimizer.py build_optimizers: \"Optimizers in backward is not "
     "supported with Pipeline Parallel\""),
    ("ep", lambda p, t, rt, loop: p.ep, lambda p, t, rt, loop: p.ep > 1,
     "expert parallelism", "torchtitan 0.2 components/optimizer.py build_optimizers: "
     "\"... not supported with Expert Parallel\""),
    ("micro_batches", lambda p, t, rt, loop: t.micro_batches,
     lambda p, t, rt, loop: t.micro_batches > 1,
     "gradient accumulation: the hook would step at every micro-batch",
     "torchtune recipes/full_finetune_distributed.py: \"Gradient accumulation is not supported "
     "with optimizer in bwd\""),
    ("grad_lifetime", lambda p, t, rt, loop: loop.grad_lifetime,
     lambda p, t, rt, loop: not loop.on_demand,
     "persistent gradient buffers (Megatron's main-grad buffer, DeepSpeed's contiguous "
     "gradients) are reduced after the backward, not per parameter",
     "torch Tensor.register_post_accumulate_grad_hook; the loop presets (specs/loop.py)"),
    ("zero", lambda p, t, rt, loop: p.zero,
     lambda p, t, rt, loop: p.dp * p.cp > 1 and not (p.zero == 3 and rt.zero3_impl == "fsdp"),
     "data parallelism other than FSDP2: DDP and ZeRO-1/2 reduce gradients after the hook "
     "would have stepped them, FSDP2 calls the hooks after its reduce-scatter",
     "torch distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce "
     "(`_post_accumulate_grad_hooks` called on each sharded gradient)"),
    ("optimizer", lambda p, t, rt, loop: t.optimizer, lambda p, t, rt, loop: t.optimizer == "muon",
     "one torch Adam / AdamW per parameter", "torchtitan 0.2 components/optimizer.py "
     "OptimizersInBackwardContainer (optimizer_cls([p]) for Adam, AdamW)"),
    ("optimizer_offload", lambda p, t, rt, loop: rt.optimizer_offload,
     lambda p, t, rt, loop: rt.optimizer_offload,
     "the step runs on the CPU after the backward", "ZeRO-Offload (arXiv 2101.06840)"),
)


def check(p, t, rt, loop) -> None:
    """The first framework refusal the layout meets, as a SpecError naming its field."""
    if not rt.optimizer_in_backward:
        return
    for field, value, refused, why, source in RULES:
        if refused(p, t, rt, loop):
            raise SpecError(field, f"optimizer_in_backward is not run with "
                                   f"{field}={value(p, t, rt, loop)!r} ({why}; {source}); "
                                   f"set optimizer_in_backward=False")


def per_parameter_step(held, p, t, impl: str) -> Item:
    """The step temporaries of one parameter's optimizer, the largest parameter's."""
    fmt = t.opt.fixed_fmt or t.recipe.state_fmt
    n = largest_local(held, p)
    copies = {"fused": 0, "foreach": 1, "for-loop": 2}[impl]
    return Item("runtime", "optimizer-step temporaries (per parameter, in backward)",
                copies * format_bytes(fmt, n),
                f"{impl} step of one parameter at a time: {copies} {fmt} copies of the largest "
                f"tensor ({n} params)",
                "torch 2.13 torch/optim/adam.py; torchtitan 0.2 OptimizersInBackwardContainer "
                "(one optimizer per parameter)")


def stepped_backward(out: list, sh, st, k: int, acts: int, comm: int, head: int,
                     last: int, Event) -> int:
    """One backward with the optimizer stepped inside it (ledger.step_in_backward; one stage,
    one micro-batch): each gradient-making point allocates its gradients after its high point
    and frees them with its step, whose temporaries (`sh.step`, one parameter's) ride on them.
    `Event` is timeline.Event (passed in: the timeline imports this module). Returns the
    activations left."""
    s = st.stage
    if st.last_acts or st.loss_grads or (s == last and sh.t_fwd_last):
        out.append(Event("loss-backward", s, k, -1, 0, acts, comm + head, sh.t_loss))
    acts -= st.last_acts
    comm += sh.tied_head_grad  # titan_lifetimes: held to the embedding's backward
    if sh.other_grads + st.loss_grads:  # the head's (and no layer's) gradients, stepped
        out.append(Event("backward", s, k, -1, sh.other_grads + st.loss_grads, acts,
                         comm + sh.head_rs_delta, sh.step))
    for i, a, g in reversed(st.layers):
        out.append(Event("backward", s, k, i, 0, acts, comm, sh.t_layer))
        acts -= a
        if g:  # the layer's post-backward: its gradients, then its parameters' steps
            out.append(Event("backward", s, k, i, g, acts, comm, sh.step))
    acts -= st.first_acts
    if sh.tied_head_grad:  # summed with the embedding's gradient
        out.append(Event("backward", s, k, -1, 0, acts, comm + sh.end_acc_delta, 0))
        comm -= sh.tied_head_grad
    if st.end_grads and sh.end_grads_after_rs:  # the tied unit under TP: its input first
        out.append(Event("backward", s, k, -1, 0, acts, comm + sh.end_rs_delta, 0))
        out.append(Event("backward", s, k, -1, st.end_grads, acts, comm, sh.step))
    elif st.end_grads:
        out.append(Event("backward", s, k, -1, st.end_grads, acts, comm + sh.end_rs_delta,
                         sh.step))
    out.append(Event("backward", s, k, -1, 0, acts, comm, 0))
    return acts
