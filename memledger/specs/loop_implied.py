"""What a named training loop sets for the settings a user leaves out.

`--loop torchtitan` alone is torchtitan as it runs: the layout torchtitan builds from the
parallel degrees, not memledger's dashboard defaults (Megatron's 18-byte recipe, ZeRO-1).
Each rule names the torchtitan file it comes from; a setting the user gives (a flag, a config
file, the sidebar) always wins. Ignores HSDP (`data_parallel_replicate_degree`): memledger's
dp is one shard group, as in `configs/torchtitan.py`.
"""
from __future__ import annotations

from dataclasses import dataclass

TT = "torchtitan 0.3 "


@dataclass(frozen=True, kw_only=True)
class ImpliedRule:
    dest: str        # the CLI flag's dest / the sidebar's key
    when: str        # fsdp | no-fsdp-tp-pp | no-fsdp | pp | always
    value: object
    source: str


# torchtitan shards with FSDP2 when dp_shard > 1 or cp > 1 (ParallelDims.fsdp_enabled): FSDP2
# mixed precision over fp32 parameters; without it, autocast only under DDP / one device.
TORCHTITAN = (
    ImpliedRule(dest="zero", when="fsdp", value=3,
                source=TT + "distributed/parallel_dims.py fsdp_enabled = dp_shard_enabled or "
                            "cp_enabled; models/llama3/parallelize.py apply_fsdp"),
    ImpliedRule(dest="zero", when="no-fsdp", value=0,
                source=TT + "models/llama3/parallelize.py: no fully_shard without fsdp_enabled"),
    ImpliedRule(dest="zero3_impl", when="always", value="fsdp",
                source=TT + "distributed/fsdp.py fully_shard (FSDP2)"),
    ImpliedRule(dest="precision", when="fsdp", value="fsdp2-mixed",
                source=TT + "models/llama3/parallelize.py MixedPrecisionPolicy(param_dtype="
                            "training.mixed_precision_param, reduce_dtype=fp32)"),
    ImpliedRule(dest="precision", when="no-fsdp-tp-pp", value="fp32",
                source=TT + "config/configs.py mixed_precision_param: autocast only under "
                            "DDP or one device, so TP / PP without FSDP trains fp32"),
    ImpliedRule(dest="precision", when="no-fsdp", value="amp",
                source=TT + "config/configs.py mixed_precision_param (torch.autocast bf16)"),
    ImpliedRule(dest="tp_engine", when="always", value="dtensor",
                source=TT + "models/llama3/parallelize.py parallelize_module (DTensor)"),
    ImpliedRule(dest="layout", when="pp", value="torchtitan:1,1",
                source=TT + "distributed/pipeline_parallel.py: first/last_stage_less_layers "
                            "default 1 (config/configs.py)"),
)
RULES = {"torchtitan": TORCHTITAN}
# settings the loop also runs when asked, so no warning: torchtitan's training.dtype = bfloat16
# trains parameters, gradients and optimizer states in bf16 (config/configs.py `dtype`)
ALSO_RUNS = {"torchtitan": {"precision": ("bf16",)}}
IMPLIED_DESTS = ("zero", "zero3_impl", "precision", "tp_engine", "layout")


def _holds(when: str, *, fsdp: bool, tp: int, pp: int) -> bool:
    return {"always": True, "fsdp": fsdp, "no-fsdp": not fsdp, "pp": pp > 1,
            "no-fsdp-tp-pp": not fsdp and (tp > 1 or pp > 1)}[when]


def implied(loop: str, *, dp: int, cp: int, tp: int, pp: int) -> dict[str, tuple[object, str]]:
    """dest → (value, source) the loop sets for these degrees; the first rule that holds wins."""
    fsdp = dp > 1 or cp > 1
    out: dict[str, tuple[object, str]] = {}
    for r in RULES.get(loop, ()):
        if r.dest not in out and _holds(r.when, fsdp=fsdp, tp=tp, pp=pp):
            out[r.dest] = (r.value, r.source)
    return out


def layout_warnings(parallel, train, rt) -> tuple[str, ...]:
    """A named loop asked with a setting it never runs at these degrees (the Python API and
    links take specs as given): one line per differing setting, naming what the loop uses."""
    rules = implied(rt.loop, dp=parallel.dp, cp=parallel.cp, tp=parallel.tp, pp=parallel.pp)
    have = {"zero": parallel.zero, "precision": train.precision, "tp_engine": rt.tp_engine,
            "zero3_impl": rt.zero3_impl if parallel.zero == 3 else "fsdp"}
    if parallel.tp == 1:
        have["tp_engine"] = rules.get("tp_engine", (rt.tp_engine,))[0]  # no TP: moot
    out = tuple(f"{dest} {have[dest]} under loop {rt.loop}: {rt.loop} runs {value} at these "
                f"degrees ({source})"
                for dest, (value, source) in rules.items()
                if dest in have and have[dest] != value
                and have[dest] not in ALSO_RUNS.get(rt.loop, {}).get(dest, ()))
    modes = RECOMPUTE_MODES.get(rt.loop)
    if modes is not None and train.recompute not in modes[0]:
        out += (f"recompute {train.recompute} under loop {rt.loop}: not one of its modes; "
                f"{modes[1]}",)
    return out


# torchtitan's activation checkpointing, as memledger spells it: "selective" with
# selective_ac_option "op" is op, with "<k>" interval; Megatron's selective (recompute the
# attention core) and every-k are not torchtitan modes
RECOMPUTE_MODES = {"torchtitan": (
    ("none", "full", "op", "interval", "memory-budget"),
    "torchtitan's mode='selective' is --recompute op (selective_ac_option 'op') or --recompute "
    "interval --recompute-every K (option '<k>'); memledger's selective is Megatron's "
    "core_attn recompute (torchtitan 0.3 distributed/activation_checkpoint.py)")}
