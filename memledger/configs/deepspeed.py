"""DeepSpeed JSON and Hugging Face TrainingArguments → memledger flags: the rule tables.

Mapping decisions (docs/configs.md): zero_optimization.stage N = ZeRO-N, stage 3 with zero3_impl
deepspeed (deepspeed/runtime/zero/config.py), gradient buckets DeepSpeed's;
offload_optimizer.device cpu/nvme = ZeRO-Offload, offload_param.device cpu/nvme = parameter offload
(deepspeed/runtime/zero/offload_config.py);
overlap_comm defaults to true at stage 3 only; bf16.enabled = the mixed16 recipe (bf16 weights and
gradients, fp32 master and AdamW states: deepspeed/runtime/bf16_optimizer.py); fp16 = the fp16
recipe; zero_optimization.mics_shard_size at stage 3 (MiCS) = HSDP with dp_replicate = dp /
mics_shard_size (resolved once dp is known, configs/resolve.py). `"auto"` values are the HF
Trainer's to fill (transformers/integrations/deepspeed.py): batch sizes from TrainingArguments (a
file given beside it, else its defaults), reduce_bucket_size = hidden²,
stage3_prefetch_bucket_size = 0.9·hidden². dp = train_batch_size / (micro · GA) when all three are
numbers. DeepSpeed has no pipeline degree in the JSON (PipelineModule, in code): pp = 1. Loop
deepspeed, profile hf (a transformers model).
"""
from __future__ import annotations

from memledger.configs.rules import Imported, Rule, apply, as_bool, as_int, choice
from memledger.configs.source import Source, flatten

ZC = "deepspeed/runtime/zero/config.py"
OC = "deepspeed/runtime/zero/offload_config.py"
RC = "deepspeed/runtime/constants.py"
TA = "transformers/training_args.py"
DSI = "transformers/integrations/deepspeed.py"
DEVICE = {"none": False, "cpu": True, "nvme": True}
DS_OPT = {"adamw": "adamw", "adam": "adamw", "fusedadam": "adamw", "lion": "lion",
          "onebitadam": "adamw", "sgd": "sgd"}
HF_OPT = {"adamw_torch": "adamw", "adamw_torch_fused": "adamw", "adamw_hf": "adamw",
          "adamw_apex_fused": "adamw", "adamw_bnb_8bit": "adam8bit", "adamw_8bit": "adam8bit",
          "paged_adamw_8bit": "adam8bit", "adafactor": "adafactor", "sgd": "sgd",
          "lion_32bit": "lion", "paged_lion_32bit": "lion", "adamw_torch_4bit": "adam8bit"}


def _bucket(v) -> float:
    return float(as_int(v, 0))


DS_RULES = (
    Rule(key="train_micro_batch_size_per_gpu", dest="micro_batch", conv=as_int, default=1,
         source=RC),
    Rule(key="gradient_accumulation_steps", dest="micro_batches", conv=as_int, default=1,
         source=RC),
    Rule(key="train_batch_size", dest="_train_batch", conv=as_int, source=RC),
    Rule(key="zero_optimization.stage", dest="zero", conv=lambda v: as_int(v, 0), default=0,
         source=ZC),
    Rule(key="zero_optimization.offload_optimizer.device", dest="optimizer_offload",
         conv=lambda v: choice(v, DEVICE), default="none", source=OC),
    Rule(key="zero_optimization.offload_param.device", dest="param_offload",
         conv=lambda v: choice(v, DEVICE), default="none", source=OC),
    Rule(key="zero_optimization.reduce_bucket_size", dest="reduce_bucket", conv=_bucket,
         default=500_000_000, source=ZC),
    Rule(key="zero_optimization.allgather_bucket_size", dest="allgather_bucket", conv=_bucket,
         default=500_000_000, source=ZC),
    Rule(key="zero_optimization.stage3_prefetch_bucket_size", dest="zero3_prefetch_bucket",
         conv=_bucket, default=50_000_000, source=ZC),
    Rule(key="zero_optimization.stage3_max_live_parameters", dest="zero3_max_live", conv=_bucket,
         default=1_000_000_000, source=ZC),
    Rule(key="zero_optimization.overlap_comm", dest="overlap_comm", conv=as_bool, source=ZC),
    Rule(key="fp16.enabled", dest="", conv=lambda v: {"precision": "fp16"} if as_bool(v) else {},
         source=RC),
    Rule(key="bf16.enabled", dest="", conv=lambda v: {"precision": "mixed16"} if as_bool(v)
         else {}, source=RC),
    Rule(key="optimizer.type", dest="optimizer", conv=lambda v: choice(str(v).lower(), DS_OPT),
         source="deepspeed/runtime/config.py"),
    Rule(key="tensor_parallel.autotp_size", dest="tp", conv=as_int, default=1,
         source="deepspeed/runtime/tensor_parallel/config.py"),
    # MiCS (ZeRO-3 only): model states shard inside groups of mics_shard_size ranks, one copy
    # per group (deepspeed/runtime/zero/mics.py MiCS_Init) — HSDP, dp_replicate = dp / size once
    # dp is known (configs/resolve.py replicas)
    Rule(key="zero_optimization.mics_shard_size", dest="_mics_shard", default=-1,
         conv=lambda v: as_int(v, -1),
         source=ZC),
)
DS_UNMODELLED = {
    "zero_optimization.offload_param.": "ZeRO-Infinity NVMe swap buffers (buffer_count, "
                                        "buffer_size, max_in_cpu)",
    "zero_optimization.offload_optimizer.ratio": "a partial optimizer offload",
    "zero_optimization.stage3_param_persistence_threshold": "small parameters kept unsharded",
    "zero_optimization.zero_hpz_partition_size": "ZeRO++ secondary weight partition",
    "zero_optimization.zero_quantized_weights": "ZeRO++ quantised weight all-gather",
    "zero_optimization.zero_quantized_gradients": "ZeRO++ quantised gradients",
    "zero_optimization.sub_group_size": "the optimizer step's fp32 sub-group buffer",
    "activation_checkpointing.partition_activations": "checkpoints partitioned over tp",
    "activation_checkpointing.cpu_checkpointing": "checkpoints offloaded to the CPU",
    "sequence_parallel_size": "Ulysses sequence parallelism",
    "communication_data_type": "the reduction's dtype",
}
DS_IGNORED = {p: "no effect on per-GPU memory (schedule, logging or numerics)" for p in (
    "optimizer.params.", "scheduler.", "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
    "zero_optimization.contiguous_gradients", "zero_optimization.round_robin_gradients",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save", "fp16.loss_scale",
    "fp16.loss_scale_window", "fp16.initial_scale_power", "fp16.hysteresis", "fp16.min_loss_scale",
    "zero_optimization.offload_optimizer.pin_memory", "zero_optimization.offload_optimizer.nvme_path",
    "zero_optimization.offload_param.pin_memory", "zero_optimization.offload_param.nvme_path",
    "zero_allow_untested_optimizer", "flops_profiler.", "tensorboard.", "wandb.", "csv_monitor.",
    "zero_optimization.reduce_scatter", "zero_optimization.stage3_max_reuse_distance",
    "zero_optimization.allgather_partitions", "bf16.immediate_grad_update", "prescale_gradients")}

TA_RULES = (
    Rule(key="per_device_train_batch_size", dest="micro_batch", conv=as_int, default=8, source=TA),
    Rule(key="gradient_accumulation_steps", dest="micro_batches", conv=as_int, default=1, source=TA),
    Rule(key="gradient_checkpointing", dest="recompute",
         conv=lambda v: "full" if as_bool(v) else "none", default=False, source=TA),
    Rule(key="bf16", dest="_ta_bf16", conv=as_bool, default=False, source=TA),
    Rule(key="fp16", dest="_ta_fp16", conv=as_bool, default=False, source=TA),
    Rule(key="optim", dest="optimizer", conv=lambda v: choice(v, HF_OPT),
         default="adamw_torch_fused", source=TA),
    Rule(key="torch_compile", dest="torch_compile", conv=as_bool, default=False, source=TA),
    Rule(key="max_length", dest="seq", conv=as_int, source="trl/trainer/sft_config.py",
         aliases=("max_seq_length",)),
    Rule(key="fsdp", dest="", source=TA, conv=lambda v: _hf_fsdp(v)),
)
TA_UNMODELLED = {"fsdp_config.": "FSDP options beyond the sharding strategy",
                 "optim_target_modules": "GaLore / APOLLO projected states"}
TA_IGNORED = {k: "no effect on per-GPU memory (schedule, I/O or logging)" for k in (
    "output_dir", "learning_rate", "num_train_epochs", "max_steps", "lr_scheduler_type",
    "warmup_ratio", "warmup_steps", "weight_decay", "logging_steps", "save_steps", "save_strategy",
    "eval_strategy", "evaluation_strategy", "report_to", "seed", "per_device_eval_batch_size",
    "dataloader_num_workers", "run_name", "overwrite_output_dir", "max_grad_norm", "adam_beta1",
    "adam_beta2", "adam_epsilon", "logging_dir", "save_total_limit", "ddp_timeout",
    "remove_unused_columns", "plot_loss", "do_train", "deepspeed", "gradient_checkpointing_kwargs")}


def _hf_fsdp(v) -> dict:
    words = (" ".join(v) if isinstance(v, list) else str(v)).split()
    if not words:
        return {}
    stage = {"full_shard": 3, "shard_grad_op": 2, "hybrid_shard": 3, "no_shard": 0}
    hit = [stage[w] for w in words if w in stage]
    if not hit:
        raise ValueError(f"expected full_shard, shard_grad_op, hybrid_shard or no_shard, got {v!r}")
    return {"zero": hit[0], "zero3_impl": "fsdp"}


_TA_DEFAULTS = {"micro_batch": 8, "micro_batches": 1}
_AUTO_FROM_TA = {"train_micro_batch_size_per_gpu": "micro_batch",
                 "gradient_accumulation_steps": "micro_batches"}


def read_deepspeed(src: Source, data: dict, fmt: str = "deepspeed") -> Imported:
    flat = flatten(data)
    imp = Imported(format=fmt, files=(src.name,))
    auto = {k for k, v in flat.items() if v == "auto"}
    for k in auto:
        dest = _AUTO_FROM_TA.get(k)
        why = ("auto: filled by the HF Trainer from TrainingArguments" if dest or k in (
            "bf16.enabled", "fp16.enabled", "train_batch_size") else
            f"auto: filled by the HF Trainer from the model ({DSI})")
        imp.row("read", k, src, value="auto", why=why, source=DSI)
        if dest:  # TrainingArguments' default until a TrainingArguments file says otherwise
            imp.set(dest, _TA_DEFAULTS[dest], src, k, default=True)
    kept = {k: v for k, v in flat.items() if k not in auto}
    rules = tuple(r for r in DS_RULES if r.key not in auto)
    apply(src, kept, rules, unmodelled=DS_UNMODELLED, ignored=DS_IGNORED, imp=imp)
    f = imp.flags()
    stage = f.get("zero", 0)
    if stage not in (0, 1, 2, 3):
        raise src.error("zero_optimization.stage", f"must be 0, 1, 2 or 3, got {stage}")
    if "overlap_comm" not in imp.read:  # DeepSpeedZeroConfig: overlap_comm None -> stage 3
        imp.set("overlap_comm", stage == 3, src, "zero_optimization.overlap_comm", default=True)
    for k, dest in (("zero_optimization.reduce_bucket_size", "_auto_reduce_bucket"),
                    ("zero_optimization.stage3_prefetch_bucket_size", "_auto_prefetch_bucket")):
        if k in auto:
            imp.set(dest, True, src, k)
    if "bf16.enabled" in auto or "fp16.enabled" in auto:
        imp.set("_ds_auto_precision", True, src, "bf16.enabled")
    elif "precision" not in imp.read:
        imp.set("precision", "fp32", src, "bf16.enabled", default=True)
    mb, ga, tbs = (f.get(k) for k in ("micro_batch", "micro_batches", "_train_batch"))
    if tbs and "micro_batch" in imp.read and "micro_batches" in imp.read:
        if tbs % (mb * ga):
            raise src.error("train_batch_size", f"{tbs} is not a multiple of micro {mb} × "
                                                f"accumulation {ga} (= dp × {mb * ga})")
        imp.set("dp", tbs // (mb * ga), src, "train_batch_size")
    elif tbs:
        imp.set("_global_batch", tbs, src, "train_batch_size")
    imp.set("zero3_impl", "deepspeed", src, "zero_optimization.stage")
    imp.set("grad_buckets", "deepspeed", src, "zero_optimization.stage")
    _implied(imp, src, "deepspeed")
    return imp


def _implied(imp: Imported, src: Source, loop: str) -> None:
    """What an HF/DeepSpeed/accelerate run is without saying: no PP, no CP, a transformers model."""
    for dest, value in (("pp", 1), ("vpp", 1), ("cp", 1), ("ep", 1), ("etp", 1), ("sp", False),
                        ("layout", "even"), ("loop", loop), ("profile", "hf"), ("tp", 1)):
        if dest not in imp.read:
            imp.set(dest, value, src, "", default=True)


def read_training_args(src: Source, data: dict, fmt: str = "hf") -> Imported:
    imp = Imported(format=fmt, files=(src.name,))
    flat = flatten(data)
    apply(src, flat, TA_RULES, unmodelled=TA_UNMODELLED, ignored=TA_IGNORED, imp=imp)
    f = imp.flags()
    if "zero" not in imp.read:
        imp.set("zero", 0, src, "fsdp", default=True)  # DDP
    fsdp = imp.read.get("zero3_impl") == "fsdp"
    amp = "fsdp2-mixed" if fsdp else "amp"
    imp.set("precision", amp if f["_ta_bf16"] or f["_ta_fp16"] else "fp32", src, "bf16",
            default=not (f["_ta_bf16"] or f["_ta_fp16"]))
    _implied(imp, src, "hf-trainer")
    return imp
