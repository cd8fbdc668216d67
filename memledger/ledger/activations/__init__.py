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
    if "megatron" not in _REGISTRY:  # a traced profile may have been registered first
        _load_builtins()
    return lookup("profile", _REGISTRY, name, "activation profile", ordered=False)


def _load_builtins() -> None:
    from memledger.ledger.activations.profiles import hf, megatron, paper
    register("megatron", megatron.MegatronProfile())
    register("paper", paper.PaperProfile())
    register("hf", hf.HFProfile())
    register("hf-cpu", hf.HFProfile(device="cpu"))  # what HF saves when the step runs on a CPU


__all__ = ["ActTensor", "Profile", "get_profile", "register", "tensor_bytes"]
