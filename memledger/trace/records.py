"""What a trace records: one row per saved storage, and the totals the ledger needs.

A `SavedTensor` is one storage kept alive by autograd for backward, counted once however many
views of it were saved, with the bytes of the whole storage (a saved slice keeps its base alive).
`Trace` groups rows per layer (`layers.N` in the module path) and outside the layers, and splits
off copies of parameters (autocast's bf16 weight casts, fp32 upcasts of weights): they are
weight-sized, not token-sized, and belong next to the weights row, not the activations row.
Pure data: no torch here, so a trace JSON can be read where torch is not installed.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

PARAM_COPY = "param_copy"
SHARED = "shared"  # saved by several layers (e.g. RoPE cos/sin): charged outside the layers


@dataclass(frozen=True)
class SavedTensor:
    module: str  # qualified name of the innermost module running when it was saved ("" = root)
    layer: int | None  # N of the first `layers.N` in `module`; None outside the layers
    shape: tuple[int, ...]  # shape of the first view saved
    dtype: str  # e.g. "bfloat16"
    storage_bytes: int  # bytes of the storage kept alive
    tensor_bytes: int  # numel × element size of the first view saved (≤ storage_bytes)
    cls: str  # class from memledger.trace.classify
    producer: str = ""  # grad_fn class of the saved tensor ("" for tensors without history)
    views: int = 1  # how many saves hit this storage


@dataclass(frozen=True)
class Trace:
    tensors: tuple[SavedTensor, ...]
    tokens: int = 0  # tokens in the traced batch (b·s), for per-token figures
    meta: dict = field(default_factory=dict, compare=False)  # model/config notes, free-form

    # -- totals ----------------------------------------------------------------------------
    @property
    def activations(self) -> tuple[SavedTensor, ...]:
        return tuple(t for t in self.tensors if t.cls != PARAM_COPY)

    @property
    def total_bytes(self) -> int:
        """Saved activation bytes (parameter copies excluded)."""
        return sum(t.storage_bytes for t in self.activations)

    @property
    def param_copy_bytes(self) -> int:
        return sum(t.storage_bytes for t in self.tensors if t.cls == PARAM_COPY)

    def layer_bytes(self) -> dict[int, int]:
        """Saved activation bytes per layer index."""
        out: dict[int, int] = {}
        for t in self.activations:
            if t.layer is not None:
                out[t.layer] = out.get(t.layer, 0) + t.storage_bytes
        return dict(sorted(out.items()))

    @property
    def outside_bytes(self) -> int:
        """Saved activation bytes outside the layers (embedding, final norm, head, loss)."""
        return sum(t.storage_bytes for t in self.activations if t.layer is None)

    def by_class(self, layer: int | None | str = "all") -> dict[str, int]:
        """Bytes per class, for one layer, outside (None), or everything ("all")."""
        out: dict[str, int] = {}
        for t in self.activations:
            if layer == "all" or t.layer == layer:
                out[t.cls] = out.get(t.cls, 0) + t.storage_bytes
        return dict(sorted(out.items()))

    def in_layer(self, layer: int | None) -> tuple[SavedTensor, ...]:
        return tuple(t for t in self.activations if t.layer == layer)

    # -- JSON ------------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps({"tokens": self.tokens, "meta": self.meta,
                           "tensors": [asdict(t) for t in self.tensors]}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        d = json.loads(text)
        rows = tuple(SavedTensor(**{**r, "shape": tuple(r["shape"])}) for r in d["tensors"])
        return cls(tensors=rows, tokens=int(d.get("tokens", 0)), meta=d.get("meta", {}))


# Dtype names and tensor-parallel splits of traced classes (shared by profile and fitted).
_FMT = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "int64": "int64",
        "int32": "int32", "bool": "bool", "uint8": "uint8"}
_TP = {"qkv", "attn_core", "attn_out", "mlp_fc1", "mlp_act", "logits"}
_ETP = {"expert_fc1", "expert_act"}
# norm outputs: DTensor plans save the all-gathered block input (activations/profiles/hf.py)
_NONE = {"expert_in", "expert_out", "expert_idx", "embedding", SHARED, "loss", "norm_out"}


def split_of(cls: str) -> str:
    return "tp" if cls in _TP else "etp" if cls in _ETP else "none" if cls in _NONE else "sp"
