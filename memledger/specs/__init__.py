"""Frozen, validated specifications: what the user asks about, never what the ledger computes."""
from .hardware import Hardware
from .model import MLASpec, ModelSpec, MoESpec
from .parallel import SCHEDULES, ParallelSpec
from .train import OPTIMIZERS, RECIPES, TrainSpec

__all__ = ["Hardware", "MLASpec", "ModelSpec", "MoESpec", "ParallelSpec", "SCHEDULES",
           "TrainSpec", "OPTIMIZERS", "RECIPES"]
