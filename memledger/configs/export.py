"""memledger flags → a framework's own configuration: a Megatron-LM launch line, a torchtitan
0.2 TOML, a DeepSpeed JSON, an accelerate FSDP config. Each writer raises ValueError naming
the setting the framework cannot express (e.g. ZeRO-1 in torchtitan, a pipeline in DeepSpeed's
JSON); what it writes reads back through memledger.configs to the same flags.
Inputs: a mapping of argparse dests (`args`) with resolved dp/world, and the ModelSpec.
Ignores: settings the target framework takes from elsewhere (DeepSpeed's model and sequence
length, accelerate's batch sizes), which stay memledger flags.
"""
from __future__ import annotations

import json
from dataclasses import replace

from memledger.model.titan_flavors import FLAVORS as TT_MODELS
from memledger.model.titan_flavors import flavor_model

TARGETS = ("megatron", "torchtitan", "deepspeed", "accelerate")
MEG_PRECISION = {"megatron": ["--bf16"], "fp16": ["--fp16"], "fp32": [],
                 "fp8": ["--bf16", "--fp8-format", "hybrid", "--fp8-param-gather"]}


def _need(ok: bool, target: str, what: str) -> None:
    if not ok:
        raise ValueError(f"{target} cannot express {what}")


def _fsdp_offload(a: dict, target: str, key: str) -> bool:
    """FSDP's CPU offload (`key`) moves parameters, gradients and the optimizer together: on
    when both offloads are, refused when only the optimizer's is."""
    off = bool(a.get("param_offload"))
    _need(a["optimizer_offload"] == off, target, f"an optimizer offload without the parameters "
                                                 f"({key} moves both)")
    return off


def _model_flags(m) -> list[str]:
    out = ["--num-layers", m.n_layers, "--hidden-size", m.hidden, "--num-attention-heads",
           m.n_heads, "--ffn-hidden-size", m.ffn_hidden, "--vocab-size", m.vocab]
    if m.mla is None:
        out += ["--kv-channels", m.head_dim]
        if m.n_kv_heads != m.n_heads:
            out += ["--group-query-attention", "--num-query-groups", m.n_kv_heads]
    else:
        a = m.mla
        out += ["--multi-latent-attention", "--kv-lora-rank", a.kv_lora_rank, "--qk-head-dim",
                a.qk_nope_dim, "--qk-pos-emb-head-dim", a.qk_rope_dim, "--v-head-dim", a.v_dim]
        out += ["--q-lora-rank", a.q_lora_rank] if a.q_lora_rank else []
    out += ["--swiglu"] if m.mlp == "swiglu" else []
    out += ["--normalization", "RMSNorm"] if m.norm == "rmsnorm" else []
    out += [] if m.linear_bias else ["--disable-bias-linear"]
    out += ["--add-qkv-bias"] if m.qkv_bias else []
    out += ["--qk-layernorm"] if m.qk_norm else []
    out += [] if m.tied_embeddings else ["--untie-embeddings-and-output-weights"]
    if m.pos_embeddings:
        out += ["--position-embedding-type", "learned_absolute", "--max-position-embeddings",
                m.pos_embeddings]
    else:
        out += ["--position-embedding-type", "rope"]
    out += ["--mtp-num-layers", m.n_mtp_layers] if m.n_mtp_layers else []
    if m.moe is not None:
        e = m.moe
        _need(e.n_shared <= 1 and not e.shared_gate and e.router == "auto" and e.norm_topk,
              "megatron", "this model's router or shared experts")
        pattern = [int(m.is_moe_layer(i)) for i in range(m.n_layers)]
        out += ["--num-experts", e.n_experts, "--moe-router-topk", e.top_k, "--moe-ffn-hidden-size",
                e.expert_ffn, "--moe-layer-freq", json.dumps(pattern).replace(" ", "")]
        out += ["--moe-shared-expert-intermediate-size", e.shared_ffn_size] if e.n_shared else []
        out += ["--moe-router-enable-expert-bias"] if e.router_bias else []
        out += ["--moe-router-dtype", "fp32"] if e.router_fp32 else []
    return [str(x) for x in out]


def to_megatron(a: dict, m) -> str:
    _need(not a.get("optimizer_in_backward"), "megatron", "the optimizer step in backward")
    _need(a["precision"] in MEG_PRECISION, "megatron", f"precision {a['precision']}")
    _need(a["schedule"] in ("1f1b", "interleaved"), "megatron", f"schedule {a['schedule']}")
    _need(a["optimizer"] in ("adamw", "sgd-momentum"), "megatron", f"optimizer {a['optimizer']}")
    _need(a["recompute"] in ("none", "full", "selective"), "megatron", f"recompute {a['recompute']}")
    world = a["tp"] * a["pp"] * a["cp"] * a["dp"]
    node = 8 if world % 8 == 0 else world
    out = ["torchrun", "--nproc_per_node", str(node), "--nnodes", str(world // node),
           "pretrain_gpt.py"] + _model_flags(m)
    out += ["--tensor-model-parallel-size", a["tp"], "--pipeline-model-parallel-size", a["pp"],
            "--context-parallel-size", a["cp"], "--expert-model-parallel-size", a["ep"],
            "--expert-tensor-parallel-size", a["etp"]]
    out += ["--num-virtual-stages-per-pipeline-rank", a["vpp"]] if a["vpp"] > 1 else []
    out += ["--sequence-parallel"] if a["sp"] and a["tp"] > 1 else []
    out += {0: [], 1: ["--use-distributed-optimizer"],
            2: ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads"],
            3: ["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                "optim_grads_params"]}[a["zero"]]
    rep = a.get("dp_replicate", 1)
    _need(rep == 1 or a["zero"] == 1, "megatron", f"dp_replicate {rep} outside the distributed "
                                                  "optimizer")
    out += ["--num-distributed-optimizer-instances", rep] if rep > 1 else []
    out += _megatron_layout(a)
    out += ["--micro-batch-size", a["micro_batch"], "--global-batch-size",
            a["micro_batch"] * a["micro_batches"] * a["dp"], "--seq-length", a["seq"]]
    out += MEG_PRECISION[a["precision"]]
    out += ["--optimizer", "adam" if a["optimizer"] == "adamw" else "sgd"]
    _need(not a.get("param_offload"), "megatron", "parameter offload (ZeRO-3 shards on the CPU)")
    out += ["--optimizer-cpu-offload"] if a["optimizer_offload"] else []
    out += {"none": [], "selective": ["--recompute-granularity", "selective"],
            "full": ["--recompute-granularity", "full", "--recompute-method", "uniform",
                     "--recompute-num-layers", "1"]}[a["recompute"]]
    # always spelled: a launch without it trains at Megatron-LM's default 0.1 (arguments.py)
    out += ["--hidden-dropout", a.get("hidden_dropout", 0.0)]
    out += ["--transformer-impl", "local"] if a.get("profile") == "megatron-local" else []
    if a["a2a"] == "capacity":
        out += ["--moe-expert-capacity-factor", a["capacity_factor"]]
    words = [str(x) for x in out]
    lines, cur = [], []
    for w in words:  # one flag and its value per line
        if w.startswith("--") and cur:
            lines.append(" ".join(cur))
            cur = []
        cur.append(_quote(w))
    lines.append(" ".join(cur))
    return "#!/bin/bash\n# written by memledger config --to megatron\n" + " \\\n  ".join(lines) + "\n"


def _quote(w: str) -> str:
    import shlex
    return shlex.quote(w)


def _megatron_layout(a: dict) -> list:
    lay = a.get("layout_tuple")
    if not lay or a["pp"] == 1:
        return []
    _need(a["vpp"] == 1 and len(set(lay[1:-1])) <= 1, "megatron", f"layout {lay}")
    return ["--decoder-first-pipeline-num-layers", lay[0], "--decoder-last-pipeline-num-layers",
            lay[-1]]


def _same_model(a: dict, m, name: str, flavor: str) -> bool:
    kind, value = flavor_model(name, flavor)
    if kind == "spec":  # a flavor spelled by its shape: the same layers, whatever the label
        return replace(value, name=m.name, source=m.source) == m
    return a.get("model" if kind == "preset" else "hf_id") == value


def _tt_model(a: dict, m) -> dict:
    for name, flavor in TT_MODELS:
        if _same_model(a, m, name, flavor):
            return {"name": name, "flavor": flavor.upper() if flavor[0].isdigit() else flavor}
    _need(bool(a.get("hf_id")), "torchtitan", f"model {m.name} (no torchtitan flavor)")
    return {"name": "llama3", "flavor": "custom",
            "hf_assets_path": f"./assets/hf/{a['hf_id'].split('/', 1)[1]}"}


def _toml(d: dict, era: str) -> str:
    out = ["# written by memledger config --to torchtitan (torchtitan 0.2 job config)"]
    if era != "0.2":  # the importer reads this spelling as 0.2 (configs/torchtitan_era.py)
        out.append(f"# asked for torchtitan {era}: written in 0.2's spelling, read back as 0.2")
    for section, body in d.items():
        out.append(f"\n[{section}]")
        for k, v in body.items():
            out.append(f"{k} = {json.dumps(v)}")
    return "\n".join(out) + "\n"


TT_SCHED = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B",
            "zb-v": "ZBVZeroBubble", "dualpipev": "DualPipeV"}
TT_AC = {"none": ("none", None), "full": ("full", None), "op": ("selective", "op")}


def to_torchtitan(a: dict, m) -> str:
    _need(a["zero"] in (0, 3), "torchtitan", f"ZeRO-{a['zero']} (FSDP2 is ZeRO-3, DDP ZeRO-0)")
    prec = a["precision"]
    _need(prec in ("fsdp2-mixed", "fsdp2-bf16-reduce", "bf16", "fp32", "amp"), "torchtitan",
          f"precision {prec}")
    _need(not prec.startswith("fsdp2") or a["zero"] == 3, "torchtitan", f"{prec} without FSDP")
    _need(prec != "amp" or a["zero"] == 0, "torchtitan", "autocast under FSDP")
    _need(a["zero"] == 3 or a["cp"] == 1, "torchtitan", "CP without FSDP (torchtitan shards over "
                                                        "cp: parallel_dims.py fsdp_enabled)")
    _need(a["schedule"] in TT_SCHED, "torchtitan", f"schedule {a['schedule']}")
    _need(a["vpp"] == (2 if a["schedule"] == "interleaved" else 1), "torchtitan",
          f"vpp {a['vpp']} (2 stages per rank for multi-stage schedules)")
    _need(a["sp"] == (a["tp"] > 1), "torchtitan", "TP without sequence parallelism")
    off = _fsdp_offload(a, "torchtitan", "enable_cpu_offload")
    rec = a["recompute"]
    _need(rec in TT_AC or rec in ("interval", "memory-budget"), "torchtitan", f"recompute {rec}")
    mb, dp = a["micro_batch"], a["dp"]
    local = mb * (a["micro_batches"] if a["pp"] > 1 else 1)
    training = {"local_batch_size": local, "global_batch_size": mb * a["micro_batches"] * dp,
                "seq_len": a["seq"], "dtype": "bfloat16" if prec == "bf16" else "float32",
                "mixed_precision_param": "float32" if prec == "fp32" else "bfloat16"}
    if prec == "fsdp2-bf16-reduce":
        training["mixed_precision_reduce"] = "bfloat16"
    if off:
        training["enable_cpu_offload"] = True
    rep = a.get("dp_replicate", 1) if a["zero"] == 3 else dp  # HSDP; DDP replicates all
    par = {"data_parallel_replicate_degree": rep,
           "data_parallel_shard_degree": dp // rep,
           "fsdp_reshard_after_forward": a["fsdp_reshard_after_forward"],
           "tensor_parallel_degree": a["tp"], "pipeline_parallel_degree": a["pp"],
           "context_parallel_degree": a["cp"], "expert_parallel_degree": a["ep"],
           "expert_tensor_parallel_degree": a["etp"],
           "disable_loss_parallel": not a["loss_parallel"]}
    if a["pp"] > 1:
        lay = str(a.get("layout") or "")
        _need(lay.startswith("torchtitan:"), "torchtitan", f"layout {lay or 'even'}")
        first, last = lay.split(":", 1)[1].split(",")
        par.update(pipeline_parallel_schedule=TT_SCHED[a["schedule"]],
                   pipeline_parallel_microbatch_size=mb,
                   pipeline_parallel_first_stage_less_layers=int(first),
                   pipeline_parallel_last_stage_less_layers=int(last))
    if rec in TT_AC:
        mode, option = TT_AC[rec]
        ac = {"mode": mode, **({"selective_ac_option": option} if option else {})}
    elif rec == "interval":
        ac = {"mode": "selective", "selective_ac_option": str(a["recompute_every"])}
    else:
        ac = {"mode": "memory_budget", "memory_budget": a["recompute_budget_pct"] / 100}
    d = {"model": _tt_model(a, m), "training": training, "parallelism": par,
         "activation_checkpoint": ac,
         "compile": {"enable": bool(a["torch_compile"]), "components": ["model"] + (
             [] if a.get("compile_loss") == "off" else ["loss"])},
         "optimizer": {"name": "AdamW", "implementation":
                       a["optimizer_impl"] if a["optimizer_impl"] != "auto" else "fused"}}
    _need(a["optimizer"] == "adamw", "torchtitan", f"optimizer {a['optimizer']}")
    if a.get("optimizer_in_backward"):  # 0.2 components/optimizer.py (0.3 has none)
        d["optimizer"]["early_step_in_backward"] = True
    if a.get("float8", "off") != "off":  # torchtitan's float8 converter and its options
        d["model"]["converters"] = ["float8"]
        d["float8"] = {"recipe_name": a["float8"],
                       "enable_fsdp_float8_all_gather": bool(a["float8_fsdp_all_gather"]),
                       "precompute_float8_dynamic_scale_for_fsdp": bool(a["float8_precompute_scale"]),
                       "force_recompute_fp8_weight_in_bwd": bool(a["float8_force_recompute_weight"])}
    return _toml(d, a.get("torchtitan_version", "0.2"))


def to_deepspeed(a: dict, m=None) -> str:
    _need(not a.get("optimizer_in_backward"), "deepspeed", "the optimizer step in backward")
    _need(a["pp"] == 1 and a["cp"] == 1, "deepspeed", "pipeline or context parallelism in its JSON")
    rep = a.get("dp_replicate", 1)
    _need(rep == 1 or a["zero"] == 3, "deepspeed", f"dp_replicate {rep} below ZeRO-3 (MiCS)")
    prec = a["precision"]
    _need(prec in ("mixed16", "fp16", "fp32"), "deepspeed", f"precision {prec}")
    zero = {"stage": a["zero"], "overlap_comm": bool(a["overlap_comm"]),
            "reduce_bucket_size": int(a["reduce_bucket"]),
            "allgather_bucket_size": int(a["allgather_bucket"]),
            "stage3_prefetch_bucket_size": int(a["zero3_prefetch_bucket"]),
            "stage3_max_live_parameters": int(a["zero3_max_live"])}
    if a["optimizer_offload"]:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if a.get("param_offload"):
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if rep > 1:  # MiCS: ZeRO-3 inside groups of dp / rep ranks
        zero["mics_shard_size"] = a["dp"] // rep
    d = {"train_micro_batch_size_per_gpu": a["micro_batch"],
         "gradient_accumulation_steps": a["micro_batches"],
         "train_batch_size": a["micro_batch"] * a["micro_batches"] * a["dp"],
         "zero_optimization": zero, "bf16": {"enabled": prec == "mixed16"},
         "fp16": {"enabled": prec == "fp16"}}
    if a["tp"] > 1:
        d["tensor_parallel"] = {"autotp_size": a["tp"]}
    return json.dumps(d, indent=2) + "\n"


def to_accelerate(a: dict, m=None) -> str:
    _need(not a.get("optimizer_in_backward"), "accelerate", "the optimizer step in backward")
    _need(a["pp"] == 1, "accelerate", "pipeline parallelism")
    fsdp = a["zero"] in (2, 3) and a["zero3_impl"] == "fsdp"
    _need(fsdp or a["zero"] == 0, "accelerate", f"ZeRO-{a['zero']} outside FSDP")
    off = _fsdp_offload(a, "accelerate", "fsdp_offload_params")
    prec = a["precision"]
    want = "fsdp2-mixed" if fsdp else "amp"
    _need(prec in (want, "fp32"), "accelerate", f"precision {prec} here (bf16 is {want})")
    world = a["tp"] * a["cp"] * a["dp"]
    lines = ["# written by memledger (config, to accelerate)", "compute_environment: LOCAL_MACHINE",
             f"distributed_type: {'FSDP' if fsdp else 'MULTI_GPU' if world > 1 else repr('NO')}",
             f"mixed_precision: {'no' if prec == 'fp32' else 'bf16'}", f"num_processes: {world}",
             "num_machines: 1"]
    if fsdp:
        _need(a["zero"] == 3, "accelerate", "ZeRO-2 under FSDP 2 (reshard never is ZeRO-3 here)")
        lines += ["fsdp_config:", "  fsdp_version: 2",
                  f"  fsdp_reshard_after_forward: "
                  f"{'false' if a['fsdp_reshard_after_forward'] == 'never' else 'true'}",
                  f"  fsdp_activation_checkpointing: {'true' if a['recompute'] == 'full' else 'false'}"]
        lines += ["  fsdp_offload_params: true"] if off else []
        _need(a["fsdp_reshard_after_forward"] != "always", "accelerate", "reshard always")
    _need(a["recompute"] in ("none", "full") and (fsdp or a["recompute"] == "none"),
          "accelerate", f"recompute {a['recompute']} here")
    rep = a.get("dp_replicate", 1) if fsdp else 1
    if a["tp"] > 1 or a["cp"] > 1 or rep > 1:
        lines += ["parallelism_config:", f"  parallelism_config_tp_size: {a['tp']}",
                  f"  parallelism_config_cp_size: {a['cp']}",
                  f"  parallelism_config_dp_shard_size: {a['dp'] // rep}",
                  f"  parallelism_config_dp_replicate_size: {rep}"]
    return "\n".join(lines) + "\n"


WRITERS = {"megatron": to_megatron, "torchtitan": to_torchtitan, "deepspeed": to_deepspeed,
           "accelerate": to_accelerate}
