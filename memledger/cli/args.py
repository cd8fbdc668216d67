"""Shared command-line flags → specs. Every sub-command that takes a configuration uses these,
so `ledger`, `advise` and `plan` accept the same names."""
from __future__ import annotations

import argparse
from dataclasses import replace

from memledger.errors import SpecError
from memledger.ledger.pipeline.schedules import balanced_layout
from memledger.presets import GPUS, MODELS, gpu, model
from memledger.presets.defaults import DEFAULTS as D
from memledger.presets.policies import POLICY_PRESETS, apply_policy
from memledger.specs import ParallelSpec, TrainSpec
from memledger.specs.finetune import BASE_WEIGHTS, LORA_DTYPES, MODES, FinetuneSpec
from memledger.specs.loop import add_loop_args, default_profile, loop_kwargs
from memledger.specs.train import dropout_pct
from memledger.specs.parallel import SCHEDULES
from memledger.specs.policy import parse_rules
from memledger.specs.runtime import (A2A_SIZING, ENGINES, GRAD_BUCKETS, MUON_GATHER,
                                     NCCL_LL128_DEFAULT_BYTES, NCCL_LL_DEFAULT_BYTES, TP_ENGINES,
                                     RESHARD_AFTER_FORWARD, TORCHTITAN_VERSIONS, W_HOLDS,
                                     COMPILE_LOSS, FLOAT8_RECIPES,
                                     ZERO1_PARTITIONS,
                                     ZERO3_IMPLS, RuntimeSpec)
from memledger.specs.train import ATTENTION_IMPLS, OPTIMIZERS, RECIPES, RECOMPUTE
from memledger.units import GIB


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line and exits 2 (no usage dump)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_model_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", choices=sorted(MODELS), metavar="PRESET",
                     help=f"model preset: {', '.join(MODELS)}")
    src.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json")
    src.add_argument("--hf-id", metavar="ORG/NAME",
                     help="a Hugging Face Hub model id (e.g. meta-llama/Llama-3.1-8B): memledger's "
                          "shipped catalog, the local Hugging Face cache, then the Hub")
    src.add_argument("--model-spec", metavar="spec:…",
                     help="a memledger model code (the app's share links and `memledger config` "
                          "print it)")
    add_config_file_args(p)


def add_config_file_args(p: argparse.ArgumentParser) -> None:
    from memledger.configs import FORMATS
    g = p.add_argument_group("framework configuration files (docs/configs.md)")
    g.add_argument("--config", action="append", default=[], metavar="FILE",
                   help="a Megatron-LM launch script / YAML, torchtitan TOML or dumped JSON, "
                        "DeepSpeed JSON, TrainingArguments, accelerate or LLaMA-Factory YAML "
                        "(repeatable); flags given explicitly override it")
    g.add_argument("--config-format", choices=FORMATS, default=None,
                   help="force the format (default: detected from the content)")


def add_parallel_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("parallelism")
    for name, helptext in (("tp", "tensor parallel"), ("pp", "pipeline parallel"),
                           ("vpp", "virtual stages per rank (interleaved)"),
                           ("ep", "expert parallel"), ("etp", "expert tensor parallel"),
                           ("cp", "context parallel")):
        g.add_argument(f"--{name}", type=int, default=D[name], help=f"{helptext} (default: "
                       f"{D[name]})" + ("; 1 under a named --loop but megatron"
                                        if name in ("tp", "pp") else ""))
    g.add_argument("--dp", type=int, default=None,
                   help="data parallel (default: from --world; with --dp, world = tp·pp·cp·dp)")
    g.add_argument("--world", type=int, default=None,
                   help=f"world size; dp = world/(tp·pp·cp) (default: {D['world']} unless --dp)")
    g.add_argument("--zero", type=int, default=D["zero"], choices=(0, 1, 2, 3),
                   help=f"ZeRO stage (default: {D['zero']})")
    g.add_argument("--dp-replicate", type=int, default=1, metavar="R",
                   help="HSDP: copies of the ZeRO / FSDP shard group, which is dp·cp/R ranks "
                        "(torchtitan data_parallel_replicate_degree, Megatron "
                        "--num-distributed-optimizer-instances; default: 1, shard over all dp)")
    g.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None,
                   help="sequence parallel (default: on when tp > 1)")
    g.add_argument("--schedule", choices=sorted(SCHEDULES), default=None,
                   help="pipeline schedule (default: interleaved when vpp > 1, else 1f1b)")
    g.add_argument("--layout", default=D["layout"],
                   help="layers per pipeline stage, comma separated, 'balanced' (first and last "
                        "stage lighter) or 'even' (default: %(default)s)")


def add_train_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--micro-batch", type=int, default=D["micro_batch"], help="(default: %(default)s)")
    g.add_argument("--seq", type=int, default=D["seq"], help="(default: %(default)s)")
    g.add_argument("--micro-batches", type=int, default=D["micro_batches"],
                   help="per step (gradient accumulation; default: %(default)s; 1 without PP "
                        "under a named --loop but megatron)")
    g.add_argument("--precision", choices=sorted(RECIPES), default=D["precision"],
                   help="(default: %(default)s)")
    g.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default=D["optimizer"],
                   help="(default: %(default)s)")
    g.add_argument("--profile", default="auto",
                   help="megatron, paper, hf or traced:PATH; auto (default): the model code the "
                        f"--loop trains (hf under torchtitan, pytorch, hf-trainer, deepspeed), "
                        f"{D['profile']} under --loop auto")
    g.add_argument("--attention", choices=ATTENTION_IMPLS, default=D["attention"],
                   help="(default: %(default)s)")
    g.add_argument("--recompute", choices=RECOMPUTE, default=D["recompute"],
                   help="(default: %(default)s)")
    g.add_argument("--recompute-every", type=int, default=0,
                   help="k for every-k (0 = ceil(sqrt L)) and for interval (torchtitan: every "
                        "k-th block fully checkpointed; required)")
    g.add_argument("--recompute-budget-pct", type=int, default=50,
                   help="memory-budget: torchtitan memory_budget x 100 (0 = full checkpointing, "
                        "100 = the compiler's default saved set; default: %(default)s)")
    g.add_argument("--hidden-dropout", type=float, default=0.0,
                   help="Megatron's --hidden-dropout probability (Megatron-LM's own default is "
                        "0.1; a --config launch without it takes that): the megatron profile "
                        "keeps its bool masks when > 0 (default: %(default)s)")
    g.add_argument("--gpu", choices=sorted(GPUS), default=D["gpu"],
                   help="GPU preset: capacity and links (default: %(default)s)")
    g.add_argument("--policy", action="append", default=[], metavar="CLASS=POLICY",
                   help="activation storage policy per tensor class (repeatable): keep, recompute, "
                        "fp8, int8, int4, offload-cpu, offload-pp, or e.g. fp8+offload-cpu")
    g.add_argument("--policy-preset", choices=sorted(POLICY_PRESETS), default=None,
                   help="named policy (sets the recompute structure too); --policy rules go on top")
    add_finetune_args(p)
    r = p.add_argument_group("runtime and buffers")
    r.add_argument("--a2a", choices=A2A_SIZING, default="dynamic", help="MoE all-to-all sizing")
    r.add_argument("--capacity-factor", type=float, default=1.0)
    r.add_argument("--cuda-context-gib", type=float, default=0.6)
    r.add_argument("--allocator-slack-pct", type=int, default=5)
    r.add_argument("--grad-buckets", choices=GRAD_BUCKETS, default="megatron")
    r.add_argument("--deepep-max-tokens", type=int, default=0,
                   help="DeepEP low-latency num_max_dispatch_tokens_per_rank (0 = tokens per rank)")
    r.add_argument("--reduce-bucket", type=float, default=5e8, help="DeepSpeed reduce_bucket_size")
    r.add_argument("--allgather-bucket", type=float, default=5e8,
                   help="DeepSpeed allgather_bucket_size")
    r.add_argument("--overlap-comm", action=argparse.BooleanOptionalAction, default=True,
                   help="DeepSpeed overlap_comm (4.5x the buckets)")
    r.add_argument("--zero3-impl", choices=ZERO3_IMPLS, default="fsdp")
    r.add_argument("--zero3-prefetch-layers", type=int, default=1)
    r.add_argument("--zero3-prefetch-bucket", type=float, default=5e7,
                   help="DeepSpeed stage3_prefetch_bucket_size (params)")
    r.add_argument("--zero3-max-live", type=float, default=1e9,
                   help="DeepSpeed stage3_max_live_parameters")
    r.add_argument("--nccl-channels", type=int, default=8)
    r.add_argument("--nccl-all-protocols", action="store_true",
                   help="count NCCL's LL and LL128 buffers too (512 KiB + 4.69 MiB per peer)")
    r.add_argument("--optimizer-offload", action="store_true",
                   help="ZeRO-Offload: optimizer states and step on the CPU")
    r.add_argument("--grad-offload", action="store_true",
                   help="gradient shards on the CPU, two-chunk double buffer on the GPU")
    r.add_argument("--param-offload", action="store_true",
                   help="ZeRO-3 parameter shards on the CPU (DeepSpeed offload_param); with "
                        "--optimizer-offload the gradient shards too (FSDP CPU offload); --zero 3")
    r.add_argument("--grad-offload-chunk", type=float, default=0,
                   help="params per double-buffer chunk (0 = bucket size)")
    r.add_argument("--muon-gather", choices=MUON_GATHER, default="on-demand")
    r.add_argument("--pp-engine", choices=ENGINES, default="auto",
                   help="whose order of the pipeline schedule to follow (auto: the first engine "
                        "that runs the micro-batch count; docs/schedules.md); pytorch also "
                        "counts torch.distributed.pipelining's own buffers")
    r.add_argument("--zb-w-holds", choices=W_HOLDS, default="graph",
                   help="zero-bubble: what stays alive between I and W — graph (PyTorch's "
                        "retain_graph, default) or w-inputs (DeepSeek / zero-bubble runtimes)")
    r.add_argument("--tp-engine", choices=TP_ENGINES, default="megatron",
                   help="megatron: the embedding's gradient vocab-sharded; dtensor (torch "
                        "parallelize_module): full size on every tp rank below ZeRO-2")
    r.add_argument("--zero1-partition", choices=ZERO1_PARTITIONS, default="even",
                   help="ZeRO-1 states: even N/d (Megatron) or greedy-params (torch "
                        "ZeroRedundancyOptimizer: whole tensors; the most loaded dp rank)")
    r.add_argument("--fsdp-reshard-after-forward", choices=RESHARD_AFTER_FORWARD,
                   default="default",
                   help="FSDP2 (ZeRO-3): default reshards after forward unless PP is on "
                        "(torchtitan); never keeps every unsharded unit from forward to backward")
    r.add_argument("--torch-compile", action="store_true",
                   help="torch.compile the model (torchtitan [compile]): the partitioner's saved set")
    r.add_argument("--no-loss-parallel", dest="loss_parallel", action="store_false",
                   help="torchtitan disable_loss_parallel: with tp > 1 the logits are gathered "
                        "to full V on every tp rank")
    r.add_argument("--torchtitan-version", choices=TORCHTITAN_VERSIONS, default="0.3",
                   help="torchtitan era (ledger.torchtitan_eras): 0.3 fuses wq/wk/wv (one wqkv); "
                        "0.2, 2025-06 compile the loss with the model; 2024-12 does not")
    r.add_argument("--compile-loss", choices=COMPILE_LOSS, default="auto",
                   help="torch.compile of the loss (torchtitan compile.components 'loss'): auto = "
                        "the era's rule under --torch-compile")
    r.add_argument("--float8", choices=FLOAT8_RECIPES, default="off",
                   help="torchtitan model.converters float8 (torchao Float8Linear) with this recipe")
    r.add_argument("--float8-fsdp-all-gather", action="store_true",
                   help="float8.enable_fsdp_float8_all_gather: layer weights gathered as float8")
    r.add_argument("--float8-precompute-scale", action="store_true",
                   help="float8.precompute_float8_dynamic_scale_for_fsdp (no memory effect)")
    r.add_argument("--float8-force-recompute-weight", action="store_true",
                   help="float8.force_recompute_fp8_weight_in_bwd")
    r.add_argument("--optimizer-in-backward", action="store_true",
                   help="step each parameter from its post-accumulate-grad hook inside the "
                        "backward and free its gradient there (torchtitan 0.2 "
                        "optimizer.early_step_in_backward, torchtune optimizer_in_bwd); one "
                        "micro-batch, no PP / EP, FSDP2 or a single data-parallel rank")
    r.add_argument("--cuda-graphs", choices=("auto", "on", "off"), default="auto",
                   help="torchtitan 0.3's CUDA-graph step (training.disable_cuda_graphs off): "
                        "gradients zeroed in place, alive all step; auto = where 0.3 runs it "
                        "(no PP, no EP)")
    r.add_argument("--mfu", type=int, default=40, help="model FLOPs utilisation %% for time estimates")
    add_loop_args(p)


def add_finetune_args(p: argparse.ArgumentParser) -> None:
    f = p.add_argument_group("fine-tuning (docs/finetune.md)")
    f.add_argument("--finetune", choices=MODES, default="full",
                   help="which parameters train (default: %(default)s)")
    f.add_argument("--lora-rank", type=int, default=8, help="LoRA rank r (peft default 8)")
    f.add_argument("--lora-alpha", type=int, default=8, help="LoRA alpha (peft default 8)")
    f.add_argument("--lora-targets", default="q_proj,v_proj",
                   help="comma separated: attention, mlp, all-linear, experts, router or module "
                        "names (q_proj, ..., down_proj, linear_qkv, ...) (default: %(default)s)")
    f.add_argument("--lora-dropout", type=float, default=0.0,
                   help="dropout probability on the adapter input, 0 <= p < 1 (default: 0)")
    f.add_argument("--lora-dtype", choices=LORA_DTYPES, default="fp32",
                   help="the adapters' storage dtype (peft upcasts bf16/fp16 adapters to fp32)")
    f.add_argument("--base-weights", choices=BASE_WEIGHTS, default=None,
                   help="frozen base storage: bf16/fp16/fp32, or nf4/int8/fp8 for qlora "
                        "(default: nf4 for qlora, else bf16)")
    f.add_argument("--freeze", default="",
                   help="comma separated modules or layer ranges that do not train, e.g. "
                        "embeddings,head,layers:0-15 (with --finetune freeze)")
    f.add_argument("--train-embeddings", action="store_true",
                   help="lora/qlora: train the embeddings (peft modules_to_save)")
    f.add_argument("--train-head", action="store_true",
                   help="lora/qlora: train the output head (peft modules_to_save)")


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())


def finetune_from_args(args) -> FinetuneSpec:
    mode = getattr(args, "finetune", "full")
    p = getattr(args, "lora_dropout", 0.0)
    if not 0 <= p < 1 or abs(p * 100 - round(p * 100)) > 1e-6:
        raise SpecError("lora_dropout", f"must be a probability 0 <= p < 1 in whole percent "
                                        f"(e.g. 0.05), got {p}")
    base = getattr(args, "base_weights", None) or ("nf4" if mode == "qlora" else "bf16")
    return FinetuneSpec(mode=mode, lora_rank=args.lora_rank, lora_alpha=args.lora_alpha,
                        lora_targets=_names(args.lora_targets), lora_dropout_pct=round(p * 100),
                        lora_dtype=args.lora_dtype, base_weights=base,
                        freeze=_names(args.freeze), train_embeddings=args.train_embeddings,
                        train_head=args.train_head)


def add_config_args(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    add_parallel_args(p)
    add_train_args(p)


def load_model(args):
    if getattr(args, "config_model", None) is not None:
        return args.config_model
    if getattr(args, "model_spec", None):
        from memledger.views.model_codec import decode_model
        return decode_model(args.model_spec)
    if getattr(args, "hf_id", None):
        from memledger.model.hub import hub_model
        return hub_model(args.hf_id)
    if args.hf_config:
        from memledger.model.hf_config import load_hf_config
        return load_hf_config(args.hf_config)
    if not args.model:
        raise SpecError("model", "give one of --model, --hf-config, --hf-id, --model-spec or a "
                                 "--config that names the model")
    return model(args.model)


def _layout(text: str | None, n_layers: int, n_stages: int):
    if text is None or text == "even":
        return None
    if text == "balanced":
        return balanced_layout(n_layers, n_stages)
    if text.startswith("torchtitan:"):  # torchtitan's split: first/last stage_less_layers
        from memledger.configs.torchtitan import torchtitan_layout
        try:
            first, last = (int(x) for x in text[len("torchtitan:"):].split(","))
            return torchtitan_layout(n_layers, n_stages, first, last)
        except ValueError as e:
            raise SpecError("layout", f"torchtitan:FIRST,LAST: {e}") from None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise SpecError("layout", f"expected comma-separated integers, 'balanced' or 'even', got {text!r}") from None


def parallel_from_args(args, m) -> ParallelSpec:
    schedule = args.schedule or ("interleaved" if args.vpp > 1 else "1f1b")
    sp = args.sp if args.sp is not None else args.tp > 1
    etp = 1 if getattr(args, "implied_etp", False) and m.moe is None else args.etp
    kw = dict(tp=args.tp, pp=args.pp, vpp=args.vpp, ep=args.ep, etp=etp, cp=args.cp,
              sp=sp, zero=args.zero, schedule=schedule,
              dp_replicate=getattr(args, "dp_replicate", 1))
    if args.dp is not None and args.world is not None and args.dp * args.tp * args.pp * args.cp != args.world:
        raise SpecError("world", f"world={args.world} != tp·pp·cp·dp = "
                                 f"{args.tp * args.pp * args.cp * args.dp}")
    world = args.world if args.world is not None or args.dp is not None else D["world"]
    probe = ParallelSpec.from_world(world, **kw) if world else ParallelSpec(dp=args.dp or 1, **kw)
    layout = _layout(args.layout, m.n_layers, probe.n_stages)
    return replace(probe, layout=layout) if layout else probe


def train_from_args(args) -> TrainSpec:
    t = TrainSpec(micro_batch=args.micro_batch, seq=args.seq, micro_batches=args.micro_batches,
                  precision=args.precision, optimizer=args.optimizer, profile=args.profile,
                  attention=args.attention, recompute=args.recompute,
                  recompute_every=args.recompute_every,
                  recompute_budget_pct=getattr(args, "recompute_budget_pct", 50),
                  hidden_dropout_pct=dropout_pct(getattr(args, "hidden_dropout", 0.0)),
                  finetune=finetune_from_args(args))
    preset = getattr(args, "policy_preset", None)
    rules = parse_rules(getattr(args, "policy", None))
    return apply_policy(t, preset, rules) if preset or rules else t


def _count(field: str, value: float) -> int:
    if value != int(value) or value < 0:
        raise SpecError(field, f"must be a whole number >= 0, got {value}")
    return int(value)


def runtime_from_args(args) -> RuntimeSpec:
    if not 0 <= args.cuda_context_gib <= 64:
        raise SpecError("cuda_context_gib", f"must be 0..64, got {args.cuda_context_gib}")
    if not 0 < args.capacity_factor <= 64:
        raise SpecError("capacity_factor", f"must be in (0, 64], got {args.capacity_factor}")
    allp = args.nccl_all_protocols
    return RuntimeSpec(cuda_context_bytes=int(args.cuda_context_gib * GIB),
                       allocator_slack_pct=args.allocator_slack_pct, a2a=args.a2a,
                       capacity_factor_pct=round(args.capacity_factor * 100),
                       grad_buckets=args.grad_buckets, deepep_max_tokens=args.deepep_max_tokens,
                       **loop_kwargs(args),
                       reduce_bucket_params=_count("reduce_bucket", args.reduce_bucket),
                       allgather_bucket_params=_count("allgather_bucket", args.allgather_bucket),
                       overlap_comm=args.overlap_comm, zero3_impl=args.zero3_impl,
                       zero3_prefetch_layers=args.zero3_prefetch_layers,
                       zero3_prefetch_params=_count("zero3_prefetch_bucket", args.zero3_prefetch_bucket),
                       zero3_max_live_params=_count("zero3_max_live", args.zero3_max_live),
                       nccl_channels=args.nccl_channels,
                       nccl_ll_buffer_bytes=NCCL_LL_DEFAULT_BYTES if allp else 0,
                       nccl_ll128_buffer_bytes=NCCL_LL128_DEFAULT_BYTES if allp else 0,
                       optimizer_offload=args.optimizer_offload, grad_offload=args.grad_offload,
                       param_offload=args.param_offload,
                       grad_offload_chunk_params=_count("grad_offload_chunk", args.grad_offload_chunk),
                       muon_gather=args.muon_gather, pp_engine=args.pp_engine,
                       zb_w_holds=args.zb_w_holds, tp_engine=args.tp_engine,
                       zero1_partition=args.zero1_partition,
                       fsdp_reshard_after_forward=args.fsdp_reshard_after_forward,
                       torch_compile=args.torch_compile, loss_parallel=args.loss_parallel,
                       torchtitan_version=args.torchtitan_version,
                       compile_loss=args.compile_loss, float8=args.float8,
                       float8_fsdp_all_gather=args.float8_fsdp_all_gather,
                       float8_precompute_scale=args.float8_precompute_scale,
                       float8_force_recompute_weight=args.float8_force_recompute_weight,
                       optimizer_in_backward=args.optimizer_in_backward,
                       cuda_graphs=args.cuda_graphs)


def resolve_profile(args) -> None:
    """--profile auto → the profile of the model code --loop trains (specs.loop.LOOP_PROFILES)."""
    if args.profile == "auto":
        args.profile = default_profile(args.loop, D["profile"])


def specs_from_args(args):
    """(model, parallel, train, runtime, hardware) from parsed flags; raises SpecError."""
    m = load_model(args)
    resolve_profile(args)
    if args.profile.startswith("traced:"):
        from memledger.trace.profile import register_traced  # lands with the tracing work
        args.profile = register_traced(args.profile[len("traced:"):])
    return (m, parallel_from_args(args, m), train_from_args(args), runtime_from_args(args),
            gpu(args.gpu) if args.gpu else None)
