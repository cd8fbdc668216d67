"""A torchtitan engine case from one line of `key=value` pairs (pure: no torch imported).

`memledger validate --engine torchtitan --engine-config model=qwen3:14B,world=16,tp=2,...` runs
the user's own layout through torchtitan's code under fake tensors, as the stored cases run
(engine/titan.py), and re-predicts it with the ledger. The model is one of torchtitan's flavors
(`FAMILY:FLAVOR`, torchtitan 0.3 `models/<family>/__init__.py`), spelled for the ledger by
`model.titan_flavors`; the trainer config is the family's registry function for that flavor
(`models/<family>/config_registry.py`), whose optimizer, loss and model converters it keeps —
the case then sets the layout, AC mode, sequence and batch as titan_cases.TitanCase does.
Ignores: every other torchtitan option (compile, Float8 and MX converters, DeepEP, the
spmd_types backend): the harness runs them as its stored cases do (engine/titan.py: eager,
bf16 matmuls, partial_dtensor).
"""
from __future__ import annotations

from memledger.engine.titan_cases import LOSSES, RESHARD, TitanCase
from memledger.errors import SpecError

# (family, flavor lower-cased) -> the config registry function run for it. 405B and 236B run
# under the 70B / 671B trainer config: their own registry entries (llama3_405b,
# deepseek_v3_671b_float8) build a Float8 converter that refuses a CPU; 1B / 3B / 4B / 8B have
# none of their own (or only an NVFP4 one, SM100-only) and take the family's nearest.
CONFIG_FN = {
    ("llama3", "debugmodel"): "llama3_debugmodel", ("llama3", "1b"): "llama3_8b",
    ("llama3", "3b"): "llama3_8b", ("llama3", "8b"): "llama3_8b",
    ("llama3", "70b"): "llama3_70b", ("llama3", "405b"): "llama3_70b",
    ("qwen3", "debugmodel"): "qwen3_debugmodel", ("qwen3", "0.6b"): "qwen3_0_6b",
    ("qwen3", "1.7b"): "qwen3_1_7b", ("qwen3", "4b"): "qwen3_1_7b", ("qwen3", "8b"): "qwen3_14b",
    ("qwen3", "14b"): "qwen3_14b", ("qwen3", "32b"): "qwen3_32b",
    ("qwen3", "debugmodel_moe"): "qwen3_moe_debug", ("qwen3", "30b-a3b"): "qwen3_30b_a3b",
    ("qwen3", "235b-a22b"): "qwen3_30b_a3b",
    ("deepseek_v3", "debugmodel"): "deepseek_v3_debugmodel",
    ("deepseek_v3", "16b"): "deepseek_v3_16b", ("deepseek_v3", "236b"): "deepseek_v3_671b",
    ("deepseek_v3", "671b"): "deepseek_v3_671b",
}
# torchtitan's own flavor keys (model_registry is case-sensitive)
FLAVOR_KEY = {"debugmodel": "debugmodel", "debugmodel_moe": "debugmodel_moe",
              "30b-a3b": "30B-A3B", "235b-a22b": "235B-A22B"}
SCHEDULE = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "interleaved1f1b": "Interleaved1F1B"}
AC = {"op": "selective", "selective": "selective", "full": "full", "none": "none"}
# key -> (TitanCase field, lowest, highest): bounded so one line cannot ask for unbounded work
INTS = {"world": ("world", 1, 65536), "tp": ("tp", 1, 64), "cp": ("cp", 1, 64),
        "ep": ("ep", 1, 1024), "pp": ("pp", 1, 64), "replicate": ("dp_replicate", 1, 65536),
        "seq": ("seq", 1, 1048576), "lb": ("local_batch", 1, 1024),
        "mbs": ("microbatch_size", 1, 1024), "pp_rank": ("pp_rank", 0, 63)}
KEYS = ("model", "world", "tp", "cp", "ep", "pp", "replicate", "ac", "seq", "lb", "mbs",
        "schedule", "pp_rank", "loss", "early_step", "reshard", "grads")
HELP = ("model=FAMILY:FLAVOR (torchtitan's, e.g. llama3:8B, qwen3:30B-A3B, deepseek_v3:16B), "
        "world=N, and any of tp, cp, ep, pp, replicate, ac (op|full|none|k: 0.2's every k-th "
        "block; default op), seq "
        "(default 8192), lb (local batch, default 1), mbs (PP micro-batch size), schedule "
        "(1f1b|interleaved), pp_rank, loss (chunked|materialized), early_step (on|off: 0.2's "
        "optimizer.early_step_in_backward), reshard (default|always|never: "
        "fsdp_reshard_after_forward), grads (freed|kept: kept = 0.3's CUDA-graph step)")
ON_OFF = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False}


def _model(value: str) -> dict:
    from memledger.model.titan_flavors import FLAVORS, flavor_names
    family, sep, flavor = value.partition(":")
    key = (family.strip().lower(), flavor.strip().lower())
    if not sep or key not in FLAVORS:
        raise SpecError("model", f"{value!r} is not a torchtitan FAMILY:FLAVOR memledger knows; "
                                 f"valid: {flavor_names()} (as family:flavor)")
    hit = FLAVORS[key]
    if isinstance(hit, str) and hit.startswith("preset:"):
        model = {"preset": hit.split(":", 1)[1]}
    elif isinstance(hit, str):  # a shipped Hub config.json (model/catalog)
        from memledger.model.hub import hub_config
        model = {"preset": "", "hf_config": tuple(hub_config(hit.split(":", 1)[1],
                                                             offline=True).items())}
    else:
        model = {"preset": "", "hf_config": hit}
    return {"family": key[0], "config_fn": CONFIG_FN[key],
            "flavor": FLAVOR_KEY.get(key[1], key[1].upper()), **model}


def _value(key: str, value: str):
    if key == "model":
        return _model(value)
    if key in INTS:
        field, lo, hi = INTS[key]
        try:
            n = int(value)
        except ValueError:
            raise SpecError(key, f"must be an integer in {lo}..{hi}, got {value!r}") from None
        if not lo <= n <= hi:
            raise SpecError(key, f"{n} is outside {lo}..{hi}")
        return {field: n}
    if key == "ac" and value.isdigit():  # torchtitan 0.2's selective_ac_option "<k>"
        if not 1 <= int(value) <= 256:
            raise SpecError(key, f"interval {value} is outside 1..256")
        return {"ac": "interval", "ac_every": int(value)}
    table, field = {"ac": (AC, "ac"), "schedule": (SCHEDULE, "schedule"),
                    "loss": ({x: x for x in LOSSES}, "loss"),
                    "early_step": (ON_OFF, "early_step"),
                    "reshard": ({x: x for x in RESHARD}, "reshard"),
                    "grads": ({"freed": False, "kept": True}, "keep_grads")}[key]
    if value.lower() not in table:
        raise SpecError(key, f"{value!r}; valid: {', '.join(table)}")
    return {field: table[value.lower()]}


def case_from_text(text: str) -> TitanCase:
    """The case `text` names; SpecError naming the key and its valid values otherwise."""
    kw: dict = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or key not in KEYS:
            raise SpecError("engine-config", f"{part!r}: expected key=value; {HELP}")
        if key in kw.get("_seen", ()):
            raise SpecError(key, "given twice")
        kw.setdefault("_seen", []).append(key)
        kw.update(_value(key, value))
    seen = kw.pop("_seen", [])
    for need in ("model", "world"):
        if need not in seen:
            raise SpecError("engine-config", f"needs {need}=…; {HELP}")
    # spaces, not commas: a stored name stays one item of a comma-separated --cases list
    return TitanCase(name="custom " + " ".join(p.strip() for p in text.split(",") if p.strip()),
                     **kw)
