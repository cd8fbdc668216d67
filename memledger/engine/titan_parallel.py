"""Context and expert parallelism in the torchtitan harness: what the Trainer does per step
under CP, and the one stand-in expert parallelism needs under fake tensors.

Context parallelism (torchtitan 0.3.0, `partial_dtensor` backend): `parallelize_llama` /
`parallelize_deepseekv3` call `distributed/context_parallel/api.py: apply_cp_to_forward` on
every block's inner attention. For FlexAttention (the language models' attention) that wraps
the forward so that k and v are all-gathered over the cp mesh along the sequence
(`torch.distributed.tensor.experimental._context_parallel._cp_custom_ops.flex_cp_allgather`,
whose backward reduce-scatters the k/v gradients) and the local q attends to the global k, v
— an all-gather, not a ring (the SDPA backend, the one torch's ring-attention dispatcher
serves, is refused for language models: models/common/config_utils.py
`get_attention_config`). Per step, `Trainer.post_dataloading_process` builds the document
mask from the dataset's `positions` (`Decoder.get_attention_masks`) and then
`prepare_context_parallel_input` shards inputs, labels and positions along the sequence with
the head-tail load balancer (`context_parallel_load_balancer = "headtail"`, the default),
and the block mask along its q dimension. `step_inputs` does the same; positions are one
document per sample (`arange(seq)`), the dataset's `positions` for unpacked text. The
attention stand-in (titan.py) runs SDPA on the local q and the all-gathered k, v: it keeps
what FlexAttention keeps (q shard, global k, v, output, logsumexp), and SelectiveAC saves
its output while the all-gather (not in torchtitan's save list) is redone in the recompute.
The mask itself is not built: torchtitan's `create_attention_mask` is a torch.compile'd
`create_block_mask`, whose inductor kernel runs on the fake tensors' (absent) data and crashes
the process; the stand-in does not read a mask, and the BlockMask's index tensors are
kilobytes (B × ⌈S/128⌉² int32 for the q shard: 128 KiB at 32k tokens).

Expert parallelism: `AllToAllTokenDispatcher._sync_token_count_exchange`
(models/common/token_dispatcher.py) turns the all-to-all'd routing counts into the Python
split lists of the token all-to-all with `.tolist()` — data-dependent values a fake tensor
does not have. `balanced_token_counts` stands in for that method ONLY: every rank sends
T·K/ep routed rows to every peer and receives as many, each local expert getting T·K/E rows
from each peer — the balanced case, the same rows memledger assumes by default
(`RuntimeSpec.a2a = "dynamic"`: T·K rows dispatched and combined,
ledger/communication.py `a2a_rows`). The router, top-k, the token reorder (`argsort`), the
dispatch and combine all-to-alls, the rank-major → expert-major `_permute`, the grouped
experts (`torch._grouped_mm` with per-expert offsets; torchtitan 0.3 pads nothing per
expert) and the shared experts all stay torchtitan's.
"""
from __future__ import annotations


def balanced_token_counts(torch) -> None:
    """Replace the data-dependent split lists of the EP all-to-all by the balanced ones."""
    from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher
    if getattr(AllToAllTokenDispatcher._sync_token_count_exchange, "_memledger", False):
        return

    def sync(self, num_local_tokens_per_expert_E, num_global_EP_e, ep_size):
        n_experts = num_local_tokens_per_expert_E.shape[0]
        rows = self._memledger_rows  # T·K of this rank, set by the dispatch wrapper below
        if rows % n_experts or n_experts % ep_size:
            raise ValueError(f"balanced EP counts need E={n_experts} to divide T·K={rows} and "
                             f"ep={ep_size} to divide E")
        per_peer = rows // ep_size
        per_expert = rows // n_experts  # rows each (peer, local expert) pair carries
        counts = torch.full((n_experts,), per_expert, dtype=num_global_EP_e.dtype,
                            device=num_global_EP_e.device)
        return counts, [per_peer] * ep_size, [per_peer] * ep_size
    sync._memledger = True
    dispatch = AllToAllTokenDispatcher.dispatch

    def counted(self, x_TD, topk_scores_TK, topk_expert_ids_TK, num_local_tokens_per_expert_E):
        self._memledger_rows = topk_expert_ids_TK.numel()
        return dispatch(self, x_TD, topk_scores_TK, topk_expert_ids_TK,
                        num_local_tokens_per_expert_E)
    AllToAllTokenDispatcher._sync_token_count_exchange = sync
    AllToAllTokenDispatcher.dispatch = counted


def cuda_fp32_router_gate(torch) -> None:
    """torchtitan computes the router gate under `torch.autocast(device_type, dtype=float32)`
    (models/common/moe.py TokenChoiceTopKRouter.forward). CUDA autocast runs the Linear on
    fp32 casts of its bf16 input and weight, which its backward keeps (T·h × 4 B per MoE
    layer); CPU autocast supports bf16 / fp16 only and disables itself (torch
    amp/autocast_mode.py: "CPU Autocast only supports dtypes of ..."), so the gate would run in
    bf16 on the harness's CPU. The gate's forward here makes CUDA's two casts itself."""
    import torch.nn.functional as F
    from torchtitan.models.common.moe import TokenChoiceTopKRouter
    if getattr(TokenChoiceTopKRouter.forward, "_memledger", False):
        return
    route = TokenChoiceTopKRouter.forward

    def forward(self, x_BLD, *args, **kwargs):
        gate = self.gate
        if not getattr(gate, "_memledger_fp32", False):
            def fp32_linear(x):  # autocast's cached_cast of both operands, then the mm
                bias = gate.bias.float() if gate.bias is not None else None
                return F.linear(x.float(), gate.weight.float(), bias)
            gate.forward, gate._memledger_fp32 = fp32_linear, True
        return route(self, x_BLD, *args, **kwargs)
    forward._memledger = True
    TokenChoiceTopKRouter.forward = forward


def param_meshes(model) -> list[dict]:
    """The parameters' layouts as fully_shard left them: mesh axes, sizes, placements, count
    (HSDP: ["dp_replicate", "fsdp"], [R, dp_shard·cp], [Replicate, Shard(0)])."""
    seen: dict[tuple, int] = {}
    for p in model.parameters():
        mesh = getattr(p, "device_mesh", None)
        if mesh is not None:
            key = (tuple(mesh.mesh_dim_names or ()), tuple(mesh.shape),
                   tuple(map(str, p.placements)))
            seen[key] = seen.get(key, 0) + 1
    return [{"axes": list(a), "sizes": list(s), "placements": list(pl), "params": n}
            for (a, s, pl), n in seen.items()]


def step_inputs(case, dims, cfg, torch):
    """tokens, labels and the forward's keyword arguments, as post_dataloading_process makes."""
    # ids over the whole vocabulary: in a real run (titan_gloo) every vocab-parallel shard
    # of the embedding and the loss then sees some of them, as in training
    vocab = cfg.model_spec.model.vocab_size
    tokens = torch.randint(0, vocab, (case.local_batch, case.seq))
    labels = torch.randint(0, vocab, (case.local_batch, case.seq))
    if case.cp == 1:
        return tokens, labels, {}  # the cases without CP run without positions or masks
    from torchtitan.distributed.context_parallel import prepare_context_parallel_input
    positions = torch.arange(case.seq).repeat(case.local_batch, 1)
    extra = {"positions": positions}  # no BlockMask: see the module docstring
    p = cfg.parallelism
    return prepare_context_parallel_input(tokens, labels, extra, dims.get_mesh("cp"),
                                          torch.device("cpu"),
                                          p.context_parallel_load_balancer,
                                          p.context_parallel_ptrr_mask_key)


_FLEX_OP = None


def flex_shaped_attention(torch):
    """An attention op that keeps what FlexAttention keeps, for q·k and v head sizes that differ.

    MLA (DeepSeek-V3) attends with q, k of 192 = 128 + 64 (rope) channels and v of 128; CPU SDPA
    has no fused kernel for unequal head sizes and falls back to the math path, which keeps the
    L × L scores. torchtitan runs FlexAttention there, whose forward saves q, k, v, the output and
    the fp32 logsumexp (torch/_higher_order_ops/flex_attention.py `FlexAttentionAutogradOp`).
    This op returns (out, logsumexp) of those shapes and saves exactly those tensors; it joins
    SelectiveAC's save list as the flex HOP does. No values are computed (fake tensors only).
    """
    global _FLEX_OP
    if _FLEX_OP is not None:
        return _FLEX_OP

    @torch.library.custom_op("memledger::flex_shaped_attention", mutates_args=(),
                             schema="(Tensor q, Tensor k, Tensor v) -> (Tensor, Tensor)")
    def op(q, k, v):
        raise RuntimeError("memledger::flex_shaped_attention runs under FakeTensorMode only")

    @op.register_fake
    def _(q, k, v):
        b, n, lq, _ = q.shape
        return (q.new_empty((b, n, lq, v.shape[-1])),
                q.new_empty((b, n, lq), dtype=torch.float32))

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs, *output)

    def backward(ctx, grad_out, grad_lse):
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    op.register_autograd(backward, setup_context=setup)
    _FLEX_OP = torch.ops.memledger.flex_shaped_attention.default
    return _FLEX_OP
