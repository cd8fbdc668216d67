"""A torchtitan launch as the job config it runs, the command line's overrides on top:
- 0.2: `CONFIG_FILE=job.toml ./run_train.sh --section.key=value …` or `torchrun … -m
  torchtitan.train --job.config_file job.toml …` — the TOML it names (config/manager.py
  ConfigManager.parse_args: the file first, then the CLI; run_train.sh passes
  `--job.config_file ${CONFIG_FILE}` and "$@");
- 0.3: `MODULE=llama3 CONFIG=llama3_8b ./run_train.sh …` or `--module llama3 --config llama3_8b`
  — the config_registry function's Trainer.Config (config/manager.py: --module, --config), read
  as the job config it dumps; only from a file the CLI reads, with torchtitan installed.

The script is tokenised by `megatron_argv` (shlex, plain assignments substituted, never run).
An override is `--section.key=value`, `--section.key value…` (several values: a list) or a bare
`--section.key` (true); `--section.no-key` / `--section.no_key` is false (tyro's spelling).
Values read as TOML scalars (true, 8, 3e-4) else strings; `a,b` is a list. The named TOML is
another of the files given (matched by name) or, for a launch read from disk, the file beside
it; a pasted or uploaded launch never reads a path it names. Every row says which
file and line set it (`Layered`). Ignores: environment variables set outside the file.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from memledger.configs.megatron_argv import argv_tokens
from memledger.configs.source import ConfigError, Source

ENTRY = re.compile(r"run_train\.sh|torchtitan[./]train|torchtitan/train\.py")
MAX_DOTS = 8
_NUM = re.compile(r"^-?(\d+\.?\d*(e-?\d+)?|\.\d+)$", re.I)


def is_launch(text: str) -> bool:
    return bool(ENTRY.search(text)) or "--job.config_file" in text or "--job.config-file" in text


def _value(v: str):
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if _NUM.match(v):
        return int(v) if re.fullmatch(r"-?\d+", v) else float(v)
    if "," in v:
        return [x.strip() for x in v.split(",") if x.strip()]
    return v


class Launch(NamedTuple):
    job_file: str | None  # 0.2: the TOML it names (CONFIG_FILE, --job.config_file)
    module: str | None  # 0.3: --module / MODULE (a model family)
    registry: str | None  # 0.3: --config / CONFIG (a config_registry function)
    overrides: dict  # flat dotted keys, in command-line order


def _env(text: str, name: str) -> str | None:
    """`NAME=value` before the command or `export NAME=value` on a line of its own."""
    m = re.search(rf"""(?:^|[\s;])(?:export\s+)?{name}=("[^"]*"|'[^']*'|[^\s;]+)""", text)
    return m.group(1).strip("'\"") if m else None


def parse(src: Source) -> Launch:
    tokens = argv_tokens(src, ENTRY)
    named: dict[str, str] = {}
    out: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        t = tokens[i]
        i += 1
        env, eq, val = t.partition("=")
        if eq and env in ("CONFIG_FILE", "MODULE", "CONFIG"):
            named[env] = val
            continue
        if t.split("=", 1)[0] in ("--module", "--config"):
            flag, eq, val = t.partition("=")
            if not eq and i < len(tokens):
                val, i = tokens[i], i + 1
            named[{"--module": "MODULE", "--config": "CONFIG"}[flag]] = val
            continue
        if not t.startswith("--") or "." not in t.split("=", 1)[0]:
            continue
        name, eq, raw = t[2:].partition("=")
        if name.count(".") > MAX_DOTS:  # torchtitan's deepest key has three
            raise ConfigError(src.name, f"--{name[:60]}…: a key nests deeper than {MAX_DOTS} "
                                        "sections; not a torchtitan option")
        section, _, leaf = name.replace("-", "_").rpartition(".")
        values = [raw] if eq else []
        while not eq and i < len(tokens) and not tokens[i].startswith("--"):
            values.append(tokens[i])
            i += 1
        if not values and leaf.startswith("no_"):
            key, value = f"{section}.{leaf[3:]}", False
        else:
            key = f"{section}.{leaf}"
            value = True if not values else _value(values[0]) if len(values) == 1 else values
        if key == "job.config_file":
            named["CONFIG_FILE"] = str(value)
            continue
        out[key] = value
    for env in ("CONFIG_FILE", "MODULE", "CONFIG"):
        value = named.get(env) or _env(src.text, env)
        if value is not None:
            named[env] = value
    return Launch(named.get("CONFIG_FILE"), named.get("MODULE"), named.get("CONFIG"), out)


def registry_config(src: Source, module: str, name: str) -> dict:
    """torchtitan 0.3's job config of `--module M --config F`: the registry function's
    Trainer.Config as its dump (`to_dict`, what debug.save_config_file writes), read through
    JSON into plain containers. Only a `M_…` function defined in
    torchtitan.models.M.config_registry is called."""
    import importlib
    import inspect
    import json
    if not (re.fullmatch(r"[a-z][a-z0-9_]{0,40}", module or "")
            and re.fullmatch(r"[a-z][a-z0-9_.]{0,80}", name or "")):
        raise ConfigError(src.name, f"--module {module!r} --config {name!r}: not a torchtitan "
                                    "model family and config function")
    try:
        reg = importlib.import_module(f"torchtitan.models.{module}.config_registry")
    except ImportError:
        raise ConfigError(src.name, f"--module {module} --config {name}: torchtitan 0.3's config "
                                    "registry is read with torchtitan installed (pip install "
                                    "'memledger[validation]'); or give the job config it dumps "
                                    "(debug.save_config_file)") from None
    known = sorted(n for n, f in vars(reg).items() if n.startswith(module + "_")
                   and inspect.isfunction(f) and f.__module__ == reg.__name__)
    if name not in known:
        raise ConfigError(src.name, f"--config {name}: not a config of torchtitan.models.{module} "
                                    f"({', '.join(known[:12])}{', …' if len(known) > 12 else ''})")
    return json.loads(json.dumps(getattr(reg, name)().to_dict(), default=str))


def unflatten(flat: dict[str, object]) -> dict:
    out: dict = {}
    for key, value in flat.items():
        d = out
        *parents, leaf = key.split(".")
        for p in parents:
            d = d.setdefault(p, {}) if isinstance(d.get(p, {}), dict) else d
        d[leaf] = value
    return out


class Layered:
    """The launch and the TOML it names as one source for the importer's rows: a key the
    command line overrides is on the launch's line, any other on the TOML's."""

    def __init__(self, launch: Source, job: Source | None, overridden: set[str]):
        self.launch, self.job, self.overridden = launch, job, overridden
        self.name = launch.name

    def _src(self, key: str) -> Source:
        return self.launch if self.job is None or key in self.overridden else self.job

    def file_of(self, key: str) -> str:
        return self._src(key).name

    def line_of(self, key: str) -> int:
        src = self._src(key)
        section, _, leaf = key.rpartition(".")
        return src.line_of(key) or (src.line_of(f"{section}.no_{leaf}") if section else 0)

    def error(self, key: str, message: str) -> ConfigError:
        return self._src(key).error(key, message)


def job_path(src: Source, named: str, base: Path | None, given: dict[str, str]) -> str:
    """Where the job config the launch names is: one of the other files given (matched by file
    name), or — for files read from disk (`base`: the launch's folder) — beside the launch or as
    written. Text pasted or uploaded (no `base`) never reads a path it names from the disk."""
    p = Path(named)
    if p.name in given:
        return given[p.name]
    for cand in ([] if base is None else [base / p, p] if not p.is_absolute() else [p]):
        if cand.is_file():
            return str(cand)
    raise ConfigError(src.name, f"names the job config {named!r}, which was not given: give it "
                                f"beside the launch (CLI: another --config FILE)")
