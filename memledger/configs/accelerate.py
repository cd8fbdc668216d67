"""accelerate config YAML and LLaMA-Factory YAML → memledger flags: the rule tables.

accelerate (accelerate/commands/config/config_args.py, cluster.py; accelerate/utils/dataclasses.py
FullyShardedDataParallelPlugin): distributed_type FSDP = ZeRO-3 (zero3_impl fsdp) for
FULL_SHARD / HYBRID_SHARD, ZeRO-2 for SHARD_GRAD_OP, ZeRO-0 for NO_SHARD (FSDP 1); FSDP 2's
fsdp_reshard_after_forward false = reshard never. mixed_precision bf16 under FSDP = FSDP2's
MixedPrecisionPolicy over fp32 parameters (fsdp2-mixed), otherwise autocast (amp);
num_processes = world; parallelism_config tp/cp/dp_shard/dp_replicate sizes = tp, cp,
dp = shard · replicate, and replicate > 1 beside FSDP sharding is HSDP (dp_replicate); FSDP 1's
HYBRID_SHARD is dp_replicate = num_machines. DEEPSPEED reads deepspeed_config (zero_stage, offload devices) or the
JSON named by deepspeed_config_file. Loop hf-trainer, profile hf, TP DTensor's.
LLaMA-Factory (llamafactory/hparams/{model,data,finetuning,training}_args.py): model_name_or_path
= a Hub id (memledger's offline catalog first), cutoff_len = seq (default 2048), finetuning_type
(default lora) / lora_rank (8) / lora_alpha (None = 2·rank) / lora_dropout (0) / lora_target
("all" = all-linear) = the fine-tuning flags, quantization_bit 4/8 = qlora over nf4/int8,
gradient checkpointing on unless disable_gradient_checkpointing, the HF TrainingArguments keys,
and `deepspeed:` = that JSON (read beside the YAML).
"""
from __future__ import annotations

from memledger.configs.deepspeed import _implied, read_training_args
from memledger.configs.rules import Imported, Rule, apply, as_bool, as_int, choice, fsdp_cpu_offload
from memledger.configs.source import Source, flatten

CA = "accelerate/commands/config/config_args.py"
LA = "accelerate/commands/launch.py"
DC = "accelerate/utils/dataclasses.py"
LF_M, LF_D, LF_F = ("llamafactory/hparams/model_args.py", "llamafactory/hparams/data_args.py",
                    "llamafactory/hparams/finetuning_args.py")
SHARDING = {"full_shard": 3, "1": 3, "shard_grad_op": 2, "2": 2, "hybrid_shard": 3, "4": 3,
            "hybrid_shard_zero2": 2, "5": 2, "no_shard": 0, "3": 0}

ACC_RULES = (
    Rule(key="num_processes", dest="world", conv=as_int, default=1, source=CA),
    Rule(key="num_machines", dest="_acc_machines", conv=as_int, default=1, source=CA),
    Rule(key="mixed_precision", dest="_acc_mp", default="no", source=CA,
         conv=lambda v: choice(v, {"no": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"})),
    Rule(key="distributed_type", dest="_acc_type", default="NO", source=CA,
         conv=lambda v: choice("NO" if v is False else str(v).upper(), {k: k for k in (
             "NO", "MULTI_GPU", "FSDP", "DEEPSPEED", "MULTI_CPU", "XLA")})),
    Rule(key="fsdp_config.fsdp_sharding_strategy", dest="_acc_shard", default="FULL_SHARD",
         source=DC, conv=lambda v: choice(str(v).lower(), SHARDING)),
    Rule(key="fsdp_config.fsdp_version", dest="_acc_fsdp_v", conv=as_int, default=1, source=DC),
    # FSDP 1 spells the sharding strategy here too (accelerate >= 1.6), FSDP 2 a bool
    Rule(key="fsdp_config.fsdp_reshard_after_forward", dest="_acc_reshard", default=True,
         source=DC, conv=lambda v: SHARDING[str(v).lower()] if str(v).lower() in SHARDING
         else as_bool(v)),
    Rule(key="fsdp_config.fsdp_activation_checkpointing", dest="recompute", default=False,
         source=DC, conv=lambda v: "full" if as_bool(v) else "none"),
    Rule(key="parallelism_config.parallelism_config_tp_size", dest="tp", conv=as_int, default=1,
         source=LA),
    Rule(key="parallelism_config.parallelism_config_cp_size", dest="cp", conv=as_int, default=1,
         source=LA),
    Rule(key="parallelism_config.parallelism_config_dp_shard_size", dest="_acc_dp_shard",
         conv=as_int, source=LA),
    Rule(key="parallelism_config.parallelism_config_dp_replicate_size", dest="_acc_dp_rep",
         conv=as_int, default=1, source=LA),
    Rule(key="deepspeed_config.zero_stage", dest="_acc_ds_stage", conv=lambda v: as_int(v, 0),
         source=DC, default=2),  # DeepSpeedPlugin: None -> ACCELERATE_DEEPSPEED_ZERO_STAGE or 2
    Rule(key="deepspeed_config.offload_optimizer_device", dest="optimizer_offload", source=CA,
         conv=lambda v: choice(v, {"none": False, "cpu": True, "nvme": True})),
    Rule(key="deepspeed_config.offload_param_device", dest="param_offload", source=CA,
         conv=lambda v: choice(v, {"none": False, "cpu": True, "nvme": True})),
    # FSDP1 CPUOffload(offload_params=True) / FSDP2 CPUOffloadPolicy: parameters, gradients and
    # the optimizer step on the CPU (accelerate utils/dataclasses.py FullyShardedDataParallelPlugin)
    Rule(key="fsdp_config.fsdp_offload_params", dest="", default=False, source=DC,
         conv=fsdp_cpu_offload),
    Rule(key="deepspeed_config.gradient_accumulation_steps", dest="micro_batches", conv=as_int,
         source=CA),
)
ACC_UNMODELLED = {
    "fsdp_config.fsdp_cpu_ram_efficient_loading": "loading only", "fp8_config.": "FP8 training",
    "parallelism_config.parallelism_config_sp_size": "sequence parallelism outside TP",
}
ACC_IGNORED = {k: "no effect on per-GPU memory (launch or I/O)" for k in (
    "compute_environment", "debug", "machine_rank", "main_training_function",
    "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "use_cpu",
    "downcast_bf16", "enable_cpu_affinity", "main_process_ip", "main_process_port",
    "fsdp_config.fsdp_auto_wrap_policy", "fsdp_config.fsdp_transformer_layer_cls_to_wrap",
    "fsdp_config.fsdp_state_dict_type", "fsdp_config.fsdp_sync_module_states",
    "fsdp_config.fsdp_use_orig_params", "fsdp_config.fsdp_forward_prefetch",
    "fsdp_config.fsdp_backward_prefetch", "deepspeed_config.deepspeed_config_file",
    "deepspeed_config.deepspeed_multinode_launcher", "deepspeed_config.zero3_init_flag",
    "deepspeed_config.zero3_save_16bit_model", "fsdp_config.fsdp_min_num_params",
    "parallelism_config.parallelism_config_cp_comm_strategy", "dynamo_config.")}


def _hybrid(flat: dict) -> bool:
    """FSDP 1's HYBRID_SHARD(_ZERO2): shard inside a node, one copy per node (torch
    fsdp/_init_utils.py `_init_process_group_state_for_hybrid_shard`: the intra-node group is
    the node's GPUs), so memledger's dp_replicate is num_machines."""
    return any(str(flat.get(k, "")).lower() in ("hybrid_shard", "hybrid_shard_zero2", "4", "5")
               for k in ("fsdp_config.fsdp_sharding_strategy",
                         "fsdp_config.fsdp_reshard_after_forward"))


def read_accelerate(src: Source, data: dict, fmt: str = "accelerate") -> Imported:
    flat = flatten(data)
    imp = Imported(format=fmt, files=(src.name,))
    apply(src, flat, ACC_RULES, unmodelled=ACC_UNMODELLED, ignored=ACC_IGNORED, imp=imp)
    f = imp.flags()
    kind, mp = f["_acc_type"], f["_acc_mp"]
    fsdp = kind == "FSDP"
    if fsdp:
        shard = f["_acc_shard"]
        if type(f["_acc_reshard"]) is int:  # FSDP 1 strategy under its newer key
            shard = f["_acc_reshard"]
        imp.set("zero", shard, src, "fsdp_config.fsdp_sharding_strategy",
                default="fsdp_config.fsdp_sharding_strategy" not in flat)
        imp.set("zero3_impl", "fsdp", src, "distributed_type")
        if f["_acc_fsdp_v"] == 2:  # FSDP2 has no strategy: reshard_after_forward says it
            imp.set("zero", 3, src, "fsdp_config.fsdp_version")
            imp.set("fsdp_reshard_after_forward", "never" if f["_acc_reshard"] in (False, 2)
                    else "default",
                    src, "fsdp_config.fsdp_reshard_after_forward")
    elif kind == "DEEPSPEED":
        if "deepspeed_config.deepspeed_config_file" not in flat:  # else the JSON says it
            imp.set("zero", f["_acc_ds_stage"], src, "deepspeed_config.zero_stage",
                    default="deepspeed_config.zero_stage" not in flat)
        imp.set("zero3_impl", "deepspeed", src, "distributed_type")
        imp.set("grad_buckets", "deepspeed", src, "distributed_type")
    elif "zero" not in imp.read:
        imp.set("zero", 0, src, "distributed_type", default=True)
    precision = {"fp32": "fp32", "fp8": "amp"}.get(mp) or (
        "fsdp2-mixed" if fsdp else "mixed16" if kind == "DEEPSPEED" and mp == "bf16"
        else "fp16" if kind == "DEEPSPEED" else "amp")
    imp.set("precision", precision, src, "mixed_precision", default="mixed_precision" not in flat)
    if mp == "fp8":
        imp.row("unmodelled", "mixed_precision", src, value="fp8", why="FP8 (TE/torchao) training")
    if "_acc_dp_shard" in f:
        imp.set("dp", f["_acc_dp_shard"] * f["_acc_dp_rep"], src,
                "parallelism_config.parallelism_config_dp_shard_size")
    if fsdp and f["_acc_dp_rep"] > 1 and f.get("_acc_dp_shard", 1) > 1:
        imp.set("dp_replicate", f["_acc_dp_rep"], src,
                "parallelism_config.parallelism_config_dp_replicate_size")
    elif fsdp and _hybrid(flat) and f["_acc_machines"] > 1:
        imp.set("dp_replicate", f["_acc_machines"], src, "fsdp_config.fsdp_sharding_strategy")
    if f.get("tp", 1) > 1:
        imp.set("tp_engine", "dtensor", src, "parallelism_config.parallelism_config_tp_size")
    _implied(imp, src, "deepspeed" if kind == "DEEPSPEED" else "hf-trainer")
    other = "fsdp_config." if kind != "FSDP" else "deepspeed_config."
    imp.rows = [r for r in imp.rows if not (r.kind == "default" and r.key.startswith(other))]
    return imp


LF_TARGETS = {"all": "all-linear"}
LF_RULES = (
    Rule(key="model_name_or_path", dest="hf_id", conv=lambda v: str(v).strip(), source=LF_M),
    Rule(key="cutoff_len", dest="seq", conv=as_int, default=2048, source=LF_D),
    Rule(key="finetuning_type", dest="finetune", default="lora", source=LF_F,
         conv=lambda v: choice(v, {"full": "full", "lora": "lora", "freeze": "freeze"})),
    Rule(key="lora_rank", dest="lora_rank", conv=as_int, default=8, source=LF_F),
    Rule(key="lora_alpha", dest="lora_alpha", conv=as_int, source=LF_F),
    Rule(key="lora_dropout", dest="lora_dropout", conv=float, default=0.0, source=LF_F),
    Rule(key="lora_target", dest="lora_targets", default="all", source=LF_F,
         conv=lambda v: ",".join(LF_TARGETS.get(t.strip(), t.strip()) for t in (
             v if isinstance(v, list) else str(v).split(",")))),
    Rule(key="quantization_bit", dest="", source=LF_M,
         conv=lambda v: {"finetune": "qlora", "base_weights": choice(as_int(v), {4: "nf4",
                                                                                8: "int8"})}),
    Rule(key="freeze_trainable_layers", dest="_lf_trainable_layers", default=2, source=LF_F,
         conv=lambda v: _nonzero(as_int(v, -10**6))),
    Rule(key="disable_gradient_checkpointing", dest="recompute", default=False, source=LF_M,
         conv=lambda v: "none" if as_bool(v) else "full"),
)
LF_UNMODELLED = {"stage": "a reference or reward model beside the trained one (dpo, kto, ppo, rm)",
                 "enable_liger_kernel": "Liger's fused kernels (chunked loss)",
                 "freeze_trainable_modules": "freeze tuning of named modules only (memledger: "
                                             "whole layers)",
                 "freeze_extra_modules": "extra trainable modules under freeze tuning",
                 "use_unsloth": "Unsloth's kernels and offloaded checkpoints",
                 "pure_bf16": "pure bf16 training", "use_dora": "DoRA's magnitude vectors"}
LF_IGNORED = {k: "no effect on per-GPU memory (data, template or I/O)" for k in (
    "do_train", "dataset", "template", "overwrite_cache", "preprocessing_num_workers",
    "dataloader_num_workers", "trust_remote_code", "flash_attn", "max_samples", "val_size",
    "eval_steps", "resume_from_checkpoint", "ddp_timeout", "packing", "neat_packing")}


def _nonzero(n: int) -> int:
    if n == 0:
        raise ValueError("expected a non-zero number of layers (last n if > 0, first n if < 0)")
    return n


def lf_freeze(n_layers: int, trainable: int) -> str:
    """LLaMA-Factory freeze tuning as memledger's --freeze: everything but the last (n > 0) or
    first (n < 0) |n| layers; the final norm, which it also freezes, memledger cannot name."""
    k = min(abs(trainable), n_layers)
    frozen = (0, n_layers - k - 1) if trainable > 0 else (k, n_layers - 1)
    parts = ["embeddings", "head"]
    if frozen[0] <= frozen[1]:
        parts.append(f"layers:{frozen[0]}-{frozen[1]}")
    return ",".join(parts)


def read_llamafactory(src: Source, data: dict, fmt: str = "llamafactory", load=None) -> list:
    """The LLaMA-Factory import, and (via `load`) the DeepSpeed JSON its `deepspeed:` names."""
    lf = {k: v for k, v in data.items() if k in {r.key for r in LF_RULES} or k in LF_UNMODELLED
          or k in LF_IGNORED}
    imp = Imported(format=fmt, files=(src.name,))
    if lf.get("stage") in ("pt", "sft"):  # one model: nothing left out
        imp.row("read", "stage", src, value=lf.pop("stage"), source=LF_F)
    apply(src, lf, LF_RULES, unmodelled=LF_UNMODELLED, ignored=LF_IGNORED, imp=imp)
    f = imp.flags()
    if "lora_alpha" not in imp.read:  # finetuning_args.py: lora_alpha or lora_rank * 2
        imp.set("lora_alpha", f["lora_rank"] * 2, src, "lora_alpha", default=True)
    ta = read_training_args(src, {k: v for k, v in data.items() if k not in lf}, fmt)
    out = [ta, imp]
    ds = data.get("deepspeed")
    if isinstance(ds, str) and load is not None:
        out.insert(1, load(src, ds))
    return out
