"""The fewest GPUs a model can possibly train on: its weights, gradients and optimizer states
(one rank, no parallelism, ZeRO-0, as the ledger counts them) spread perfectly over GPUs that
each also hold the CUDA context. A lower bound — before any activation, buffer or sharding
rule — shared by the planner's empty-result reason and the Ledger page's over-capacity verdict.
"""
from __future__ import annotations

from memledger.ledger import build_ledger
from memledger.specs import ModelSpec, ParallelSpec, TrainSpec
from memledger.specs.runtime import RuntimeSpec
from memledger.units import ceil_div


def gpus_for_states(m: ModelSpec, train: TrainSpec, runtime: RuntimeSpec,
                    per_gpu_bytes: int) -> int:
    led = build_ledger(m, ParallelSpec(), train, runtime)
    usable = per_gpu_bytes - runtime.cuda_context_bytes
    return max(1, ceil_div(led.ranks[0].static_bytes, max(usable, 1)))
