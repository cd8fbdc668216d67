"""ParallelSpec / TrainSpec stand-ins whose numeric fields are numpy arrays.

The core's byte functions (`static.weights_bytes`, `inventory.tensor_bytes`, `comm.pp_items`,
...) are integer arithmetic — `ceil_div`, `format_bytes`, products — which numpy int64 arrays
satisfy element-wise. Handing them these stand-ins evaluates the core's own formulas over a
whole array of configurations at once, instead of re-writing them. The stand-ins borrow
ParallelSpec's and TrainSpec's properties (world, dense_dp, expert_dp, recipe, pad_multiple, ...)
so derived quantities are the core's too. Fields the core branches on (sp, zero, schedule, pp)
stay Python scalars; a core function that starts branching on an array field raises numpy's
"truth value is ambiguous" error rather than returning a wrong number, and the byte-for-byte
equality test (tests/test_planner_equality.py) guards the rest.
"""
from __future__ import annotations

from dataclasses import fields

import numpy as np

from memledger.model.params import ParamGroup
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec


class VecParallel:
    world = ParallelSpec.world
    chunks = ParallelSpec.chunks
    n_stages = ParallelSpec.n_stages
    rank_stages = ParallelSpec.rank_stages
    dense_dp = ParallelSpec.dense_dp
    expert_dp = ParallelSpec.expert_dp
    seq_split = ParallelSpec.seq_split

    def __init__(self, *, tp=1, pp=1, vpp=1, ep=1, etp=1, cp=1, dp=1, sp=False, zero=0,
                 schedule="1f1b", layout=None, dp_replicate=1):
        self.tp, self.pp, self.vpp, self.ep, self.etp = tp, pp, vpp, ep, etp
        self.cp, self.dp, self.sp, self.zero = cp, dp, sp, zero
        self.schedule, self.layout, self.dp_replicate = schedule, layout, dp_replicate


class VecGroup:
    """Parameter groups of one kind side by side: a `ParamGroup` whose numbers (count, rows,
    cols) are [1, n] arrays, one column per group; the fields the core branches on (shard,
    matrix, fp32: `kind`) are the kind's, shared by every group of it."""

    expert = ParamGroup.expert

    def __init__(self, name, count, shard, matrix, rows, cols, fp32, frozen=False, store=None,
                 dim0=0):
        self.name, self.count, self.shard, self.matrix = name, count, shard, matrix
        self.rows, self.cols, self.fp32 = rows, cols, fp32
        self.frozen, self.store = frozen, store  # fine-tuning (ledger/static/finetune.py)
        self.dim0 = dim0  # experts along dim 0 (FSDP2's padding, ledger.fsdp2)

    @staticmethod
    def kind(g: ParamGroup) -> tuple:
        return type(g), g.shard, g.matrix, g.fp32, g.frozen, g.store

    @classmethod
    def of(cls, groups: list) -> VecGroup:
        if len({cls.kind(g) for g in groups}) != 1:
            raise ValueError("VecGroup: groups of different kinds")
        col = lambda k: np.array([getattr(g, k) for g in groups], np.int64)[None, :]  # noqa: E731
        g = groups[0]
        return cls(g.name, col("count"), g.shard, g.matrix, col("rows"), col("cols"), g.fp32,
                   g.frozen, g.store, col("dim0"))


class VecTrain:
    recipe = TrainSpec.recipe
    opt = TrainSpec.opt
    tokens_per_micro_batch = TrainSpec.tokens_per_micro_batch
    checkpoint_every = TrainSpec.checkpoint_every
    pad_multiple = TrainSpec.pad_multiple

    def __init__(self, base: TrainSpec, **override):
        for f in fields(base):
            setattr(self, f.name, getattr(base, f.name))
        for k, v in override.items():
            setattr(self, k, v)


class Quiet(np.ndarray):
    """An int64 array that formats as '…': the core writes its numbers into formula strings,
    and printing every element of every array would cost more than the arithmetic."""

    def __format__(self, spec):
        return "…"

    def __str__(self):
        return "…"

    __repr__ = __str__


def quiet(a) -> Quiet:
    return np.asarray(a, dtype=np.int64).view(Quiet)
