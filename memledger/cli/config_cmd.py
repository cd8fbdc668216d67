"""`memledger config FILE… [--json]`: what memledger read from framework configuration files —
each key → memledger flag and value, framework defaults used for absent keys (with source),
keys ignored (why), keys that change memory memledger does not model, and the equivalent
memledger flags. `memledger config --to FORMAT <configuration flags>` writes the configuration
in that framework's form (memledger.configs.export)."""
from __future__ import annotations

import json

from memledger.cli.args import add_config_args, load_model, parallel_from_args
from memledger.configs.export import TARGETS, WRITERS
from memledger.presets.defaults import DEFAULTS as D

SHOWN = ("tp", "pp", "vpp", "ep", "etp", "cp", "dp", "world", "dp_replicate", "zero", "sp", "schedule", "layout",
         "micro_batch", "seq", "micro_batches", "precision", "optimizer", "profile", "recompute",
         "recompute_every", "recompute_budget_pct", "hidden_dropout", "a2a", "capacity_factor",
         "reduce_bucket", "allgather_bucket", "overlap_comm", "zero3_impl", "zero3_prefetch_bucket",
         "zero3_max_live", "optimizer_offload", "param_offload", "grad_buckets", "tp_engine",
         "fsdp_reshard_after_forward", "torch_compile", "loss_parallel", "torchtitan_version", "loss",
         "compile_loss", "float8",
         "float8_fsdp_all_gather", "float8_precompute_scale", "float8_force_recompute_weight",
         "loop", "optimizer_impl", "optimizer_in_backward", "cuda_graphs",
         "finetune", "lora_rank", "lora_alpha", "lora_targets", "lora_dropout", "base_weights",
         "freeze")


def add(sub) -> None:
    p = sub.add_parser("config", help="read framework configuration files, or write one (--to)")
    p.add_argument("files", nargs="*", metavar="FILE", help="configuration files to explain")
    p.add_argument("--to", choices=TARGETS, default=None,
                   help="write the configuration (flags and --config files) in this form")
    p.add_argument("--json", action="store_true", help="one JSON object")
    add_config_args(p)
    p.set_defaults(run=run)


def _flag(p, dest: str, value) -> list[str]:
    for a in p._actions:
        if a.dest != dest or not a.option_strings:
            continue
        opt = a.option_strings[0]
        if a.nargs == 0 and a.const is True:  # store_true
            return [opt] if value else []
        if a.nargs == 0 and a.const is False:  # store_false (--no-loss-parallel)
            return [] if value else [opt]
        if type(a).__name__ == "BooleanOptionalAction":
            return [opt if value else "--no-" + opt[2:]]
        return [opt, str(value)]
    return []


def equivalent(args, parser, imp) -> list[str]:
    """The explicit memledger flags that reproduce the configuration the files set."""
    f = imp.flags()
    known = getattr(args, "config_model", None) or args.model or args.hf_id or args.hf_config \
        or args.model_spec
    derived = {"micro_batches"} if {"_global_batch", "_local_batch"} & set(f) else set()
    if f.get("_mics_shard", -1) > 0 and getattr(args, "dp_replicate", 1) > 1:
        derived.add("dp_replicate")  # DeepSpeed MiCS, resolved once dp is known
    if f.get("finetune") == "freeze" and "_lf_trainable_layers" in f:
        derived.add("freeze")
    set_by_files = set(f) | derived | {  # DeepSpeed "auto" buckets, once sized
        d for d, auto in (("reduce_bucket", "_auto_reduce_bucket"),
                          ("zero3_prefetch_bucket", "_auto_prefetch_bucket")) if f.get(auto) and known}
    out: list[str] = []
    if getattr(args, "config_model", None) is not None:
        from memledger.views.model_codec import encode_model
        out += ["--model-spec", encode_model(args.config_model)]
    elif args.hf_id:
        out += ["--hf-id", args.hf_id]
    elif args.model:
        out += ["--model", args.model]
    sub = parser._subparsers._group_actions[0].choices["ledger"]
    for dest in SHOWN:
        if dest not in set_by_files or (dest == "world" and args.dp is not None):
            continue
        value = getattr(args, dest, None)
        if value is not None:
            out += _flag(sub, dest, value)
    return out


def run(args) -> int:
    from memledger.cli import build_parser
    parser = build_parser()
    if args.to:
        m = load_model(args)
        p = parallel_from_args(args, m)
        flat = {**vars(args), "dp": p.dp, "tp": p.tp, "etp": p.etp, "sp": p.sp,
                "schedule": p.schedule, "layout_tuple": p.layout}
        print(WRITERS[args.to](flat, m), end="")
        return 0
    if not args.files:
        raise ValueError("give configuration FILEs to read, or --to FORMAT")
    from memledger.cli.config_flags import apply_configs
    args.config = list(args.files) + list(args.config)
    imp = apply_configs(args, parser, ["config", *args.files])
    flags = equivalent(args, parser, imp)
    notes = []
    if not {"world", "dp"} & set(imp.flags()) and args.world is None and args.dp is None:
        notes.append(f"world size: not in the files; memledger's default {D['world']} is used "
                     f"for dp and the micro-batches (give --world)")
    if not (getattr(args, "config_model", None) or args.model or args.hf_id or args.hf_config
            or args.model_spec):
        notes.append("model: not in the files; give --model, --hf-id or --hf-config")
    rows = [{"kind": r.kind, "file": r.file, "line": r.line, "key": r.key,
             "value": r.value if isinstance(r.value, (int, float, str, bool, type(None)))
             else str(r.value),
             "sets": {k: v for k, v in r.flags if not k.startswith("_")}, "source": r.source,
             "why": r.why} for r in imp.rows]
    if args.json:
        print(json.dumps({"format": imp.format, "files": list(imp.files), "rows": rows,
                          "flags": flags, "notes": notes}))
        return 0
    for kind, title in (("read", "read"), ("default", "framework defaults used (absent keys)"),
                        ("unmodelled", "change memory, NOT modelled by memledger"),
                        ("unresolved", "unresolved shell variables"), ("ignored", "ignored")):
        these = [r for r in rows if r["kind"] == kind]
        if not these:
            continue
        print(f"{title}:")
        for r in these:
            sets = ", ".join(f"{k}={v}" for k, v in r["sets"].items())
            tail = f" → {sets}" if sets else ""
            note = f"  [{r['source']}]" if r["source"] else ""
            why = f"  ({r['why']})" if r["why"] else ""
            print(f"  {r['file']}:{r['line']} {r['key']} = {r['value']!s:.60}{tail}{note}{why}")
    for n in notes:
        print("note:", n)
    print("equivalent flags:", " ".join(flags))
    return 0
