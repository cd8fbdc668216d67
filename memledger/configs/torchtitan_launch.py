"""A torchtitan launch — `CONFIG_FILE=job.toml ./run_train.sh --section.key=value …` or
`torchrun … -m torchtitan.train --job.config_file job.toml …` — as the job config it runs: the
TOML it names with the command line's overrides on top (torchtitan 0.2
config/manager.py ConfigManager.parse_args: the file first, then the CLI; run_train.sh passes
`--job.config_file ${CONFIG_FILE}` and "$@").

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

from memledger.configs.megatron_argv import argv_tokens
from memledger.configs.source import ConfigError, Source

ENTRY = re.compile(r"run_train\.sh|torchtitan[./]train|torchtitan/train\.py")
_CONFIG_ENV = re.compile(r"""(?:^|[\s;])(?:export\s+)?CONFIG_FILE=("[^"]*"|'[^']*'|[^\s;]+)""")
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


def parse(src: Source) -> tuple[str | None, dict[str, object]]:
    """(the job config file it names or None, flat dotted overrides in command-line order)."""
    tokens = argv_tokens(src, ENTRY)
    config = None
    out: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        t = tokens[i]
        i += 1
        if t.startswith("CONFIG_FILE="):
            config = t.split("=", 1)[1]
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
            config = str(value)
            continue
        out[key] = value
    if config is None:  # `export CONFIG_FILE=…` on a line of its own
        m = _CONFIG_ENV.search(src.text)
        config = m.group(1).strip("'\"") if m else None
    return config, out


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
        self.text = launch.text + ("\n" + job.text if job else "")

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
