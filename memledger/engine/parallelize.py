"""Apply the case's parallelism to a rank's stage modules with PyTorch's own APIs (torch).

TP/SP: `parallelize_module` with torchtitan's Llama plan written for transformers' module names
(torchtitan/models/llama3/infra/parallelize.py, apply_tp): vocab-parallel embedding (rowwise,
output Shard(1) under SP), SequenceParallel RMSNorms, colwise q/k/v/gate/up, rowwise o/down
(output Shard(1) under SP), colwise head with vocab-sharded logits and the model's own loss
under `loss_parallel()`.
FSDP2: `fully_shard` on every decoder layer, then on the stage (the root: embedding, final
norm, head), `reshard_after_forward` = (zero == 3); fused experts with E < dp on dim 1. ZeRO-1: DDP with gradient_as_bucket_view
(gradients are views of the buckets, as Megatron's grad buffer) and ZeroRedundancyOptimizer.
"""
from __future__ import annotations

import torch


def tp_plan(stage, sp: bool) -> dict:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)
    seq = Shard(1) if sp else Replicate()
    plan = {}
    if stage.embed_tokens is not None:
        plan["embed_tokens"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if stage.lm_head is not None:
        if sp:
            plan["norm"] = SequenceParallel()
        # loss parallel (torchtitan's default): logits stay vocab-sharded, the cross-entropy
        # runs on the shards (Megatron's vocab-parallel cross-entropy, what the ledger models)
        plan["lm_head"] = ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1),
                                          use_local_output=False)
    for i in range(len(stage.layers)):
        p = f"layers.{i}."
        plan.update({p + "self_attn.q_proj": ColwiseParallel(), p + "self_attn.k_proj": ColwiseParallel(),
                     p + "self_attn.v_proj": ColwiseParallel(),
                     p + "self_attn.o_proj": RowwiseParallel(output_layouts=seq),
                     p + "mlp.gate_proj": ColwiseParallel(), p + "mlp.up_proj": ColwiseParallel(),
                     p + "mlp.down_proj": RowwiseParallel(output_layouts=seq)})
        if sp:
            plan.update({
                p + "input_layernorm": SequenceParallel(),
                p + "post_attention_layernorm": SequenceParallel(),
                p + "self_attn": PrepareModuleInput(
                    input_kwarg_layouts={"hidden_states": Shard(1)},
                    desired_input_kwarg_layouts={"hidden_states": Replicate()}, use_local_output=True),
                p + "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                              desired_input_layouts=(Replicate(),),
                                              use_local_output=True)})
    return plan


def apply_ac(stage):
    """Full activation checkpointing: every decoder layer in torch's `checkpoint_wrapper`
    (non-reentrant, as torchtitan's apply_ac; torch/distributed/algorithms/_checkpoint)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    for i, layer in enumerate(stage.layers):
        stage.layers[i] = checkpoint_wrapper(layer, preserve_rng_state=False)
    return stage


def apply_tp(stage, mesh, sp: bool):
    from torch.distributed.tensor.parallel import parallelize_module
    parallelize_module(stage, mesh, tp_plan(stage, sp))
    return stage


def apply_fsdp(stage, mesh, zero: int, ignored: set | None = None):
    """`ignored`: parameters FSDP leaves alone (expert-parallel experts, one owner each)."""
    from torch.distributed.fsdp import fully_shard
    reshard = zero == 3
    ignored = ignored or None
    for layer in stage.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard,
                    shard_placement_fn=_experts_on_dim1(mesh.size()), ignored_params=ignored)
    # the root as users write it: fully_shard(model) leaves reshard_after_forward=None, which
    # FSDP2 turns into "keep the root unsharded from forward to backward" (_fsdp_state.py
    # _lazy_init: its parameters would be all-gathered again at once for backward)
    fully_shard(stage, mesh=mesh, reshard_after_forward=None if reshard else False,
                ignored_params=ignored)
    return stage


def _experts_on_dim1(dp: int):
    """Fused expert weights [E, ., .] with fewer experts than ranks are sharded on dim 1, as
    torchtitan does (parallelize.py apply_fsdp, shard_placement_fn): FSDP2's default dim-0
    sharding pads every rank to ceil(E/dp) whole experts — one full expert per rank when
    E < dp (measured: 14x the even shard for Mixtral's 8 experts over 128 ranks)."""
    from torch.distributed.tensor import Shard

    def place(p):
        return Shard(1) if p.ndim == 3 and p.shape[0] < dp else None
    return place


def apply_ddp(stage, group):
    from torch.nn.parallel import DistributedDataParallel as DDP
    return DDP(stage, process_group=group, gradient_as_bucket_view=True)


def optimizer(modules, zero: int, dp_group):
    params = [p for m in modules for p in m.parameters()]
    if zero == 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW,
                                       process_group=dp_group, foreach=False)
    # the per-parameter loop: DTensor grads of mixed placements (TP) cannot go through one
    # foreach call; its temporaries are one parameter's worth (the ledger's "fused": none)
    return torch.optim.AdamW(params, foreach=False)


def optimizer_states(opt) -> list[dict]:
    inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps its shard's optimizer
    return [inner.state]
