"""memledger: the GPU memory ledger for large-model training.

Public API: specs (ModelSpec, ParallelSpec, TrainSpec, RuntimeSpec, Hardware), presets,
`build_ledger`, and the units helpers. The core is pure: no Streamlit, no Plotly, no printing.
"""
from memledger.errors import SpecError
from memledger.ledger import Ledger, build_ledger
from memledger.ledger.items import ROW_LABELS, ROWS, Item, RankLedger
from memledger.model.params import n_active_params, n_params
from memledger.presets import GPUS, MODELS, gpu, model
from memledger.specs import Hardware, MLASpec, ModelSpec, MoESpec, ParallelSpec, TrainSpec
from memledger.specs.runtime import RuntimeSpec
from memledger.units import GB, GIB, gb, gib

__all__ = ["SpecError", "ROWS", "ROW_LABELS", "Item", "RankLedger", "Ledger", "build_ledger",
           "n_params", "n_active_params", "GPUS", "MODELS", "gpu", "model", "Hardware",
           "MLASpec", "ModelSpec", "MoESpec", "ParallelSpec", "TrainSpec", "RuntimeSpec",
           "GB", "GIB", "gb", "gib"]
