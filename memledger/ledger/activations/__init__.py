"""Activation profiles: which tensors each layer saves, per framework, and a registry.

Built in: `megatron` (Megatron-Core + TE, flash attention), `paper` (Korthikanti et al. 2022),
`hf` (Hugging Face transformers modules as traced, CUDA kernels; `hf-cpu` the same modules on
CPU kernels, used to validate against CPU traces). `traced:<name>` profiles are registered at
run time from a trace JSON (see memledger.trace).
"""
from __future__ import annotations

from memledger.errors import lookup
from memledger.ledger.activations.inventory import ActTensor, Profile, tensor_bytes

_REGISTRY: dict[str, Profile] = {}


def register(name: str, profile: Profile) -> None:
    _REGISTRY[name] = profile


def get_profile(name: str) -> Profile:
    """The registered profile, seen through fine-tuning (activations/finetune.py: frozen
    weights keep fewer inputs, adapters keep theirs); unchanged for full fine-tuning."""
    if "megatron" not in _REGISTRY:  # a traced profile may have been registered first
        _load_builtins()
    prof = lookup("profile", _REGISTRY, name, "activation profile", ordered=False)
    wrapped = _FINETUNED.get(id(prof))
    if wrapped is None or wrapped.base is not prof:
        wrapped = _FINETUNED[id(prof)] = Finetuned(prof)
    return wrapped


class Finetuned:
    """A profile whose layer and last-stage inventories follow TrainSpec.finetune."""

    def __init__(self, base):
        self.base = base

    def __getattr__(self, attr):
        return getattr(self.base, attr)

    def layer(self, m, kind, t, p):
        from memledger.ledger.activations.finetune import finetune_tensors
        return finetune_tensors(self.base.layer(m, kind, t, p), m, kind, t)

    def first_stage(self, m, t, p):
        from memledger.ledger.activations.finetune import finetune_tensors
        return finetune_tensors(self.base.first_stage(m, t, p), m, "first", t, outer=True)

    def last_stage(self, m, t, p):
        from memledger.ledger.activations.finetune import finetune_tensors
        return finetune_tensors(self.base.last_stage(m, t, p), m, "last", t, outer=True)


_FINETUNED: dict[int, Finetuned] = {}


def _load_builtins() -> None:
    from memledger.ledger.activations.profiles import hf, megatron, paper
    register("megatron", megatron.MegatronProfile())
    register("paper", paper.PaperProfile())
    register("hf", hf.HFProfile())
    register("hf-cpu", hf.HFProfile(device="cpu"))  # what HF saves when the step runs on a CPU


__all__ = ["ActTensor", "Profile", "get_profile", "register", "tensor_bytes"]
