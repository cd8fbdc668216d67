"""The Strategies page's own settings, as page parameters next to the shared configuration, and
the storage-policy codec. Pure: no Streamlit.

The model, GPU, parallelism and training settings are the shared sidebar's (`state.Config`);
this page adds:
  preset  a named policy preset (`memledger.presets.policies`) or `none`;
  policy  per-class rules that differ from the preset: `cls:policy;cls:policy`, sorted and in
          canonical spelling (`fp8+offload-cpu`), so equal policies give equal links;
  target  GiB the most loaded GPU should fit in (0 = the GPU's capacity);
  mfu     model FLOPs utilisation, %, pricing recompute and the time an offload may hide in;
  a2a     MoE all-to-all buffer sizing (`RuntimeSpec.a2a`).
"""
from __future__ import annotations

from collections.abc import Mapping
from itertools import product

from memledger.costs.compute import DEFAULT_MFU_PCT
from memledger.errors import SpecError
from memledger.presets.policies import POLICY_PRESETS
from memledger.specs.hardware import Hardware
from memledger.specs.policy import OFFLOAD_TARGETS, QUANT_FORMATS, ActivationPolicy, TensorPolicy
from memledger.specs.runtime import A2A_SIZING
from memledger.units import GIB
from memledger.views.state import PageParam

NO_PRESET = "none"
# Every policy a tensor class can take: keep, recompute, a format, a target, or format+target.
POLICY_OPTIONS: tuple[str, ...] = (
    ("keep", "recompute") + tuple(QUANT_FORMATS) + tuple(OFFLOAD_TARGETS)
    + tuple(f"{q}+{o}" for q, o in product(QUANT_FORMATS, OFFLOAD_TARGETS)))
MAX_TARGET_GIB = 100_000


def decode_policy(text: str) -> dict[str, str]:
    """`cls:policy;cls:policy` -> {cls: canonical policy}; raises SpecError('policy')."""
    rules = {}
    for part in filter(None, (x.strip() for x in text.split(";"))):
        c, sep, pol = part.partition(":")
        if not sep:
            raise SpecError("policy", f"expected class:policy, got {part!r}")
        rules[c.strip()] = str(TensorPolicy.parse(pol, f"policy[{c.strip()}]"))
    ActivationPolicy.from_mapping(rules)  # checks the class names
    return rules


def encode_policy(rules: Mapping[str, str]) -> str:
    return ";".join(f"{c}:{p}" for c, p in sorted(rules.items()))


def canonical_policy(text: str) -> str:
    """The `policy` parameter's parser: the same rules, spelt one way."""
    return encode_policy(decode_policy(text))


SPECS = (PageParam("preset", NO_PRESET, choices=(NO_PRESET,) + tuple(POLICY_PRESETS)),
         PageParam("policy", "", parse=canonical_policy),
         PageParam("target", 0, limits=(0, MAX_TARGET_GIB)),
         PageParam("mfu", DEFAULT_MFU_PCT, limits=(1, 100)),
         PageParam("a2a", "dynamic", choices=A2A_SIZING))


def preset_name(preset: str) -> str | None:
    return None if preset == NO_PRESET else preset


def preset_rules(preset: str) -> dict[str, str]:
    return POLICY_PRESETS[preset].policy.as_dict() if preset != NO_PRESET else {}


def shown_policies(preset: str, policy: str) -> dict[str, str]:
    """The policy each class shows in the editor: the preset's rules, then the link's rules."""
    return {**preset_rules(preset), **decode_policy(policy)}


def policy_param(preset: str, chosen: Mapping[str, str]) -> str:
    """The `policy` parameter for the editor's choices: only what differs from the preset."""
    base = preset_rules(preset)
    return encode_policy({c: v for c, v in chosen.items() if v != base.get(c, "keep")})


def target_bytes(target_gib: int, hw: Hardware) -> int:
    return target_gib * GIB if target_gib else hw.hbm_bytes
