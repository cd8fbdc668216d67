"""torchtitan job configurations → memledger flags: the 0.2-era TOML (`[parallelism]`,
`[training]`, `[activation_checkpoint]`, …) and 0.3's dumped job config (`Trainer.Config.to_dict`
written by `debug.save_config_file`, torchtitan/trainer.py).

Mapping decisions (docs/configs.md; torchtitan/config/job_config.py in 0.2, configs.py in 0.3):
dp = data_parallel_replicate_degree · data_parallel_shard_degree, where a -1 degree is the
ranks left over (world / the others); shard > 1 is FSDP2 = ZeRO-3 with zero3_impl fsdp,
replicate only = DDP (ZeRO-0); FSDP with mixed_precision_param bfloat16 is the `fsdp2-mixed`
recipe (fp32 sharded parameters), without FSDP torchtitan autocasts (`amp`); local_batch_size
is per dp rank: micro_batch = pipeline_parallel_microbatch_size under PP (else the local
batch), micro-batches = global_batch_size / (micro_batch · dp) (global -1 = no accumulation);
activation_checkpoint modes: full → full, selective + "op" → op, selective + "<k>" → interval
with recompute_every k, memory_budget → memory-budget (budget × 100). Multi-stage PP schedules
without layers_per_stage hold 2 stages per rank (torchtitan/distributed/pipeline_parallel.py),
and the layers split as `_generate_llm_fqn_per_model_part` does (embedding and output count as
first/last_stage_less_layers layers). Tensor parallelism is DTensor's (tp_engine dtensor).
The 2024-12 / 2025-06 spellings (`training.*_degree`, `experimental.*parallel*`) are aliases.
HSDP (replicate > 1 beside FSDP) is dp_replicate: FSDP2 shards over dp_shard·cp, each replica
holding the same shards (parallel_dims.py `fsdp` mesh; fully_shard on the (dp_replicate, fsdp)
mesh).
"""
from __future__ import annotations

from memledger.configs.rules import Imported, Rule, apply, as_bool, as_int, choice, fsdp_cpu_offload
from memledger.configs.source import Source, flatten
from memledger.configs.torchtitan_era import era_and_loss
from memledger.configs.torchtitan_options import (OPTION_RULES, compile_flags, converters,
                                                    token_batches)
from memledger.model.titan_flavors import SOURCE as TITAN_FLAVORS
from memledger.model.titan_flavors import flavor_model, flavor_names

JC = "torchtitan/config/job_config.py"
PPY = "torchtitan/distributed/pipeline_parallel.py"
SCHEDULES = {"1f1b": "1f1b", "gpipe": "gpipe", "interleaved1f1b": "interleaved",
             "zbvzerobubble": "zb-v", "dualpipev": "dualpipev"}
MULTI_STAGE = ("interleaved", "zb-v", "dualpipev")
OPT = {"adamw": "adamw", "adam": "adamw"}
IMPL = {"fused": "fused", "foreach": "foreach", "for-loop": "for-loop"}


def degree(v) -> int:
    """A parallel degree: -1 (leftover ranks) or >= 1."""
    if v in (-1, "-1"):
        return -1
    return as_int(v)


RULES = (
    Rule(key="training.seq_len", dest="seq", conv=as_int, default=2048, source=JC,
         aliases=("training.max_context_length",)),
    Rule(key="training.local_batch_size", dest="_local_batch", conv=as_int, default=8, source=JC,
         aliases=("training.batch_size",)),
    Rule(key="training.global_batch_size", dest="_global_batch", conv=degree, default=-1, source=JC),
    Rule(key="parallelism.data_parallel_replicate_degree", dest="_dp_replicate", conv=degree,
         default=1, aliases=("training.data_parallel_replicate_degree",),
         source=JC),
    Rule(key="parallelism.data_parallel_shard_degree", dest="_dp_shard", conv=degree, default=-1,
         aliases=("training.data_parallel_shard_degree",),
         source=JC),
    Rule(key="parallelism.tensor_parallel_degree", dest="tp", conv=as_int, default=1,
         aliases=("training.tensor_parallel_degree",),
         source=JC),
    Rule(key="parallelism.pipeline_parallel_degree", dest="pp", conv=as_int, default=1,
         aliases=("experimental.pipeline_parallel_degree",),
         source=JC),
    Rule(key="parallelism.context_parallel_degree", dest="cp", conv=as_int, default=1,
         aliases=("experimental.context_parallel_degree",),
         source=JC),
    Rule(key="parallelism.expert_parallel_degree", dest="ep", conv=as_int, default=1, source=JC),
    # no default: with EP off torchtitan shards the experts over TP (loop_implied "etp")
    Rule(key="parallelism.expert_tensor_parallel_degree", dest="etp", conv=as_int, source=JC),
    Rule(key="parallelism.pipeline_parallel_schedule", dest="schedule", default="1F1B",
         aliases=("experimental.pipeline_parallel_schedule",),
         source=JC,
         conv=lambda v: choice(str(v).lower(), SCHEDULES)),
    Rule(key="parallelism.pipeline_parallel_microbatch_size", dest="_pp_microbatch", conv=as_int,
         default=1, source=JC),
    Rule(key="parallelism.pipeline_parallel_first_stage_less_layers", dest="_pp_first_less",
         conv=lambda v: as_int(v, 0), default=1, source=JC),
    Rule(key="parallelism.pipeline_parallel_last_stage_less_layers", dest="_pp_last_less",
         conv=lambda v: as_int(v, 0), default=1, source=JC),
    Rule(key="parallelism.fsdp_reshard_after_forward", dest="fsdp_reshard_after_forward",
         default="default", source=JC,
         conv=lambda v: choice(v, {"default": "default", "always": "always", "never": "never"})),
    Rule(key="parallelism.enable_sequence_parallel", dest="_tt_sp", conv=as_bool, default=True,
         source="torchtitan/config/configs.py"),
    Rule(key="parallelism.disable_loss_parallel", dest="loss_parallel",
         conv=lambda v: not as_bool(v), default=False, aliases=("training.disable_loss_parallel",),
         source=JC),
    Rule(key="training.mixed_precision_param", dest="_mp_param", default="bfloat16", source=JC,
         conv=lambda v: choice(v, {"bfloat16": "bf16", "float32": "fp32"})),
    Rule(key="training.mixed_precision_reduce", dest="_mp_reduce", default="float32", source=JC,
         conv=lambda v: choice(v, {"bfloat16": "bf16", "float32": "fp32"})),
    Rule(key="training.dtype", dest="_param_dtype", default="float32", source=JC,
         conv=lambda v: choice(v, {"bfloat16": "bf16", "float32": "fp32"})),
    Rule(key="activation_checkpoint.mode", dest="_ac_mode", default="selective", source=JC,
         conv=lambda v: choice(v, {"selective": "selective", "full": "full", "none": "none",
                                   "memory_budget": "memory_budget"})),
    Rule(key="activation_checkpoint.selective_ac_option", dest="_ac_option", conv=str,
         default="2", source=JC),
    Rule(key="activation_checkpoint.memory_budget", dest="_ac_budget", default=0.5, source=JC,
         conv=lambda v: _pct(v)),
    Rule(key="compile.enable", dest="_compile", conv=as_bool, default=False, source=JC),
    Rule(key="compile.components", dest="_compile_parts", default=["model", "loss"], source=JC,
         conv=lambda v: list(map(str, v))),
    # distributed/fsdp.py: fully_shard(offload_policy=CPUOffloadPolicy()); trainer.py keeps the
    # buffers on the GPU (init_weights(buffer_device=...)) and the optimizer steps on the CPU
    Rule(key="training.enable_cpu_offload", dest="", default=False, source=JC,
         conv=fsdp_cpu_offload),
    Rule(key="optimizer.name", dest="optimizer", conv=lambda v: choice(str(v).lower(), OPT),
         default="AdamW", source=JC),
    Rule(key="optimizer.implementation", dest="optimizer_impl", conv=lambda v: choice(v, IMPL),
         default="fused", source=JC),
    # 0.2 components/optimizer.py OptimizersInBackwardContainer (ledger.step_in_backward)
    Rule(key="optimizer.early_step_in_backward", dest="optimizer_in_backward", conv=as_bool,
         default=False, source=JC),
    # 0.3 trainer.py: the step under a CUDA graph, gradients zeroed in place (ledger.titan_graphs)
    Rule(key="training.disable_cuda_graphs", dest="cuda_graphs",
         conv=lambda v: "off" if as_bool(v) else "auto", default=False, source=JC),
) + OPTION_RULES
UNMODELLED = {
    "float8.": "float8 option (torchao) not modelled: only the recipe, the FSDP float8 "
               "all-gather and the weight recompute are", "quantize.": "float8 / MX linears (torchao)",
    "mx.": "MX linears (torchao)",
    "parallelism.context_parallel_rotate_method": "CP rotate method's buffers",
    "parallelism.enable_async_tensor_parallel": "async TP's symmetric-memory buffers",
    "experimental.enable_async_tensor_parallel": "async TP (2024-12 spelling): not modelled",
    "experimental.pipeline_parallel_microbatches": "2024-12 PP micro-batch count (default pp): "
                                                   "give --micro-batch / --micro-batches",
    "experimental.pipeline_parallel_split_points": "2024-12 stage split (use --layout)",
    "parallelism.module_fqns_per_model_part": "a free-form stage split (use --layout)",
    "parallelism.pipeline_parallel_layers_per_stage": "stages per rank from layers per stage "
                                                      "(memledger: 2 for multi-stage schedules)",
    "activation_checkpoint.early_stop": "early-stopped recompute",
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns": "op-SAC overrides",
}
IGNORED = {p: "no effect on per-GPU memory (I/O, logging or schedule)" for p in (
    "job.", "metrics.", "profiling.", "checkpoint.", "lr_scheduler.", "comm.", "validation.",
    "validator.", "debug.", "dataloader.", "tokenizer.", "fault_tolerance.", "memory_estimation.",
    "experimental.", "loss.", "override.", "dump_folder", "hf_assets_path", "model.",
    "model_spec.", "training.steps", "training.dataset", "training.dataset_path",
    "training.max_norm", "training.seed", "training.deterministic", "training.gc_freq",
    "optimizer.lr", "optimizer.eps", "optimizer.weight_decay", "optimizer.beta1",
    "optimizer.beta2", "parallelism.pipeline_parallel_split_points",
    "optimizer.param_groups", "optimizer.optimizer_factory_kwargs_by_name", "training.gc_debug",
    "parallelism.spmd_backend", "parallelism.enable_fsdp_symm_mem",
    "parallelism.pipeline_parallel_schedule_csv", "parallelism.context_parallel_load_balancer",
    "compile.backend", "compile.enable_async_tensor_parallel")}


def _pct(v) -> int:
    f = float(v)
    if not 0 <= f <= 1:
        raise ValueError(f"expected a fraction 0..1, got {v!r}")
    return round(f * 100)


def _model(data: dict, src: Source, imp: Imported) -> None:
    name = data.get("model.name", data.get("model_spec.name"))
    flavor = data.get("model.flavor", data.get("model_spec.flavor"))
    key = "model.name" if "model.name" in data else "model_spec.name"
    if name is None:
        return
    hit = flavor_model(str(name), str(flavor))
    if hit is None:
        from memledger.model.hub import catalog
        tail = str(data.get("model.hf_assets_path", data.get("hf_assets_path", ""))).rstrip("/")
        tail = tail.rsplit("/", 1)[-1]
        hub = [i for i in catalog() if i.split("/", 1)[1].lower() == tail.lower()] if tail else []
        if not hub:
            raise src.error(key, f"model {name!r} flavor {flavor!r} is not one memledger knows "
                                 f"({flavor_names()}); give --model or --hf-id")
        hit = "hf", hub[0]
    kind, value = hit
    if kind == "spec":  # the flavor's own shape (model.titan_flavors)
        imp.model = value
        imp.row("read", key, src, value=f"{name} {flavor}", source=TITAN_FLAVORS,
                flags=(("model", f"{value.name} (the flavor's shape)"),))
        return
    imp.set("model" if kind == "preset" else "hf_id", value, src, key)
    imp.row("read", key, src, value=f"{name} {flavor}",
            flags=((("model" if kind == "preset" else "hf_id"), value),), source=JC)


def _ac(f: dict, src: Source, imp: Imported) -> None:
    mode, option = f["_ac_mode"], f["_ac_option"]
    if mode == "selective":
        if option == "op":
            imp.set("recompute", "op", src, "activation_checkpoint.selective_ac_option")
        else:
            try:
                k = as_int(option)
            except ValueError as e:
                raise src.error("activation_checkpoint.selective_ac_option",
                                f"{e} or 'op'") from None
            imp.set("recompute", "interval", src, "activation_checkpoint.selective_ac_option")
            imp.set("recompute_every", k, src, "activation_checkpoint.selective_ac_option")
    elif mode == "memory_budget":
        imp.set("recompute", "memory-budget", src, "activation_checkpoint.mode")
        imp.set("recompute_budget_pct", f["_ac_budget"], src, "activation_checkpoint.memory_budget")
    else:
        imp.set("recompute", mode, src, "activation_checkpoint.mode")


def read(src: Source, data: dict, fmt: str = "torchtitan") -> Imported:
    flat = flatten(data)
    if "activation_checkpoint" in data and data["activation_checkpoint"] is None:
        flat["activation_checkpoint.mode"] = "none"  # 0.3 dump: no AC config
    _dumped_ac(data, flat)
    imp = Imported(format=fmt, files=(src.name,))
    apply(src, flat, RULES, unmodelled=UNMODELLED, ignored=IGNORED, imp=imp,
          skip=frozenset({"loss.num_chunks"}))
    _model(flat, src, imp)
    token_batches(imp.flags(), src, imp)
    f = imp.flags()
    _ac(f, src, imp)
    compile_flags(f, src, imp)
    converters(f, src, imp)
    rep, shard = f["_dp_replicate"], f["_dp_shard"]
    # parallel_dims.py fsdp_enabled = dp_shard_enabled or cp_enabled (0.3; 2024-12's
    # parallelize_llama.py: `if dp_shard_enabled or cp_enabled`): CP alone shards too
    fsdp = shard != 1 or f.get("cp", 1) > 1
    imp.set("zero", 3 if fsdp else 0, src, "parallelism.data_parallel_shard_degree")
    imp.set("zero3_impl", "fsdp", src, "parallelism.data_parallel_shard_degree")
    if rep != -1 and shard != -1:
        imp.set("dp", rep * shard, src, "parallelism.data_parallel_shard_degree")
    if rep > 1 and fsdp:  # HSDP: FSDP2 over dp_shard·cp, replicated rep times
        imp.set("dp_replicate", rep, src, "parallelism.data_parallel_replicate_degree")
    precision = ("bf16" if f["_param_dtype"] == "bf16" else
                 "fsdp2-mixed" if fsdp and f["_mp_param"] == "bf16" else
                 "amp" if f["_mp_param"] == "bf16" else "fp32")
    imp.set("precision", precision, src, "training.mixed_precision_param")
    if precision == "fsdp2-mixed" and f["_mp_reduce"] == "bf16":  # FSDP2 reduce_dtype bf16
        imp.set("precision", "fsdp2-bf16-reduce", src, "training.mixed_precision_reduce")
    elif fsdp and precision != "fsdp2-mixed" and f["_mp_reduce"] == "bf16":
        imp.row("unmodelled", "training.mixed_precision_reduce", src, value="bf16",
                why=f"a bf16 reduce-scatter of {precision} gradients (memledger reduces them "
                    "in their own dtype)")
    pp = f.get("pp", 1)
    schedule = f["schedule"] if pp > 1 else "1f1b"
    stages = 1
    if schedule in MULTI_STAGE:
        stages = 2  # without layers_per_stage (pipeline_parallel.py)
    imp.set("schedule", schedule, src, "parallelism.pipeline_parallel_schedule")
    imp.set("vpp", stages if schedule == "interleaved" else 1, src,
            "parallelism.pipeline_parallel_schedule")
    if pp > 1:
        imp.set("micro_batch", f["_pp_microbatch"], src,
                "parallelism.pipeline_parallel_microbatch_size")
        imp.set("layout", f"torchtitan:{f['_pp_first_less']},{f['_pp_last_less']}", src,
                "parallelism.pipeline_parallel_first_stage_less_layers")
    else:
        imp.set("micro_batch", f["_local_batch"], src, "training.local_batch_size")
        imp.set("layout", "even", src, "", default=True)
    imp.set("sp", f.get("tp", 1) > 1 and f["_tt_sp"], src, "parallelism.enable_sequence_parallel")
    for dest, value in (("loop", "torchtitan"), ("tp_engine", "dtensor")):
        imp.set(dest, value, src, "", default=True)
    era_and_loss(data, flat, src, imp)
    return imp


def _dumped_ac(data: dict, flat: dict) -> None:
    """0.3's dump has no `mode`: the AC config's class shows in which fields it carries."""
    ac = data.get("activation_checkpoint")
    if not isinstance(ac, dict) or "mode" in ac:
        return
    if "memory_budget" in ac:
        flat["activation_checkpoint.mode"] = "memory_budget"
    elif any("recompute" in k and "shapes" in k for k in ac):
        flat["activation_checkpoint.mode"] = "selective"
        flat["activation_checkpoint.selective_ac_option"] = "op"
    else:
        flat["activation_checkpoint.mode"] = "full"
    for k in list(flat):
        if k.startswith("activation_checkpoint.") and k.rsplit(".", 1)[1] not in (
                "mode", "selective_ac_option", "memory_budget"):
            del flat[k]


def torchtitan_layout(n_layers: int, n_stages: int, first_less: int, last_less: int) -> tuple:
    """Layers per stage as torchtitan's _generate_llm_fqn_per_model_part splits them."""
    if n_stages == 1:
        return (n_layers,)
    eff = n_layers + first_less + last_less
    per, extra = divmod(eff, n_stages)
    if per == 0 or first_less > per or last_less > per:
        raise ValueError(f"{n_stages} stages over {n_layers} layers (+{first_less}+{last_less}) "
                         f"leave a stage empty ({PPY})")
    out, left = [], n_layers
    for i in range(n_stages):
        n = per + (i < extra) - (first_less if i == 0 else last_less if i == n_stages - 1 else 0)
        n = max(0, min(n, left))
        out.append(n)
        left -= n
    return tuple(out)
