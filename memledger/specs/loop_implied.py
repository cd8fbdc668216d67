"""What a named training loop sets for the settings a user leaves out.

`--loop torchtitan` alone is torchtitan as it runs: the layout torchtitan builds from the
parallel degrees, not memledger's dashboard defaults (Megatron's 18-byte recipe, ZeRO-1).
Each rule names the torchtitan file it comes from; a setting the user gives (a flag, a config
file, the sidebar) always wins. Under HSDP (`dp_replicate`) FSDP follows the shard group.
"""
from __future__ import annotations

from dataclasses import dataclass

TT = "torchtitan 0.3 "


@dataclass(frozen=True, kw_only=True)
class ImpliedRule:
    dest: str        # the CLI flag's dest / the sidebar's key
    when: str        # fsdp | no-fsdp-tp-pp | no-fsdp | pp | tp-no-ep | always
    value: object    # TP_DEGREE: the run's tp
    source: str


TP_DEGREE = "the tp degree"


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
    # with EP off, TP shards the routed experts too: a MoE layer's FSDP unit is 1/tp of it
    # (measured: Qwen3-30B-A3B tp 2 fsdp 8, peak +9.3 % with the experts whole on each tp rank)
    ImpliedRule(dest="etp", when="tp-no-ep", value=TP_DEGREE,
                source=TT + "models/common/moe_sharding.py expert_param_placement_dense "
                            "(EP disabled, TP enabled: experts Shard(1) / Shard(2) on tp)"),
)
RULES = {"torchtitan": TORCHTITAN}

# The degrees and the accumulation a named loop runs when none is given: every framework but
# Megatron starts from one device's layout (the dashboard's tp 8 · pp 4 is Megatron's), and
# without pipeline parallelism one micro-batch per step. Not layout settings: never warned.
ONE_DEVICE = {  # loop -> why tp = pp = 1
    "torchtitan": TT + "config/configs.py ParallelismConfig: tensor_parallel_degree = 1, "
                       "pipeline_parallel_degree = 1",
    "pytorch": "a plain PyTorch loop: data parallel only unless it builds TP / PP itself",
    "hf-trainer": "transformers Trainer: data parallel (DDP / FSDP / DeepSpeed), no TP or PP "
                  "stages",
    "deepspeed": "DeepSpeed ZeRO under the transformers Trainer: data parallel, no pipeline "
                 "engine",
}
NO_ACCUMULATION = {  # loop -> why micro_batches = 1 without PP
    "torchtitan": TT + "config/configs.py TrainingConfig.global_batch_size = -1: "
                       "gradient_accumulation_steps = 1 (trainer.py)",
    "pytorch": "one backward per optimizer step",
    "hf-trainer": "transformers training_args.py gradient_accumulation_steps = 1",
    "deepspeed": "transformers training_args.py gradient_accumulation_steps = 1 (DeepSpeed's "
                 "'auto' takes it)",
}
# settings the loop also runs when asked, so no warning: torchtitan's training.dtype = bfloat16
# trains parameters, gradients and optimizer states in bf16 (config/configs.py `dtype`)
ALSO_RUNS = {"torchtitan": {"precision": ("bf16", "fsdp2-bf16-reduce")}}
IMPLIED_DESTS = ("zero", "zero3_impl", "precision", "tp_engine", "layout", "etp")


# torchtitan's activation checkpointing when the job config names none: 0.3's Trainer.Config
# builds SelectiveAC (op-level SAC); the TOML eras' mode "selective" with option "2" checkpoints
# every second block (memledger's interval 2)
RECOMPUTE_DEFAULT = {"torchtitan": {
    "0.3": ({"recompute": "op"},
            TT + "trainer.py Trainer.Config.activation_checkpoint = SelectiveAC.Config"),
    "older": ({"recompute": "interval", "recompute_every": 2},
              "torchtitan 0.2 config/job_config.py ActivationCheckpoint: mode 'selective', "
              "selective_ac_option '2' (2024-12 / 2025-06 config_manager.py alike)")}}


def implied_recompute(loop: str, era: str, given: set[str]) -> dict[str, object]:
    """The loop's activation checkpointing for an `era` when `--recompute` is not given."""
    table = RECOMPUTE_DEFAULT.get(loop)
    if table is None or "recompute" in given:
        return {}
    values, _ = table["0.3" if era == "0.3" else "older"]
    return {k: v for k, v in values.items() if k not in given}


def _holds(when: str, *, fsdp: bool, tp: int, pp: int, ep: int) -> bool:
    return {"always": True, "fsdp": fsdp, "no-fsdp": not fsdp, "pp": pp > 1,
            "no-fsdp-tp-pp": not fsdp and (tp > 1 or pp > 1), "tp-no-ep": tp > 1 and ep == 1
            }[when]


def implied_degrees(loop: str, given: set[str]) -> dict[str, object]:
    """tp and pp the loop starts from, for the ones not in `given` (ONE_DEVICE)."""
    return {d: 1 for d in ("tp", "pp") if loop in ONE_DEVICE and d not in given}


def implied_accumulation(loop: str, given: set[str], pp: int) -> dict[str, object]:
    """The loop's micro-batches per step without PP when not in `given` (NO_ACCUMULATION)."""
    if loop not in NO_ACCUMULATION or pp > 1 or "micro_batches" in given:
        return {}
    return {"micro_batches": 1}


def implied(loop: str, *, dp: int, cp: int, tp: int, pp: int,
            dp_replicate: int = 1, ep: int = 1) -> dict[str, tuple[object, str]]:
    """dest → (value, source) the loop sets for these degrees; the first rule that holds wins
    (the degrees themselves: `implied_degrees`). FSDP shards when the shard group
    dp/dp_replicate or cp is above 1; replicas alone are DDP (parallel_dims.py)."""
    fsdp = dp // max(1, dp_replicate) > 1 or cp > 1
    out: dict[str, tuple[object, str]] = {}
    for r in RULES.get(loop, ()):
        if r.dest not in out and _holds(r.when, fsdp=fsdp, tp=tp, pp=pp, ep=ep):
            out[r.dest] = (tp if r.value == TP_DEGREE else r.value, r.source)
    return out


def layout_warnings(parallel, train, rt, moe: bool = False) -> tuple[str, ...]:
    """A named loop asked with a setting it never runs at these degrees (the Python API and
    links take specs as given): one line per differing setting, naming what the loop uses.
    `moe`: the model has routed experts (etp is moot otherwise)."""
    rules = implied(rt.loop, dp=parallel.dp, cp=parallel.cp, tp=parallel.tp, pp=parallel.pp,
                    dp_replicate=parallel.dp_replicate, ep=parallel.ep)
    have = {"zero": parallel.zero, "precision": train.precision, "tp_engine": rt.tp_engine,
            "zero3_impl": rt.zero3_impl if parallel.zero == 3 else "fsdp"}
    if moe:
        have["etp"] = parallel.etp
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
