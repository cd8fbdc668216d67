"""Query parameters <-> settings of the standalone "Strategies" page. Pure: no Streamlit.

Keys shared with the dashboard's share links (model, gpu, world, tp, pp, ep, zero, mb, seq, m,
recompute) plus `preset` (a policy preset), `policy` ("cls:policy;cls:policy") and `target`
(GiB; 0 = the GPU's capacity). Parsing never raises: a bad value becomes a message naming the
parameter and the default is used. `to_specs` raises SpecError for an invalid combination.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..errors import SpecError
from ..presets import GPUS, MODELS, gpu, model
from ..presets.policies import POLICY_PRESETS, apply_policy
from ..specs import ParallelSpec, TrainSpec
from ..specs.policy import ActivationPolicy
from ..specs.runtime import A2A_SIZING, RuntimeSpec
from ..specs.train import RECOMPUTE
from ..units import GIB

DEFAULTS = {"model": "llama3-70b", "gpu": "h100", "world": 64, "tp": 8, "pp": 4, "ep": 1, "zero": 0,
            "mb": 1, "seq": 16384, "m": 8, "recompute": "none", "a2a": "dynamic", "preset": "",
            "policy": "", "target": 0.0}
CHOICES = {"model": tuple(MODELS), "gpu": tuple(GPUS), "recompute": RECOMPUTE, "a2a": A2A_SIZING,
           "preset": ("",) + tuple(POLICY_PRESETS)}
INTS = ("world", "tp", "pp", "ep", "zero", "mb", "seq", "m")


def decode_policy(text: str) -> dict[str, str]:
    rules = {}
    for part in filter(None, (x.strip() for x in text.split(";"))):
        c, sep, pol = part.partition(":")
        if not sep:
            raise SpecError("policy", f"expected class:policy, got {part!r}")
        rules[c.strip()] = pol.strip()
    ActivationPolicy.from_mapping(rules)
    return rules


def encode_policy(rules: Mapping[str, str]) -> str:
    return ";".join(f"{c}:{p}" for c, p in sorted(rules.items()))


def parse(params: Mapping[str, str]) -> tuple[dict, list[str]]:
    values, errors = dict(DEFAULTS), []
    for k, default in DEFAULTS.items():
        if k not in params:
            continue
        raw = str(params[k])[:512]
        try:
            if k in INTS:
                v = int(raw)
                if not 0 <= v <= 10**7:
                    raise ValueError
            elif k == "target":
                v = float(raw)
                if not 0 <= v <= 10**5:
                    raise ValueError
            elif k == "policy":
                decode_policy(raw)
                v = raw
            else:
                if raw not in CHOICES[k]:
                    raise ValueError
                v = raw
        except (ValueError, SpecError) as e:
            detail = f" ({e})" if isinstance(e, SpecError) else ""
            errors.append(f"query parameter {k}={raw!r} is not valid{detail}; using {default!r}")
            continue
        values[k] = v
    return values, errors


def to_params(values: Mapping) -> dict[str, str]:
    """Settings that differ from the defaults, as strings (the share link)."""
    return {k: str(v) for k, v in values.items() if k in DEFAULTS and v != DEFAULTS[k]}


def to_specs(values: Mapping):
    """(model, parallel, train as set (no policy), train with the policy, runtime, hardware,
    target bytes)."""
    m, hw = model(values["model"]), gpu(values["gpu"])
    kw = dict(tp=values["tp"], pp=values["pp"], ep=values["ep"], zero=values["zero"],
              sp=values["tp"] > 1)
    p = ParallelSpec.from_world(values["world"], **kw)
    if m.n_layers % p.n_stages:
        from ..schedules import balanced_layout
        p = replace(p, layout=balanced_layout(m.n_layers, p.n_stages))
    base = TrainSpec(micro_batch=values["mb"], seq=values["seq"], micro_batches=values["m"],
                     recompute=values["recompute"])
    t = apply_policy(base, values["preset"] or None, decode_policy(values["policy"]))
    target = int(values["target"] * GIB) or hw.hbm_bytes
    return m, p, base, t, RuntimeSpec(a2a=values["a2a"]), hw, target


def shown_policies(values: Mapping) -> dict[str, str]:
    """The policy each class shows in the editor: the preset's rules, then the link's rules."""
    preset = POLICY_PRESETS[values["preset"]].policy.as_dict() if values["preset"] else {}
    return {**preset, **decode_policy(values["policy"])}


def policy_param(values: Mapping, chosen: Mapping[str, str]) -> str:
    """The `policy` parameter for the editor's choices: only what differs from the preset."""
    preset = POLICY_PRESETS[values["preset"]].policy.as_dict() if values["preset"] else {}
    return encode_policy({c: v for c, v in chosen.items() if v != preset.get(c, "keep")})
