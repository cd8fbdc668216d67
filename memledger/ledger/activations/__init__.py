"""Activation profiles: which tensors each layer saves, per framework, and a registry.

Built in: `megatron` (Megatron-Core + TE, flash attention), `paper` (Korthikanti et al. 2022),
`hf` (Hugging Face transformers modules as traced, CUDA kernels; `hf-cpu` the same modules on
CPU kernels, used to validate against CPU traces). `traced:<name>` profiles are registered at
run time from a trace JSON (see memledger.trace).
"""
from __future__ import annotations

import copy

from memledger.errors import lookup
from memledger.ledger.activations.inventory import ActTensor, Profile, tensor_bytes

_REGISTRY: dict[str, Profile] = {}


def register(name: str, profile: Profile) -> None:
    _REGISTRY[name] = profile


def get_profile(name: str) -> Profile:
    """The registered profile, seen through fine-tuning (activations/finetune.py: frozen
    weights keep fewer inputs, adapters keep theirs); unchanged for full fine-tuning. The view
    is an instance of a subclass of the profile's own class, so isinstance and its fields hold."""
    if "megatron" not in _REGISTRY:  # a traced profile may have been registered first
        _load_builtins()
    prof = lookup("profile", _REGISTRY, name, "activation profile", ordered=False)
    key = (name, id(prof))
    view = _VIEWS.get(key)
    if view is None or view[0] is not prof:
        view = _VIEWS[key] = (prof, _finetuned(prof))
    return view[1]


class _Finetuned:
    """Mixin: the layer and first/last-stage inventories follow TrainSpec.finetune."""

    def layer(self, m, kind, t, p):
        from memledger.ledger.activations.finetune import finetune_tensors
        return finetune_tensors(super().layer(m, kind, t, p), m, kind, t)

    def first_stage(self, m, t, p):
        from memledger.ledger.activations.finetune import finetune_tensors
        return finetune_tensors(super().first_stage(m, t, p), m, "first", t, outer=True)

    def last_stage(self, m, t, p):
        from memledger.ledger.activations.finetune import finetune_tensors
        return finetune_tensors(super().last_stage(m, t, p), m, "last", t, outer=True)


_VIEWS: dict[tuple, tuple] = {}
_CLASSES: dict[type, type] = {}


def _finetuned(prof):
    cls = type(prof)
    sub = _CLASSES.get(cls)
    if sub is None:
        sub = _CLASSES[cls] = type(cls.__name__, (_Finetuned, cls), {"__module__": cls.__module__})
    view = copy.copy(prof)
    object.__setattr__(view, "__class__", sub)
    return view


def _load_builtins() -> None:
    from memledger.ledger.activations.profiles import hf, megatron, paper
    register("megatron", megatron.MegatronProfile())
    register("megatron-local", megatron.MegatronLocalProfile())  # --transformer-impl local
    register("paper", paper.PaperProfile())
    register("hf", hf.HFProfile())
    register("hf-cpu", hf.HFProfile(device="cpu"))  # what HF saves when the step runs on a CPU


__all__ = ["ActTensor", "Profile", "get_profile", "register", "tensor_bytes"]
