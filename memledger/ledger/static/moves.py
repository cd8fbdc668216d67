"""Moving the static rows (seed 1, "静态三行也能动"): ZeRO-Offload, gradient offload, Muon's gather.

- optimizer_offload (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840): the fp32 master copy and
  the optimizer states of this rank's ZeRO partition live in host memory and the optimizer step
  runs on the CPU. Per step the partition's gradients go down (grad dtype) and the updated
  16-bit parameters come back up over PCIe. The GPU optimizer row becomes 0, and so do the
  GPU-side step temporaries.
- grad_offload (needs optimizer_offload): gradients stream to host memory as buckets fill; the
  GPU keeps a two-chunk double buffer (one chunk being filled, one in flight) of
  `grad_chunk_params` values. The gradient row becomes that buffer.
- param_offload (ZeRO-3 only): the rank's parameter shards live in host memory, and with
  optimizer_offload its gradient shards too — FSDP2 `CPUOffloadPolicy` (torch
  `fsdp/_fully_shard/_fsdp_param.py`: the padded shard moved to pinned CPU memory, copied to
  the GPU for each all-gather; `_fsdp_collectives.py`: each reduce-scatter output copied to
  the CPU), FSDP1 `CPUOffload(offload_params=True)` (both always with the optimizer on the
  CPU), DeepSpeed ZeRO-3 `offload_param` (alone: the optimizer partition stays on the GPU;
  with `offload_optimizer`: gradients partitioned to the CPU too, `stage3.py`
  `partition_grads`). Those rows become 0 (the explicit grad_offload double buffer stays);
  the GPU-side copies of the gathered shards are communication items
  (ledger.communication.param_offload_items). PCIe per step: every unit's shard up at its
  forward and again at its backward gather, its gradient shard down, per micro-batch.
- muon_gather: Muon orthogonalises whole matrices (Newton–Schulz), so a sharded matrix (TP, ZeRO)
  is gathered in fp32 during the optimizer step: "on-demand" gathers one matrix at a time (the
  largest is the transient), "full" gathers all the rank's matrices at once (Moonlight,
  arXiv 2502.16982 §2.3 distributed Muon). It is an optimizer-step transient: activations are
  freed by then.
Ignores: the CPU's own step time (CPU-Adam throughput is machine dependent) and pinned-buffer
staging in host memory beyond the states themselves.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from memledger.ledger.items import Item
from memledger.specs.parallel import ParallelSpec
from memledger.specs.runtime import RuntimeSpec
from memledger.specs.train import TrainSpec
from memledger.units import ceil_div, format_bytes

SRC_OFFLOAD = "ZeRO-Offload (Ren et al. 2021, arXiv 2101.06840) §4"
SRC_PARAM_OFFLOAD = ("torch fsdp/_fully_shard/_fsdp_param.py (CPUOffloadPolicy: sharded parameter "
                     "on the CPU); DeepSpeed zero/offload_config.py (offload_param)")
SRC_MUON = "Muon (Jordan et al. 2024); Moonlight distributed Muon (arXiv 2502.16982)"


@dataclass(frozen=True)
class HostSide:
    """What the static moves put in host memory and on PCIe, per GPU."""

    optimizer_bytes: int = 0  # master + states in host memory
    gradient_bytes: int = 0  # gradient shards in host memory
    weight_bytes: int = 0  # ZeRO-3 parameter shards in host memory (param_offload)
    grads_down_bytes_per_step: int = 0  # device → host
    params_up_bytes_per_step: int = 0  # host → device

    @property
    def host_bytes(self) -> int:
        return self.optimizer_bytes + self.gradient_bytes + self.weight_bytes

    @property
    def pcie_bytes_per_step(self) -> int:
        return self.grads_down_bytes_per_step + self.params_up_bytes_per_step


def move_static(items: list[Item], opt_params: int, p: ParallelSpec, t: TrainSpec,
                rt: RuntimeSpec) -> tuple[list[Item], HostSide]:
    """Rewrite the static items under the runtime's offload settings.

    `opt_params`: the values of this rank's optimizer partition (local params ÷ ZeRO group).
    """
    if not rt.optimizer_offload and not rt.param_offload:
        return items, HostSide()
    r = t.recipe
    off = rt.optimizer_offload
    moved = ({"optimizer"} if off else set()) | (
        {"gradients"} if rt.grad_offload or (off and rt.param_offload) else set()) | (
        {"weights"} if rt.param_offload else set())
    host = {row: sum(i.bytes for i in items if i.row == row) for row in moved}
    out = []
    for i in items:
        if i.row in moved:
            src = SRC_PARAM_OFFLOAD if rt.param_offload and i.row != "optimizer" else SRC_OFFLOAD
            out.append(Item(i.row, i.name, 0, f"on the CPU ({i.bytes} B in host memory): {i.formula}",
                            src))
        else:
            out.append(i)
    if rt.grad_offload:
        chunk = rt.grad_chunk_params
        out.append(Item("gradients", "gradient double buffer (2 chunks)",
                        2 * format_bytes(r.grad_fmt, chunk),
                        f"2 × {chunk} params × {r.grad_fmt}; shards stream to host memory",
                        "seed 1 (静态三行也能动); " + SRC_OFFLOAD))
    up = down = 0
    if rt.param_offload:  # every gather brings the shard up, every reduce-scatter its grad down
        up = 2 * t.micro_batches * host["weights"]
        down = t.micro_batches * format_bytes(r.reduce_fmt or r.grad_fmt, opt_params) if off else 0
    elif off:
        up = format_bytes(r.weight_fmt, opt_params)
        down = format_bytes(r.grad_fmt, opt_params)
    side = HostSide(optimizer_bytes=host.get("optimizer", 0), gradient_bytes=host.get("gradients", 0),
                    weight_bytes=host.get("weights", 0), grads_down_bytes_per_step=down,
                    params_up_bytes_per_step=up)
    return out, side


def muon_gather_item(matrices, p: ParallelSpec, t: TrainSpec, rt: RuntimeSpec) -> Item | None:
    """The optimizer-step transient of Muon's full-matrix gather (None when nothing is sharded).

    `matrices`: (ParamGroup, instances) of the rank's 2-D hidden matrices.
    """
    if t.optimizer != "muon" or not matrices or (p.zero == 0 and p.tp == 1):
        return None
    if rt.muon_gather == "full":
        n = sum(g.count * k for g, k in matrices)
        return Item("runtime", "muon full-matrix gather (all matrices)", format_bytes("fp32", n),
                    f"all {n} matrix params of this rank, unsharded, in fp32", SRC_MUON)
    g = max((g for g, _ in matrices), key=lambda g: g.rows * g.cols)
    return Item("runtime", "muon on-demand gather (largest matrix)",
                format_bytes("fp32", g.rows * g.cols),
                f"largest matrix {g.rows}×{g.cols} in fp32, gathered one at a time", SRC_MUON)


def opt_partition_params(held, p: ParallelSpec) -> int:
    return _opt_partition_params(tuple(held), p)


@lru_cache(maxsize=4096)
def _opt_partition_params(held: tuple, p: ParallelSpec) -> int:
    from memledger.ledger.static.rows import local_params
    from memledger.ledger.static.sharding import zero_divisor
    return sum(ceil_div(local_params(h, p), zero_divisor("optimizer", h.group, p)) for h in held
               if not h.group.frozen)
