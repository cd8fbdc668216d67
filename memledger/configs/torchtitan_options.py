"""torchtitan's compile and float8 options and its token-counted batches → memledger flags (the
torchtitan importer's part for `training.compile` / `[compile]`, `model.converters` /
`[float8]`, and the `num_tokens_*` batches of torchtitan after 0.3; docs/configs.md).

training.compile (2024-12 / 2025-06) compiles the blocks and the loss as the era does
(--torchtitan-version); compile.enable + components (0.2, 0.3) say both. The float8 converter
applies only when "float8" (later "quantize.linear.float8", its options under
[quantize.linear.float8]) is in model.converters (2024-12: float8.enable_float8_linear); its
FSDP float8 all-gather only with data-parallel sharding, the scale precompute only with that
all-gather (torchtitan's float8 converter, components/quantization/float8.py). Options of a
converter that is not applied are named as having no effect; other converters are named not
modelled, and a quantizer's section with no converter at all as having no effect.
"""
from __future__ import annotations

from dataclasses import replace

from memledger.configs.rules import Imported, Rule, as_bool, as_int, choice
from memledger.configs.source import Source
from memledger.specs.runtime import FLOAT8_RECIPES

JC = "torchtitan/config/job_config.py"
TOKENS = "torchtitan after 0.3 config/configs.py (batches in tokens), trainer.py"
# the converter's later spelling (torchtitan docs/float8.md: model.converters =
# ["quantize.linear.float8"], its options under [quantize.linear.float8])
Q8 = "quantize.linear.float8."
FLOAT8 = ("float8", "quantize.linear.float8")
QUANT_SECTIONS = ("float8.", "quantize.", "mx.")
F8 = ("float8.enable_fsdp_float8_all_gather", "float8.precompute_float8_dynamic_scale_for_fsdp",
      "float8.force_recompute_fp8_weight_in_bwd")

OPTION_RULES = (
    Rule(key="training.compile", dest="_train_compile", conv=as_bool, default=False,
         source="torchtitan 2024-12 / 2025-06 config_manager.py (before [compile])"),
    Rule(key="model.converters", dest="_converters", default=[], source=JC,
         conv=lambda v: _names(v)),
    Rule(key="float8.enable_float8_linear", dest="_f8_linear", conv=as_bool, default=False,
         source="torchtitan 2024-12 config_manager.py (before model.converters)"),
    Rule(key="float8.recipe_name", aliases=(Q8 + "recipe_name",), dest="_f8_recipe",
         default="tensorwise", source=JC,
         conv=lambda v: choice(str(v), {x: x for x in FLOAT8_RECIPES if x != "off"})),
    Rule(key="float8.enable_fsdp_float8_all_gather", dest="_f8_gather", conv=as_bool,
         aliases=(Q8 + "enable_fsdp_float8_all_gather",), default=False, source=JC),
    Rule(key="float8.precompute_float8_dynamic_scale_for_fsdp", dest="_f8_precompute",
         aliases=(Q8 + "precompute_float8_dynamic_scale_for_fsdp",), conv=as_bool, default=False,
         source=JC),
    Rule(key="float8.force_recompute_fp8_weight_in_bwd", dest="_f8_force", conv=as_bool,
         aliases=(Q8 + "force_recompute_fp8_weight_in_bwd",), default=False, source=JC),
    # torchtitan after 0.3 counts batches in tokens (TrainingConfig, ParallelismConfig)
    Rule(key="training.num_tokens_per_microbatch_per_dp_rank", dest="_mb_tokens", conv=as_int,
         source=TOKENS),
    Rule(key="training.num_tokens_per_train_step", dest="_step_tokens",
         conv=lambda v: -1 if v in (-1, "-1") else as_int(v), source=TOKENS),
    Rule(key="parallelism.num_pp_microbatches", dest="_pp_microbatches", conv=as_int,
         source=TOKENS),
    Rule(key="float8.filter_fqns", aliases=(Q8 + "filter_fqns",), dest="_f8_filter",
         default=["output"], source=JC,
         conv=lambda v: _names(v)),
)


def _names(v) -> list[str]:
    """model.converters: a list, or one comma-separated string as on the command line."""
    items = v if isinstance(v, (list, tuple)) else str(v).split(",")
    return [str(x).strip() for x in items if str(x).strip()]


def converters(f: dict, src: Source, imp: Imported) -> None:
    """model.converters = ["float8"] (2024-12: float8.enable_float8_linear) → --float8 with the
    recipe; the float8 options torchtitan's converter reads (components/quantization/float8.py:
    the FSDP float8 all-gather only with data-parallel sharding, precompute only with it)."""
    names = f["_converters"]
    for other in [n for n in names if n not in FLOAT8]:
        imp.row("unmodelled", "model.converters", src, value=other,
                why=f"model converter {other!r} (MX / quantized linears) is not modelled")
    named = next((n for n in names if n in FLOAT8), None)
    on = named is not None or f["_f8_linear"]
    key = "model.converters" if named else "float8.enable_float8_linear"
    gather = on and f["_f8_gather"] and f["_dp_shard"] != 1
    for k, dest in zip(F8, ("_f8_gather", "_f8_precompute", "_f8_force")):
        if not on and f[dest] and imp.read.get(dest) is not None:
            imp.row("ignored", k, src, value=True,
                    why="no effect: 'float8' is not in model.converters (torchtitan applies "
                        "no float8 converter)")
    if not names and not on:  # a quantizer's section without the converter changes nothing
        imp.rows = [replace(r, kind="ignored", why=f"no effect: model.converters applies no "
                                                   f"quantizer ({r.why})")
                    if r.kind == "unmodelled" and r.key.startswith(QUANT_SECTIONS) else r
                    for r in imp.rows]
    imp.set("float8", f["_f8_recipe"] if on else "off", src, key)
    if on and sorted(f["_f8_filter"]) != ["output"]:
        imp.row("unmodelled", "float8.filter_fqns", src, value=f["_f8_filter"],
                why="memledger converts every layer Linear and never the output head "
                    "(torchtitan's default ['output'])")
    imp.set("float8_fsdp_all_gather", gather, src, "float8.enable_fsdp_float8_all_gather")
    imp.set("float8_precompute_scale", gather and f["_f8_precompute"], src,
            "float8.precompute_float8_dynamic_scale_for_fsdp")
    imp.set("float8_force_recompute_weight", on and f["_f8_force"], src,
            "float8.force_recompute_fp8_weight_in_bwd")


def compile_flags(f: dict, src: Source, imp: Imported) -> None:
    """compile.enable + components (0.2): the model and/or the loss; training.compile (the
    2024-12 / 2025-06 spelling) compiles the blocks, and the loss as the era does
    (--torchtitan-version: 2025-06 yes, 2024-12 no)."""
    if f["_train_compile"]:
        imp.set("torch_compile", True, src, "training.compile")
        imp.set("compile_loss", "auto", src, "training.compile")
        return
    imp.set("torch_compile", bool(f["_compile"] and "model" in f["_compile_parts"]), src,
            "compile.enable")
    imp.set("compile_loss", "on" if f["_compile"] and "loss" in f["_compile_parts"] else "off",
            src, "compile.components")


LOCAL_GLOBAL = ("training.local_batch_size", "training.global_batch_size")


def token_batches(f: dict, src: Source, imp: Imported) -> None:
    """Token counts as torchtitan after 0.3 spells the batch: a micro-batch of
    num_tokens_per_microbatch_per_dp_rank tokens is that / max_context_length sequences (the
    packed [T] rows of max_context_length each), num_pp_microbatches of them per step under
    PP, num_tokens_per_train_step the global batch in tokens (-1: no accumulation)."""
    if "_mb_tokens" not in f:
        return
    seq, key = f["seq"], "training.num_tokens_per_microbatch_per_dp_rank"
    if f["_mb_tokens"] % seq:
        raise src.error(key, f"{f['_mb_tokens']} tokens are not whole sequences of "
                             f"max_context_length {seq}")
    rows = f["_mb_tokens"] // seq
    imp.rows = [r for r in imp.rows if not (r.kind == "default" and r.key in LOCAL_GLOBAL)]
    if f.get("pp", 1) > 1:
        imp.set("_pp_microbatch", rows, src, key)
        rows *= f.get("_pp_microbatches", 1)
    imp.set("_local_batch", rows, src, key)
    step = f.get("_step_tokens", -1)
    if step != -1:
        if step % seq:
            raise src.error("training.num_tokens_per_train_step",
                            f"{step} tokens are not whole sequences of max_context_length {seq}")
        imp.set("_global_batch", step // seq, src, "training.num_tokens_per_train_step")
