"""Presets are data with a source: models and GPUs by name."""
from .gpus import GPUS, gpu
from .models import MODELS, model

__all__ = ["GPUS", "MODELS", "gpu", "model"]
