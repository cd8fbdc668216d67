"""Frozen, validated specifications: what the user asks about, never what the ledger computes."""
from memledger.specs.hardware import Hardware
from memledger.specs.model import MLASpec, ModelSpec, MoESpec
from memledger.specs.parallel import SCHEDULES, ParallelSpec
from memledger.specs.train import OPTIMIZERS, RECIPES, TrainSpec

__all__ = ["Hardware", "MLASpec", "ModelSpec", "MoESpec", "ParallelSpec", "SCHEDULES",
           "TrainSpec", "OPTIMIZERS", "RECIPES"]
