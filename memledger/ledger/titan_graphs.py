"""torchtitan 0.3's CUDA-graph training step: when it runs, and what it changes in memory.

torchtitan 0.3 wraps the forward + backward of every step in a CUDA graph unless
`training.disable_cuda_graphs` is set (trainer.py: `wrap_with_cuda_graph(self._forward_backward_
body)`; config/configs.py: the flag defaults to False), and refuses the graph with PP or with an
expert-parallel token dispatcher that synchronises with the host — the default all-to-all one
(`_validate_cuda_graphs`). Where the graph runs, the step starts with
`optimizers.zero_grad(set_to_none=self.config.training.disable_cuda_graphs)`: the gradients are
zeroed in place, not freed, so every sharded gradient is alive all step long (FSDP2's
`foreach_reduce` adds each reduce-scatter output into it) — the persistent-gradient walk
(`RankShape.on_demand` False). Measured by torchtitan's own step with the gradients kept
(`--engine-config ... grads=kept`: zero_grad(set_to_none=False), which is what the graph
replays; the harness runs on the CPU, where `wrap_with_cuda_graph` falls back to eager).
Ignores: the graph's private memory pool (the reserved side: its blocks are the captured step's
working set, held between replays; docs/torchtitan.md), the capture's warm-up step (eager).
"""
from __future__ import annotations

from memledger.errors import SpecError
from memledger.ledger.fsdp2 import torchtitan_runs
from memledger.ledger.torchtitan_eras import era

SRC = ("torchtitan 0.3 trainer.py (wrap_with_cuda_graph; zero_grad(set_to_none="
       "disable_cuda_graphs); _validate_cuda_graphs), config/configs.py (disable_cuda_graphs)")


def check(p, t, rt, loop) -> None:
    """torchtitan's own refusals of `cuda_graphs="on"`, as SpecError naming the field."""
    if rt.cuda_graphs != "on":
        return
    if not torchtitan_runs(t, loop) or not era(rt).cuda_graphs:
        raise SpecError("cuda_graphs", "on needs torchtitan 0.3 as it runs (--loop torchtitan, "
                                       "an FSDP2 mixed-precision recipe); older eras have none")
    if p.pp > 1 or p.ep > 1:
        raise SpecError("cuda_graphs", f"torchtitan refuses CUDA graphs with pp={p.pp}, "
                                       f"ep={p.ep} (the default token dispatcher syncs with the "
                                       "host): both must be 1, or set cuda_graphs=off")


def graphs_run(p, t, rt, loop) -> bool:
    """The step runs under torchtitan's CUDA graph: on, or auto where torchtitan 0.3 runs it."""
    if rt.cuda_graphs == "off" or not torchtitan_runs(t, loop) or not era(rt).cuda_graphs:
        return False
    return rt.cuda_graphs == "on" or (p.pp == 1 and p.ep == 1)
