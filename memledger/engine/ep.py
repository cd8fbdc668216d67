"""Expert parallelism for the engine: a minimal all-to-all token dispatcher (torch).

torch 2.13 ships no expert-parallel module, so the harness replaces each transformers MoE
block's `experts` (fused [E, 2f, h] / [E, h, f] weights) with `EPExperts`, which keeps only its
E/ep experts and moves token rows with two autograd all-to-alls (torch.distributed.nn.
_functional_collectives.all_to_all_single_autograd) over the ep group:
  dispatch  rows = the T·K (token, expert) pairs sorted by destination rank; counts exchanged
            first (dist.all_to_all_single), then the rows (the dispatch buffer) and their
            expert ids;
  compute   per local expert: gate_up, SiLU·up, down (Mixtral/Qwen3 expert MLP);
  combine   the outputs go back by the reverse all-to-all (the combine buffer), are put back
            in (token, k) order, weighted by the router and summed over k.
It matches Megatron-Core's dropless all-to-all dispatcher in what crosses the wire and what
each rank holds (its experts; rows sized by the routing actually seen, the ledger's `dynamic`
sizing), not DeepEP (no pre-registered RDMA buffers, no low-latency mode, no fp8 dispatch, no
overlap) and not a capacity-factor dispatcher (no drops, no padding). Its saved tensors are its
own (gathered rows, per-expert matmuls), not transformers' grouped_mm ones, so activations and
the peak of EP cases are stored and shown, not held to the `hf` profile's bars. Dense
gradients are not all-reduced (memory only: DDP's bucket views would add none).
The dispatch/combine rows each rank received are recorded for comparison with the ledger.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class EPExperts(nn.Module):
    def __init__(self, experts: nn.Module, group, ep: int, rank: int):
        super().__init__()
        e = experts.num_experts
        self.local = e // ep
        lo = rank * self.local
        self.gate_up_proj = nn.Parameter(experts.gate_up_proj.detach()[lo:lo + self.local].clone())
        self.down_proj = nn.Parameter(experts.down_proj.detach()[lo:lo + self.local].clone())
        self.act_fn = experts.act_fn
        self.group, self.ep = group, ep
        self.received_rows: list[int] = []  # per forward: rows this rank's experts processed

    def _a2a(self, x, out_splits, in_splits):
        from torch.distributed._functional_collectives import (all_to_all_single_autograd,
                                                               wait_tensor)
        return wait_tensor(all_to_all_single_autograd(x, out_splits, in_splits, self.group))

    def forward(self, hidden_states, top_k_index, top_k_weights):
        t, k = top_k_index.shape
        flat = top_k_index.reshape(-1)
        dest = flat // self.local
        order = torch.argsort(dest, stable=True)
        send = torch.bincount(dest, minlength=self.ep)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        in_splits, out_splits = send.tolist(), recv.tolist()
        rows = hidden_states[torch.div(order, k, rounding_mode="floor")]  # dispatch send buffer
        x = self._a2a(rows, out_splits, in_splits)  # dispatch receive buffer
        ids = torch.empty(sum(out_splits), dtype=flat.dtype)
        dist.all_to_all_single(ids, flat[order].contiguous(), out_splits, in_splits, group=self.group)
        self.received_rows.append(int(x.shape[0]))
        y = torch.zeros_like(x)
        for e in range(self.local):
            hit = (ids - dist.get_rank(self.group) * self.local) == e
            if not bool(hit.any()):
                continue
            gate, up = nn.functional.linear(x[hit], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = y.index_put((hit.nonzero().squeeze(1),),
                            nn.functional.linear(self.act_fn(gate) * up, self.down_proj[e]))
        back = self._a2a(y, in_splits, out_splits)  # combine buffer
        out = torch.empty_like(back).index_copy(0, order, back)
        out = out.view(t, k, -1) * top_k_weights.unsqueeze(-1).to(out.dtype)
        return out.sum(dim=1)


def apply_ep(stage: nn.Module, group, ep: int) -> list[EPExperts]:
    """Replace every MoE block's experts by this rank's EP shard; returns the new modules."""
    rank = dist.get_rank(group)
    out = []
    for layer in stage.layers:
        block = getattr(layer, "mlp", None)
        experts = getattr(block, "experts", None)
        if experts is not None and hasattr(experts, "gate_up_proj"):
            block.experts = EPExperts(experts, group, ep, rank)
            out.append(block.experts)
    return out
