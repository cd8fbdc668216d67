"""The app's side of framework configurations (no Streamlit): a pasted or uploaded file →
a dashboard `Config` plus the read / default / ignored / not-modelled table, and the current
`Config` → Megatron flags, a torchtitan TOML or a DeepSpeed JSON for the Share popover.

Settings the sidebar has no widget for (DeepSpeed buckets, ZeRO-3 implementation, gradient
offload, DeepSpeed's parameter offload without the optimizer's, fine-tuning) are listed as
"CLI only" with the flag that carries them; the share link carries the configuration, never
the file.
"""
from __future__ import annotations

from dataclasses import replace

from memledger.configs import read_text
from memledger.configs.export import WRITERS
from memledger.configs.resolve import data_parallel, micro_batches, replicas
from memledger.specs.runtime import RuntimeSpec
from memledger.views.model_codec import encode_model
from memledger.views.state import Config, load_model, offload_flags, offload_setting, to_specs

# memledger flag dest -> dashboard key
APP_KEYS = {"tp": "tp", "pp": "pp", "vpp": "vpp", "ep": "ep", "etp": "etp", "cp": "cp",
            "zero": "zero", "sp": "sp", "schedule": "schedule", "layout": "layout",
            "micro_batch": "mb", "micro_batches": "m", "seq": "seq", "precision": "precision",
            "optimizer": "optimizer", "profile": "profile", "recompute": "recompute",
            "loop": "loop", "recompute_every": "recompute_every",
            "recompute_budget_pct": "budget", "fsdp_reshard_after_forward": "reshard",
            "torch_compile": "compile", "loss_parallel": "loss_parallel", "hidden_dropout": "dropout",
            "dp_replicate": "dp_replicate", "optimizer_in_backward": "inbwd",
            "cuda_graphs": "graphs"}
MAX_BYTES = 1_000_000
COPY_AS = {"Megatron flags": "megatron", "torchtitan config": "torchtitan",
           "DeepSpeed JSON": "deepspeed"}


def _model_key(imp, flags: dict, cfg: Config) -> str:
    if imp.model is not None:
        return encode_model(imp.model)
    if "model" in flags:
        return flags["model"]
    if "hf_id" in flags:
        from memledger.model.hub import hub_model
        return encode_model(hub_model(flags["hf_id"]))
    return cfg.model


def import_config(cfg: Config, data: bytes, name: str = "pasted") -> tuple[Config, list[dict]]:
    """`cfg` with what the file says; raises ValueError (ConfigError, SpecError) naming the
    file, line and key. Rows: kind, key, value, sets, source, why."""
    if len(data) > MAX_BYTES:
        raise ValueError(f"{name}: {len(data):,} bytes; configuration files over "
                         f"{MAX_BYTES:,} bytes are refused")
    imp = read_text(data.decode("utf-8", errors="replace"), name)
    flags = imp.flags()
    new = {APP_KEYS[d]: v for d, v in flags.items() if d in APP_KEYS}
    new.setdefault("dp_replicate", 1)  # a file that names no replicas runs without HSDP
    new["offload"] = offload_setting(flags)  # a file that offloads nothing clears it
    if "dropout" in new:  # the file's probability as the dashboard's whole percentage
        from memledger.specs.train import dropout_pct
        new["dropout"] = dropout_pct(new["dropout"])
    new["model"] = _model_key(imp, flags, cfg)
    m = load_model(new["model"])
    tp, pp, cp = new.get("tp", cfg.tp), new.get("pp", cfg.pp), new.get("cp", cfg.cp)
    world = flags.get("world") or (flags["dp"] * tp * pp * cp if "dp" in flags else cfg.world)
    dp = data_parallel(imp, tp=tp, pp=pp, cp=cp, dp=None, world=world)
    r = replicas(imp, {**flags, "zero": new.get("zero", cfg.zero)}, dp=dp)
    if r is not None:  # DeepSpeed MiCS: HSDP once dp is known
        new["dp_replicate"] = r
    mb = micro_batches(imp, flags, dp=dp, micro_batch=new.get("mb", cfg.mb))
    if mb is not None:
        new["m"] = mb
    new["world"] = world
    if str(new.get("layout", "")).startswith("torchtitan:"):
        from memledger.configs.torchtitan import torchtitan_layout
        first, last = (int(x) for x in new["layout"].split(":", 1)[1].split(","))
        stages = pp * (2 if new.get("schedule", cfg.schedule) in ("zb-v", "dualpipev") else
                       new.get("vpp", cfg.vpp))
        new["layout"] = ",".join(map(str, torchtitan_layout(m.n_layers, stages, first, last)))
    out = replace(cfg, **new)
    to_specs(out, m)  # the core's checks (heads, experts, layout) before anything changes
    rows = [{"kind": r.kind, "key": r.key, "value": str(r.value)[:80],
             "sets": ", ".join(f"{k}={v}" for k, v in r.flags if not k.startswith("_")),
             "source": r.source, "why": r.why} for r in imp.rows]
    said = tuple(offload_flags("none")) if new["offload"] != "none" else ()
    cli_only = sorted(d for d in flags if not d.startswith("_") and d not in APP_KEYS
                      and d not in ("model", "hf_id", "world", "dp") + said)
    rows += [{"kind": "CLI only", "key": d, "value": str(flags[d]), "sets": "",
              "source": "", "why": f"no sidebar widget: memledger --{d.replace('_', '-')}"}
             for d in cli_only]
    return out, rows


def copy_as(cfg: Config, target: str) -> str:
    """The configuration in a framework's form; ValueError names what it cannot express."""
    m = load_model(cfg.model)
    par, train = to_specs(cfg, m)
    rt = RuntimeSpec()
    a = {"tp": par.tp, "pp": par.pp, "vpp": par.vpp, "ep": par.ep, "etp": par.etp, "cp": par.cp,
         "dp": par.dp, "dp_replicate": par.dp_replicate, "zero": par.zero, "sp": par.sp, "schedule": par.schedule,
         "layout": cfg.layout, "layout_tuple": par.layout, "micro_batch": train.micro_batch,
         "micro_batches": train.micro_batches, "seq": train.seq, "precision": train.precision,
         "optimizer": train.optimizer, "recompute": train.recompute,
         "recompute_every": train.recompute_every,
         "recompute_budget_pct": train.recompute_budget_pct, **offload_flags(cfg.offload),
         "hidden_dropout": train.hidden_dropout_pct / 100,
         "a2a": rt.a2a, "capacity_factor": rt.capacity_factor_pct / 100,
         "model": cfg.model if not cfg.model.startswith("spec:") else None, "hf_id": None,
         "fsdp_reshard_after_forward": cfg.reshard, "loss_parallel": cfg.loss_parallel,
         "torch_compile": cfg.compile, "optimizer_impl": "auto",
         "optimizer_in_backward": cfg.inbwd, "cuda_graphs": cfg.graphs,
         "overlap_comm": rt.overlap_comm, "reduce_bucket": rt.reduce_bucket_params,
         "allgather_bucket": rt.allgather_bucket_params,
         "zero3_prefetch_bucket": rt.zero3_prefetch_params,
         "zero3_max_live": rt.zero3_max_live_params, "zero3_impl": rt.zero3_impl}
    return WRITERS[target](a, m)
