"""Framework configurations in and out: a Megatron-LM launch, a torchtitan TOML or dumped job
config, a DeepSpeed JSON (with HF TrainingArguments), an accelerate config, a LLaMA-Factory YAML
→ memledger's own flags (argparse dests), with one row per key saying what it set, which
framework default filled an absent key, what was ignored and what changes memory that
memledger does not model. `memledger.configs.export` writes flags back out.

Format detection reads content, never the file name. Ignores: anything the files do not say
(the CLI's own flags and defaults fill it in).
"""
from __future__ import annotations

from pathlib import Path

from memledger.configs import source as S
from memledger.configs.rules import Imported
from memledger.configs.source import ConfigError, Source
from memledger.configs.torchtitan_launch import is_launch
from memledger.safe_json import deep_merge

FORMATS = ("megatron", "torchtitan", "deepspeed", "hf", "accelerate", "llamafactory")
_PRIORITY = {"hf": 0, "llamafactory": 1, "accelerate": 2, "megatron": 3, "torchtitan": 3,
             "deepspeed": 4}


def _parse(src: Source):
    """(kind, data): kind json / toml / yaml / text."""
    text = src.text.lstrip()
    if text.startswith("{"):
        return "json", S.parse_json(src)
    if any(line.lstrip().startswith("[") and line.rstrip().endswith("]")
           for line in text.splitlines()[:200]) and "=" in text:
        try:
            return "toml", S.parse_toml(src)
        except ConfigError:
            if not any(":" in line.split("=", 1)[0] for line in text.splitlines()
                       if line.strip() and not line.lstrip().startswith(("#", "["))):
                raise  # no YAML mapping line: it was meant as TOML
    if text.startswith("#!"):
        return "text", None
    try:
        data = S.parse_yaml(src)
    except ConfigError as e:
        if "refused" in e.message or "--" not in text:
            raise  # an unsafe tag, or plain broken YAML (not a command line)
        return "text", None
    if isinstance(data, dict) and any(v is not None for v in data.values()):
        return "yaml", data
    return "text", None


def detect(src: Source, kind: str, data) -> str:
    keys = set(data) if isinstance(data, dict) else set()
    flat = set(S.flatten(data)) if isinstance(data, dict) else set()
    leaves = {k.rsplit(".", 1)[-1] for k in flat}
    if kind == "json":
        if keys & {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
                   "bf16", "fp16"} and not keys & {"per_device_train_batch_size"}:
            return "deepspeed"
        if {"parallelism", "training"} <= keys:
            return "torchtitan"
        if keys & {"per_device_train_batch_size", "output_dir", "gradient_accumulation_steps"}:
            return "hf"
    if kind == "toml" and keys & {"parallelism", "training", "activation_checkpoint", "job"}:
        return "torchtitan"
    if kind == "yaml":
        if "MODEL_ARGS" in keys:
            return "megatron"
        if keys & {"distributed_type", "compute_environment"}:
            return "accelerate"
        if "model_name_or_path" in keys and keys & {"finetuning_type", "stage", "cutoff_len",
                                                    "template"}:
            return "llamafactory"
        if leaves & {"tensor_model_parallel_size", "num_layers", "global_batch_size"}:
            return "megatron"
        if keys & {"per_device_train_batch_size", "output_dir"}:
            return "hf"
    if kind == "text" and ("pretrain_gpt" in src.text or "--tensor-model-parallel-size" in src.text
                           or "--num-layers" in src.text):
        return "megatron"
    if kind == "text" and is_launch(src.text):  # run_train.sh / torchtitan.train
        return "torchtitan"
    raise ConfigError(src.name, f"unknown configuration format (read as {kind}); supported: "
                                f"{', '.join(FORMATS)} (force one with --config-format)")


def read_source(src: Source, fmt: str | None = None, *, base: Path | None = None,
                given: dict[str, str] | None = None) -> list[Imported]:
    """One file → its imports (LLaMA-Factory also pulls in the DeepSpeed JSON it names, a
    torchtitan launch the job config it runs: one of `given`, name -> path, or beside it)."""
    kind, data = _parse(src)
    S.check_size(src, data)
    fmt = fmt or detect(src, kind, data)
    if fmt not in FORMATS:
        raise ConfigError(src.name, f"unknown --config-format {fmt!r}; valid: {', '.join(FORMATS)}")
    if fmt == "torchtitan" and kind == "text":
        return [_launch(src, base, given or {})]
    if fmt != "megatron" and not isinstance(data, dict):
        raise ConfigError(src.name, f"a {fmt} configuration must be a mapping, got {kind}")
    from memledger.configs import accelerate, deepspeed, megatron, torchtitan
    if fmt == "megatron":
        return [megatron.read(src, data if kind != "text" else None)]
    if fmt == "torchtitan":
        return [torchtitan.read(src, data)]
    if fmt == "deepspeed":
        return [deepspeed.read_deepspeed(src, data)]
    if fmt == "hf":
        out = [deepspeed.read_training_args(src, data)]
        if isinstance(data.get("deepspeed"), str):
            out.append(_beside(src, data["deepspeed"], base))
        return out
    if fmt == "accelerate":
        out = [accelerate.read_accelerate(src, data)]
        path = (data.get("deepspeed_config") or {}).get("deepspeed_config_file")
        if isinstance(path, str) and path:
            out.append(_beside(src, path, base))
        return out
    return accelerate.read_llamafactory(src, data, load=lambda s, p: _beside(s, p, base))


def _beside(src: Source, path: str, base: Path | None) -> Imported:
    """A DeepSpeed JSON named inside another file, read relative to that file; text pasted or
    uploaded (no `base`) never reads a path it names from the disk."""
    from memledger.configs import deepspeed
    if base is None:
        raise src.error("deepspeed", f"names {path!r}; a pasted or uploaded file never reads "
                                     "another from this machine: give that file's settings "
                                     "(CLI: another --config)")
    p = Path(path)
    if not p.is_absolute():
        p = base / p
    if not p.is_file():
        raise src.error("deepspeed", f"names {path!r}, which is not a file here; give it as "
                                     f"another --config")
    s = S.from_path(p)
    kind, data = _parse(s)
    S.check_size(s, data)
    if kind != "json" or not isinstance(data, dict):
        raise ConfigError(s.name, "expected a DeepSpeed JSON object")
    return deepspeed.read_deepspeed(s, data)


def _launch(src: Source, base: Path | None, given: dict[str, str]) -> Imported:
    """A torchtitan launch: the job config it names with its command-line overrides on top."""
    from memledger.configs import torchtitan
    from memledger.configs import torchtitan_launch as L
    launch = L.parse(src)
    job, data = None, {}
    if launch.job_file is not None:
        job = S.from_path(L.job_path(src, launch.job_file, base, given))
        kind, data = _parse(job)
        S.check_size(job, data)
        if kind not in ("toml", "json") or not isinstance(data, dict):
            raise ConfigError(job.name, "expected a torchtitan job config (TOML or dumped JSON)")
    elif launch.module or launch.registry:
        if base is None:  # pasted or uploaded: never runs torchtitan's code
            raise ConfigError(src.name, "a torchtitan 0.3 launch (--module / --config) is read "
                                        "by the CLI from a file; here give the job config it "
                                        "dumps (debug.save_config_file)")
        data = L.registry_config(src, launch.module, launch.registry)
        job = Source(f"torchtitan.models.{launch.module}.config_registry.{launch.registry}()", "")
    over = launch.overrides
    imp = torchtitan.read(L.Layered(src, job, set(over)), deep_merge(data, L.unflatten(over)))
    imp.files = (src.name,) + ((job.name,) if launch.job_file is not None else ())  # read once
    return imp


def read_files(paths, fmt: str | None = None) -> Imported:
    """Several files (e.g. a DeepSpeed JSON and its TrainingArguments) merged into one import;
    a job config a torchtitan launch among them runs is read once, under the launch."""
    given = {Path(p).name: str(p) for p in paths}
    imports = []
    for path in paths:
        src = S.from_path(path)
        imports += read_source(src, fmt, base=Path(path).parent, given=given)
    ran = {Path(f).resolve() for i in imports for f in i.files[1:] if i.format == "torchtitan"}
    imports = [i for i in imports if not (len(i.files) == 1 and Path(i.files[0]).resolve() in ran)]
    return merge(imports)


def read_text(text: str, name: str = "pasted", fmt: str | None = None) -> Imported:
    return merge(read_source(S.from_bytes(text.encode(), name), fmt))


def merge(imports: list[Imported]) -> Imported:
    """Reads beat defaults; between files the more specific framework wins (DeepSpeed over the
    TrainingArguments beside it), then the later file."""
    out = Imported(format="+".join(dict.fromkeys(i.format for i in imports)))
    ordered = sorted(imports, key=lambda i: _PRIORITY[i.format])
    for imp in ordered:
        out.defaults.update(imp.defaults)
        out.read.update(imp.read)
        out.files += imp.files
        out.model = imp.model or out.model
        for k, v in imp.origin.items():
            if k in imp.read or k not in out.origin:
                out.origin[k] = v
    for imp in imports:
        out.rows += imp.rows
    f = out.flags()
    if f.get("_ds_auto_precision"):  # DeepSpeed bf16/fp16 "auto": TrainingArguments' bf16/fp16
        out.read["precision"] = "mixed16" if f.get("_ta_bf16") else "fp16" if f.get(
            "_ta_fp16") else "fp32"
    return out


__all__ = ["FORMATS", "ConfigError", "Imported", "detect", "merge", "read_files", "read_text"]
