"""Megatron-LM and Megatron-Bridge configurations → memledger flags: the rule table.

Keys are Megatron field names (a flag `--tensor-model-parallel-size` is the field
`tensor_model_parallel_size`, megatron/training/argument_utils.py). Mapping decisions
(docs/configs.md): dp = world / (tp·pp·cp) with world = torchrun's nproc_per_node × nnodes;
micro-batches = global_batch_size / (micro_batch_size · dp) (megatron/training/arguments.py);
--use-distributed-optimizer = ZeRO-1, over dp·cp / --num-distributed-optimizer-instances ranks
(dp_replicate: the optimizer state copied that many times); Megatron-FSDP's data_parallel_sharding_strategy
optim / optim_grads / optim_grads_params = ZeRO 1 / 2 / 3 (zero3 implementation fsdp);
sequence parallelism is forced off at tp = 1 (arguments.py); expert_tensor_parallel_size
defaults to tp; recompute granularity full = every layer (uniform, 1 layer per group).
Loop and profile: megatron (Transformer Engine layers).
"""
from __future__ import annotations

from memledger.configs import megatron_argv as argv
from memledger.configs.megatron_model import ModelFlagError, model_from_flags
from memledger.configs.rules import Imported, Rule, apply, as_bool, as_int, choice
from memledger.configs.source import Source

ARGS = "megatron/training/arguments.py"
MPC = "megatron/core/model_parallel_config.py"
TC = "megatron/core/transformer/transformer_config.py"
OPT = "megatron/core/optimizer/optimizer_config.py"
FSDP_STAGE = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
OPTIMIZER = {"adam": "adamw", "adamw": "adamw", "sgd": "sgd-momentum", "muon": "muon"}

def probability(v) -> float:
    p = float(v)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"a dropout probability in [0, 1), got {v!r}")
    return p


RULES = (
    Rule(key="tensor_model_parallel_size", dest="tp", conv=as_int, default=1, source=MPC),
    Rule(key="pipeline_model_parallel_size", dest="pp", conv=as_int, default=1, source=MPC),
    Rule(key="num_virtual_stages_per_pipeline_rank", dest="vpp", conv=as_int, source=ARGS,
         aliases=("virtual_pipeline_model_parallel_size",)),
    Rule(key="context_parallel_size", dest="cp", conv=as_int, default=1, source=MPC),
    Rule(key="expert_model_parallel_size", dest="ep", conv=as_int, default=1, source=MPC),
    Rule(key="expert_tensor_parallel_size", dest="etp", conv=as_int, source=MPC),
    Rule(key="sequence_parallel", dest="sp", conv=as_bool, default=False, source=MPC),
    Rule(key="use_distributed_optimizer", dest="zero",
         conv=lambda v: 1 if as_bool(v) else 0, default=False, source=ARGS),
    Rule(key="num_distributed_optimizer_instances", dest="dp_replicate", conv=as_int,
         source="megatron/core/distributed/distributed_data_parallel_config.py"),
    Rule(key="micro_batch_size", dest="micro_batch", conv=as_int, source=ARGS),
    Rule(key="global_batch_size", dest="_global_batch", conv=as_int, source=ARGS),
    Rule(key="seq_length", dest="seq", conv=as_int, source=ARGS, aliases=("encoder_seq_length",)),
    Rule(key="fp16", dest="precision", conv=lambda v: "fp16" if as_bool(v) else "fp32",
         default=False, source=ARGS),
    Rule(key="bf16", dest="", conv=lambda v: {"precision": "megatron"} if as_bool(v) else {},
         source=ARGS),
    Rule(key="mixed_precision", dest="", source="megatron/bridge/training/mixed_precision.py",
         conv=lambda v: {"precision": choice(v, {"bf16_mixed": "megatron", "fp16_mixed": "fp16",
                                                 "bf16_with_fp8_mixed": "fp8"})}),
    Rule(key="fp8_param_gather", dest="", source=ARGS,
         conv=lambda v: {"precision": "fp8"} if as_bool(v) else {}),
    Rule(key="optimizer", dest="optimizer", conv=lambda v: choice(v, OPTIMIZER), default="adam",
         source=ARGS),
    Rule(key="optimizer_cpu_offload", dest="optimizer_offload", conv=as_bool, default=False,
         source=OPT),
    Rule(key="recompute_granularity", dest="recompute", source=TC, default=None,
         conv=lambda v: "none" if v is None else choice(v, {"full": "full",
                                                             "selective": "selective"})),
    Rule(key="recompute_activations", dest="", source=ARGS,
         conv=lambda v: {"recompute": "selective"} if as_bool(v) else {}),
    Rule(key="hidden_dropout", dest="hidden_dropout", conv=probability, source=ARGS),
    Rule(key="moe_expert_capacity_factor", dest="", source=TC,
         conv=lambda v: {"a2a": "capacity", "capacity_factor": float(v)}),
)
UNMODELLED = {
    "fp8_format": "FP8 GEMMs: memledger keeps activations in bf16; fp8 weight copies only with "
                  "--fp8-param-gather (precision fp8)",
    "fp8_recipe": "the FP8 recipe's scaling tensors", "fp4": "FP4 training",
    "fine_grained_activation_offloading": "activation offload of named modules",
    "offload_modules": "activation offload of named modules",
    "activation_offload_fraction": "activation offload fraction",
    "cpu_offloading": "Transformer Engine activation/weight CPU offload",
    "optimizer_offload_fraction": "a partial optimizer offload (memledger offloads all or none)",
    "hierarchical_context_parallel_sizes": "hierarchical CP's extra buffers",
    "pipeline_model_parallel_layout": "a free-form layout string (use --layout)",
    "account_for_embedding_in_pipeline_split": "embedding counted as a layer in the split",
    "account_for_loss_in_pipeline_split": "loss counted as a layer in the split",
    "use_precision_aware_optimizer": "optimizer states in reduced precision",
    "exp_avg_dtype": "optimizer state dtype", "exp_avg_sq_dtype": "optimizer state dtype",
    "main_grads_dtype": "main-grad dtype", "main_params_dtype": "main-param dtype",
    "moe_token_dispatcher_type": "DeepEP / flex dispatcher buffers (use --a2a deepep-ll)",
}
IGNORED = {"attention_dropout": "inside the flash / cuDNN attention kernel: no mask kept (the "
                                "megatron profile assumes flash attention)",
           **{k: "no effect on per-GPU memory (schedule, I/O or logging)" for k in (
    "lr", "min_lr", "lr_decay_style", "lr_warmup_iters", "lr_decay_iters", "weight_decay",
    "clip_grad", "adam_beta1", "adam_beta2", "adam_eps", "init_method_std", "train_iters",
    "train_samples", "eval_iters", "eval_interval", "save", "load", "save_interval", "data_path",
    "split", "log_interval", "tensorboard_dir", "seed",
    "overlap_grad_reduce", "overlap_param_gather", "norm_epsilon", "rotary_base",
    "use_flash_attn", "attention_backend", "use_mcore_models", "wandb_project",
    "distributed_backend", "nproc_per_node", "nnodes", "node_rank", "master_addr",
    "master_port", "rdzv_endpoint", "rdzv_backend", "rdzv_id", "tokenizer_type",
    "tokenizer_model", "vocab_file", "merge_file", "data_cache_path", "exit_duration_in_mins",
    "use_megatron_fsdp", "data_parallel_sharding_strategy", "num_layers_per_virtual_pipeline_stage",
    "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
    "log_throughput", "manual_gc", "ckpt_format", "log_params_norm", "log_num_zeros_in_grad",
    "train_iters", "rotary_percent", "make_vocab_size_divisible_by")}}
MODEL_FLAGS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
               "num_query_groups", "group_query_attention", "kv_channels", "swiglu",
               "untie_embeddings_and_output_weights", "num_experts", "moe_router_topk",
               "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_layer_freq",
               "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
               "qk_pos_emb_head_dim", "v_head_dim", "mtp_num_layers", "vocab_size",
               "normalization", "disable_bias_linear", "add_bias_linear", "add_qkv_bias",
               "qk_layernorm", "position_embedding_type", "use_rotary_position_embeddings",
               "max_position_embeddings", "moe_router_enable_expert_bias", "moe_router_dtype")


def flat_flags(src: Source, parsed) -> dict:
    """The launch as field name -> value, from a script (parsed None) or a parsed YAML."""
    if parsed is None:
        return argv.flags_from_tokens(argv.argv_tokens(src))
    return argv.from_yaml_mapping(parsed)


def read(src: Source, parsed=None, fmt: str = "megatron") -> Imported:
    f = flat_flags(src, parsed)
    imp = Imported(format=fmt, files=(src.name,))
    for key, value in argv.unresolved(f).items():
        imp.row("unresolved", key, src, value=value, why="a shell variable the file does not set")
        del f[key]
    skip = frozenset(MODEL_FLAGS) | frozenset(_MEGATRON_FSDP_KEYS) | {"transformer_impl"}
    apply(src, f, RULES, unmodelled=UNMODELLED, ignored=IGNORED, imp=imp, skip=skip)
    _finish(src, f, imp)
    _dropout_default(src, parsed, f, imp)
    try:
        imp.model = model_from_flags(f, name=f"megatron:{src.name.rsplit('/', 1)[-1][:60]}")
    except ModelFlagError as e:
        raise src.error(e.key, str(e)) from None
    except ValueError as e:  # the spec's own checks: the field name is in the message
        raise src.error("num_layers", str(e)) from None
    if imp.model is not None:
        for k in MODEL_FLAGS:
            if k in f:
                imp.row("read", k, src, value=f[k], flags=(("model", "(from the flags)"),),
                        source="megatron/training/arguments.py")
    imp.set("loop", "megatron", src, "", default=True)
    _profile(src, f, imp)
    if "layout" not in imp.read:  # Megatron splits the layers evenly unless told otherwise
        imp.set("layout", "even", src, "", default=True)
    return imp


def _profile(src: Source, f: dict, imp: Imported) -> None:
    """`--transformer-impl` (megatron/training/arguments.py, default transformer_engine):
    local is Megatron-Core's own layer spec, which keeps more (the megatron-local profile)."""
    impl = f.get("transformer_impl")
    if impl is None:
        imp.set("profile", "megatron", src, "", default=True)
        return
    valid = ("transformer_engine", "local", "inference_optimized")
    if impl not in valid:
        raise src.error("transformer_impl", f"unknown value {impl!r}; valid: {', '.join(valid)}")
    profile = "megatron-local" if impl == "local" else "megatron"
    imp.set("profile", profile, src, "transformer_impl")
    imp.row("read", "transformer_impl", src, value=impl, flags=(("profile", profile),),
            source="megatron/training/arguments.py --transformer-impl")


_MEGATRON_FSDP_KEYS = ("recompute_method", "recompute_num_layers", "recompute_modules",
                       "use_megatron_fsdp", "data_parallel_sharding_strategy",
                       "num_layers_per_virtual_pipeline_stage", "decoder_first_pipeline_num_layers",
                       "decoder_last_pipeline_num_layers", "nproc_per_node", "nnodes")


def _int_of(src, f, key, minimum=1):
    try:
        return as_int(f[key], minimum)
    except ValueError as e:
        raise src.error(key, str(e)) from None


def _recompute(src: Source, f: dict, imp: Imported) -> None:
    """uniform recompute of one layer per group = memledger full; selective of core_attn =
    memledger selective (transformer_config.py defaults); anything else is named."""
    for key, plain in (("recompute_method", ("uniform",)), ("recompute_num_layers", ("1", 1)),
                       ("recompute_modules", ("core_attn", ["core_attn"]))):
        if key not in f:
            continue
        if f[key] in plain:
            imp.row("read", key, src, value=f[key], source=TC,
                    why="what memledger's full/selective recompute is")
        else:
            imp.row("unmodelled", key, src, value=f[key], why={
                "recompute_method": "block recompute of the first N layers per stage",
                "recompute_num_layers": "recompute groups of more than one layer",
                "recompute_modules": "selective recompute of modules other than core_attn"}[key])


def _dropout_default(src: Source, parsed, f: dict, imp: Imported) -> None:
    """A Megatron-LM launch without --hidden-dropout trains with arguments.py's 0.1; a Bridge
    ConfigContainer takes its model provider's (the Llama / Qwen / DeepSeek providers set 0.0),
    which the file does not name."""
    if f.get("hidden_dropout") is not None:
        return
    bridge = isinstance(parsed, dict) and "MODEL_ARGS" not in parsed \
        and isinstance(parsed.get("model"), dict)
    if bridge:
        imp.row("default", "hidden_dropout", src, value=0.0, source="the Bridge model provider",
                why="not in the file: the provider's default is taken as 0.0 (Llama, Qwen and "
                    "DeepSeek providers); pass --hidden-dropout for a GPT provider's 0.1")
        return
    imp.set("hidden_dropout", 0.1, src, "hidden_dropout", default=True)
    imp.row("default", "hidden_dropout", src, value=0.1, flags=(("hidden_dropout", 0.1),),
            source=ARGS, why="Megatron-LM's default: bool dropout masks kept per layer")


def _finish(src: Source, f: dict, imp: Imported) -> None:
    """The rules that need several keys at once."""
    _recompute(src, f, imp)
    flags = imp.flags()
    tp, pp = flags.get("tp", 1), flags.get("pp", 1)
    if "etp" not in imp.read:  # Megatron: expert_tensor_parallel_size None -> tp (MoE only)
        imp.set("etp", tp if f.get("num_experts") else 1, src, "expert_tensor_parallel_size",
                default=True)
    if tp == 1 and imp.read.get("sp"):
        imp.set("sp", False, src, "sequence_parallel")  # arguments.py forces it off at tp = 1
    if as_bool(f.get("use_megatron_fsdp", False)):
        strategy = f.get("data_parallel_sharding_strategy", "optim_grads_params")
        try:
            zero = choice(strategy, FSDP_STAGE)
        except ValueError as e:
            raise src.error("data_parallel_sharding_strategy", str(e)) from None
        imp.set("zero", zero, src, "use_megatron_fsdp")
        imp.set("zero3_impl", "fsdp", src, "use_megatron_fsdp")
        imp.row("read", "use_megatron_fsdp", src, value=strategy, source=ARGS,
                flags=(("zero", zero), ("zero3_impl", "fsdp")))
    if "num_layers_per_virtual_pipeline_stage" in f and "num_layers" in f:
        per = _int_of(src, f, "num_layers_per_virtual_pipeline_stage")
        n = _int_of(src, f, "num_layers")
        if n % (per * pp):
            raise src.error("num_layers_per_virtual_pipeline_stage",
                            f"num_layers={n} is not a multiple of {per}·pp={per * pp}")
        imp.set("vpp", n // (per * pp), src, "num_layers_per_virtual_pipeline_stage")
        imp.row("read", "num_layers_per_virtual_pipeline_stage", src, value=per, source=ARGS,
                flags=(("vpp", n // (per * pp)),))
    first, last = (f.get(k) for k in ("decoder_first_pipeline_num_layers",
                                      "decoder_last_pipeline_num_layers"))
    if (first is not None or last is not None) and pp > 1 and "num_layers" in f:
        layout = _uneven(src, f, pp)
        imp.set("layout", layout, src, "decoder_first_pipeline_num_layers")
        imp.row("read", "decoder_first_pipeline_num_layers", src, value=f"{first} / {last}",
                source=ARGS, flags=(("layout", layout),))
    if "nproc_per_node" in f:  # torchrun (torch/distributed/run.py): nnodes defaults to 1
        world = _int_of(src, f, "nproc_per_node") * (_int_of(src, f, "nnodes") if "nnodes" in f
                                                     else 1)
        imp.set("world", world, src, "nproc_per_node")
        imp.row("read", "nproc_per_node", src, value=f"{f['nproc_per_node']} × "
                f"{f.get('nnodes', 1)} nodes", source="torch/distributed/run.py",
                flags=(("world", world),))


def _uneven(src: Source, f: dict, pp: int) -> str:
    n = _int_of(src, f, "num_layers")
    first = _int_of(src, f, "decoder_first_pipeline_num_layers", 0) \
        if "decoder_first_pipeline_num_layers" in f else None
    last = _int_of(src, f, "decoder_last_pipeline_num_layers", 0) \
        if "decoder_last_pipeline_num_layers" in f else None
    middle = pp - (first is not None) - (last is not None)
    rest = n - (first or 0) - (last or 0)
    if middle <= 0 or rest % middle:
        raise src.error("decoder_first_pipeline_num_layers",
                        f"the {rest} remaining layers do not split evenly over {middle} stages")
    stages = [rest // middle] * middle
    if first is not None:
        stages.insert(0, first)
    if last is not None:
        stages.append(last)
    return ",".join(map(str, stages))
