"""torchtitan's own code at small sizes for real: one gloo CPU process per rank, real tensors,
every rank measured with the same storage-following probe as the fake-mode runs (torch).

Each rank runs titan.py's path unchanged — `prepare` (the stand-ins and the Trainer.Config) and
`build_and_measure` (torchtitan's ParallelDims mesh on "cpu", model, `parallelize_fn`, optimizer
container, chunked loss, two Trainer-order steps, the second measured; under PP
`titan_pp_step.build_and_measure_pp`, every rank its own pp rank, torch's P2P for real, none
of titan_pp's fake-P2P stand-ins) — over a gloo process
group instead of the fake one, with real tensors instead of fake ones and torchtitan's own
weight init. Three stand-ins more than under fake mode, for the CPU's kernels and gloo:
  - `aten::_fused_rms_norm_backward` has no CPU kernel in torch 2.13 (CUDA and MPS only; the
    forward `_fused_rms_norm` has one). `cpu_rms_norm_backward` registers torch's own
    decomposition of it (torch/_decomp/decompositions.py `_fused_rms_norm_backward`) as the CPU
    kernel: the op returns the same two gradients, and its fp32 temporaries stay inside the
    kernel, as in the fused CUDA kernel and as under fake mode (where FakeTensorMode runs the
    same decomposition below the probe).
  - FSDP2's reduce-scatter: torchtitan sets every unit's gradient divide factor to 1.0
    (distributed/fsdp.py `disable_fsdp_gradient_division`; the Trainer scales by the global
    token count), so torch 2.13's `_get_gradient_divide_factors` (fsdp/_fully_shard/
    _fsdp_collectives.py) picks `ReduceOp.PREMUL_SUM(1.0)`, which gloo refuses
    ("RuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo"). `sum_reduction` sets
    `set_force_sum_reduction_for_comms(True)` on every FSDP unit: the same function then returns
    `ReduceOp.SUM` with a post-divide factor of 1.0, which `_div_if_needed` skips — the same
    sum, the same buffers, no extra kernel.
  - a gloo collective's `Work.wait()`: gloo's reduce-scatter (`dist.reduce_scatter_single`,
    which FSDP2's `foreach_reduce` calls synchronously) finishes inside the wait on the calling
    thread, and the ops it dispatches there allocate a temporary of the reduce-scatter input's
    size and copy the rank's chunk out of it (`split`, `copy_`; fp32, 2,097,152 B for the debug
    model's head unit, 3,409,920 B for a block; 817,156 B above the fake peak of the no-AC
    case). NCCL reduces in its
    own channel buffers (the ledger's NCCL row, zero for these runs). `quiet_waits` runs every
    `Work.wait` with the probe paused; what a collective writes into its output is the
    caller's tensor, already followed. gloo's worker thread still holds the finished work (and
    its tensors) after the wait returns and frees them once it gets the GIL: the wait ends
    with a 0.5 ms sleep so that those frees land before the next ops, not a switch interval
    later (seen without it: a block's all-gather output alive at the forward's end, 1 in ~10
    runs).
HSDP (dp_replicate > 1): FSDP2 follows each unit's reduce-scatter over the shard group with
`dist.all_reduce` of the rank's fp32 gradient shard over the replicate group (fsdp/_fully_shard/
_fsdp_collectives.py `foreach_reduce`, SUM under `sum_reduction`). `count_all_reduces` records
every such call: the group's global ranks, its elements, and whether the result is exactly the
replicas' sum — every rank trains on the same ids and weights (same seed), so each replica
holds the same shard and the sum is twice it, bit for bit (the check runs with the probe
paused, its copy unseen by the measurement).
Inputs: every rank draws its token and label ids from the same seed (identical across tp ranks,
as torchtitan's data loader feeds them; values do not change memory).
The parent spawns the ranks with `workers.spawn_ranks` (timeout, no processes left behind).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from memledger.engine.titan_cases import TitanCase

_LIB = None


def cpu_rms_norm_backward(torch) -> None:
    global _LIB
    if _LIB is not None:
        return
    from torch._decomp import decomposition_table
    op = torch.ops.aten._fused_rms_norm_backward.default
    _LIB = torch.library.Library("aten", "IMPL")
    _LIB.impl("_fused_rms_norm_backward", decomposition_table[op], "CPU")


def sum_reduction(model) -> None:
    from torch.distributed.fsdp import FSDPModule
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_force_sum_reduction_for_comms(True)


def quiet_waits() -> None:
    from torch.distributed.distributed_c10d import Work
    from torch.utils._python_dispatch import _disable_current_modes
    orig = Work.wait
    if getattr(orig, "_memledger", False):
        return

    def wait(self, *args, **kwargs):
        with _disable_current_modes():
            done = orig(self, *args, **kwargs)
        time.sleep(0.0005)  # the GIL to gloo's worker: it drops the finished work's tensors
        return done
    wait._memledger = True
    Work.wait = wait


_ALL_REDUCES: list[dict] = []


def count_all_reduces() -> None:
    """Every `dist.all_reduce` of this rank recorded (see the module docstring)."""
    import torch
    import torch.distributed as dist
    from torch.utils._python_dispatch import _disable_current_modes
    orig = dist.all_reduce
    if getattr(orig, "_memledger", False):
        return

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        with _disable_current_modes():
            before = tensor.detach().clone()
        work = orig(tensor, op=op, group=group, async_op=async_op)
        if async_op:
            work.wait()
        with _disable_current_modes():
            ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
            _ALL_REDUCES.append({"ranks": ranks, "numel": tensor.numel(),
                                 "dtype": str(tensor.dtype).removeprefix("torch."),
                                 "replica_sum": bool(torch.equal(tensor, before * len(ranks)))})
        return work
    all_reduce._memledger = True
    dist.all_reduce = all_reduce


def all_reduce_summary() -> list[dict]:
    """The rank's all-reduces per group (one backward ran: the measured step's): calls,
    elements, and whether every result was the replicas' sum."""
    by: dict[tuple, dict] = {}
    for c in _ALL_REDUCES:
        g = by.setdefault((tuple(c["ranks"]), c["dtype"]), {
            "ranks": c["ranks"], "dtype": c["dtype"], "calls": 0, "numel": 0, "replica_sum": True})
        g["calls"] += 1
        g["numel"] += c["numel"]
        g["replica_sum"] &= c["replica_sum"]
    return list(by.values())


def run_rank(rank: int, case: TitanCase, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from memledger.engine.titan import build_and_measure, prepare
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=rank, world_size=case.world)
    try:
        t0 = time.perf_counter()
        cfg = prepare(case)
        cpu_rms_norm_backward(torch)
        quiet_waits()
        if case.dp_replicate > 1:
            count_all_reduces()
        if case.pp > 1:  # every rank its own pp rank; torch's P2P runs for real
            from memledger.engine.titan_pp_step import build_and_measure_pp
            res = build_and_measure_pp(case, cfg, fake=False, on_model=sum_reduction)
        else:
            res = build_and_measure(case, cfg, fake=False, on_model=sum_reduction)
        res.pop("timeline", None)
        if case.dp_replicate > 1:
            res["all_reduces"] = all_reduce_summary()
        res = {"rank": rank, **res, "seconds": round(time.perf_counter() - t0, 2)}
        Path(out, f"rank{rank}.json").write_text(json.dumps(res))
    finally:
        dist.destroy_process_group()


def run_gloo(case: TitanCase, timeout_s: float = 300.0, start_method: str = "spawn") -> list[dict]:
    """Every rank's measurement of `case`, ordered by rank (start_method: workers.spawn_ranks)."""
    from memledger.engine.workers import spawn_ranks
    return spawn_ranks(run_rank, case, case.world, case.name, timeout_s, start_method)


RANK_KEYS = ("weights", "gradients", "optimizer", "activations", "base_live", "peak_live",
             "unsharded_at_forward_end",  # and under PP the activations' parts (titan_pp_step):
             "unsharded_at_warmup_end", "outputs_at_warmup_end", "received_inputs_at_warmup_end",
             "warmup_forwards", "stages", "param_meshes", "all_reduces")


def measure_case(case: TitanCase, timeout_s: float = 300.0) -> dict:
    """One stored entry: rank 0 of the gloo run as `measured` (what the ledger is compared
    with), every rank's rows, and the same case under fake mode at the same world size (under
    PP one fake run per pp rank, `fakes`)."""
    import dataclasses

    from memledger.engine.titan import run_titan_fresh
    from memledger.engine.titan_compare import case_to_dict
    ranks = run_gloo(case, timeout_s)
    # fake mode measures one pp rank per run (titan_pp): each in turn
    fakes = [run_titan_fresh(dataclasses.replace(case, pp_rank=k)) for k in range(case.pp)]
    for f in fakes:
        f.pop("timeline", None)
    first = {k: v for k, v in ranks[0].items() if k != "rank"}
    return {"case": case.name, "spec": case_to_dict(case), "measured": first,
            "ranks": [{"rank": r["rank"], **{k: r[k] for k in RANK_KEYS if k in r}} for r in ranks],
            "fake": fakes[0], **({"fakes": fakes} if case.pp > 1 else {})}
