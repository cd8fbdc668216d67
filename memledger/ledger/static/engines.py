"""Whose engine shards the static rows: two framework rules that differ from Megatron-Core's.

- `tp_engine="dtensor"` (torch 2.13 `parallelize_module` with torchtitan's Llama plan): the
  vocab-parallel embedding is `RowwiseParallel` (weight Shard(0) over tp), but DTensor registers
  no vocab-row strategy for `aten.embedding_dense_backward` — only Shard(1) (hidden), Partial
  with a batch/sequence-sharded grad_out, or Partial with a Partial grad_out
  (torch/distributed/tensor/_ops/_embedding_ops.py, `embedding_dense_backward_strategy`). The
  weight's gradient comes out Partial: the full V·h on every tp rank, with or without SP
  (measured, docs/engine-validation.md). Under ZeRO ≥ 2 FSDP's reduce-scatter shards it after
  backward, so the rule applies below ZeRO-2 only. Megatron (`VocabParallelEmbedding`) keeps
  it V/tp. Other groups are unaffected (the head is ColwiseParallel with a sharded gradient).
- `zero1_partition="greedy-params"` (torch 2.13 `ZeroRedundancyOptimizer._partition_parameters`,
  torch/distributed/optim/zero_redundancy_optimizer.py): each dp rank owns whole tensors; the
  tensors are sorted by numel, largest first (a stable sort), and each goes to the dp rank with
  the fewest elements so far (`_get_min_index`: the lowest index on a tie). States, master
  copies and gradient copies follow the tensors. Dp ranks then differ: the ledger's optimizer
  row is the most loaded dp rank (the one that sets the pipeline rank's peak), and
  `dp_rank_optimizer_bytes` gives every dp rank. Megatron's distributed optimizer splits one
  flat buffer evenly (N/d, the ledger's default).
Ignores: AdamW's per-tensor `step` counters (4 bytes per tensor, also ignored by the even
split); tensor boundaries inside a group follow memledger.model.params (q, k, v, gate, up,
down separate, as in HF Llama; one tensor per vector group), and with TP the local shards are
what is partitioned (torch would sort DTensors by their global numel; no run combines them).
"""
from __future__ import annotations

import heapq
from functools import lru_cache

from memledger.errors import SpecError
from memledger.ledger.items import Item
from memledger.ledger.static.rows import Held, optimizer_bytes
from memledger.ledger.static.sharding import shard_divisor, zero_group
from memledger.model.params import ParamGroup
from memledger.specs.parallel import ParallelSpec
from memledger.specs.runtime import RuntimeSpec
from memledger.specs.train import TrainSpec
from memledger.units import ceil_div, format_bytes

SRC_DTENSOR = ("torch 2.13 torch/distributed/tensor/_ops/_embedding_ops.py "
               "(embedding_dense_backward_strategy: no Shard(0) weight gradient)")
SRC_ZERO1 = ("torch 2.13 torch/distributed/optim/zero_redundancy_optimizer.py "
             "(_partition_parameters: sorted-greedy, whole tensors)")


def apply_engines(items: list[Item], held: list[Held], p: ParallelSpec, t: TrainSpec,
                  rt: RuntimeSpec) -> list[Item]:
    """The static items with the runtime's tensor-parallel engine and ZeRO-1 partition."""
    if rt.tp_engine == "dtensor" and p.tp > 1 and p.zero < 2:
        items = [_full_embedding_grad(i, held, t) for i in items]
    if greedy_applies(p, rt):
        items = _most_loaded_optimizer(items, held, p, t)
    return items


def _full_embedding_grad(i: Item, held: list[Held], t: TrainSpec) -> Item:
    h = next((h for h in held if h.section == "embedding" and h.group.shard == "vocab"
              and i.name == f"{h.section} / {h.group.name}"), None)
    if h is None or i.row != "gradients":
        return i
    n = h.group.count * h.instances
    fmt = "fp32" if h.group.fp32 else t.recipe.grad_fmt
    return Item("gradients", i.name, format_bytes(fmt, n),
                f"{h.instances} × {n} params, full V·h on every tp rank (DTensor: the "
                f"embedding's gradient is Partial, not vocab-sharded) × {fmt}", SRC_DTENSOR)


def greedy_applies(p: ParallelSpec, rt: RuntimeSpec) -> bool:
    return rt.zero1_partition == "greedy-params" and p.zero == 1 and p.dense_dp > 1


def _tensors(held: list[Held], p: ParallelSpec) -> list[tuple[int, Held]]:
    """(local numel, its group) for every tensor the rank holds, in the ledger's group order."""
    out = []
    for h in held:
        g = h.group
        if zero_group(g, p) != p.dense_dp:
            raise SpecError("zero1_partition", f"greedy-params partitions one dp group's whole "
                                               f"tensors (torch ZeroRedundancyOptimizer); expert "
                                               f"parameters with ep={p.ep}, etp={p.etp} have "
                                               f"their own group of {zero_group(g, p)} ranks")
        per_group = max(1, g.count // (g.rows * g.cols))  # matrices of the group, or 1 vector
        if g.expert:  # ep splits the experts, etp each expert's matrices
            per_rank, numel = ceil_div(per_group, p.ep), ceil_div(g.count // per_group, p.etp)
        else:
            per_rank, numel = per_group, ceil_div(g.count // per_group, shard_divisor(g, p))
        out += [(numel, h)] * (per_rank * h.instances)
    return out


def partition(numels: list[int], d: int) -> list[list[int]]:
    """Indices of `numels` each of d ranks owns: sorted by numel, largest first (stable), each to
    the rank with the fewest elements so far (lowest index on a tie) — ZeroRedundancyOptimizer."""
    heap = [(0, r) for r in range(d)]  # (elements so far, rank): the lowest rank wins a tie
    owned: list[list[int]] = [[] for _ in range(d)]
    for k in sorted(range(len(numels)), key=lambda k: -numels[k]):
        size, r = heapq.heappop(heap)
        owned[r].append(k)
        heapq.heappush(heap, (size + numels[k], r))
    return owned


@lru_cache(maxsize=65536)
def _tensor_optimizer_bytes(numel: int, h: Held, t: TrainSpec) -> int:
    g = h.group
    one = ParamGroup(g.name, numel, "replicated", g.matrix, g.rows, g.cols, g.fp32)
    return optimizer_bytes(Held(h.section, one, 1), ParallelSpec(), t)[0]


def _per_rank_groups(held: list[Held], p: ParallelSpec, t: TrainSpec) -> list[dict]:
    """Per dp rank: {group item name: (tensors, optimizer bytes)}."""
    tensors = _tensors(held, p)
    out = []
    for owned in partition([n for n, _ in tensors], p.dense_dp):
        groups: dict[str, tuple[int, int]] = {}
        for k in owned:
            numel, h = tensors[k]
            key = f"{h.section} / {h.group.name}"
            n, b = groups.get(key, (0, 0))
            groups[key] = (n + 1, b + _tensor_optimizer_bytes(numel, h, t))
        out.append(groups)
    return out


def dp_rank_optimizer_bytes(held: list[Held], p: ParallelSpec, t: TrainSpec) -> list[int]:
    """The optimizer row of every dp rank under the greedy partition (index = dp rank)."""
    return [sum(b for _, b in g.values()) for g in _per_rank_groups(held, p, t)]


def _most_loaded_optimizer(items: list[Item], held: list[Held], p: ParallelSpec,
                           t: TrainSpec) -> list[Item]:
    ranks = _per_rank_groups(held, p, t)
    loads = [sum(b for _, b in g.values()) for g in ranks]
    d = loads.index(max(loads))
    out = []
    for i in items:
        if i.row != "optimizer":
            out.append(i)
            continue
        n, b = ranks[d].get(i.name, (0, 0))
        out.append(i._replace(bytes=b, source=SRC_ZERO1,
                              formula=f"{n} whole tensors on dp rank {d} of {p.dense_dp}, the most "
                                      f"loaded (sorted-greedy, largest first)"))
    return out
