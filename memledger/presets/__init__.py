"""Presets are data with a source: models and GPUs by name."""
from memledger.model.presets import MODELS, model
from memledger.presets.gpus import GPUS, gpu

__all__ = ["GPUS", "MODELS", "gpu", "model"]
