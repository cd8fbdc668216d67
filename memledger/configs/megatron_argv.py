"""A Megatron-LM launch — a `pretrain_gpt.py` command line or shell script, the functional-test
`model_config.yaml` (`MODEL_ARGS:`), a `--yaml-cfg` file, or a Megatron-Bridge `ConfigContainer`
override YAML — as one flat mapping of Megatron field names (`num_layers`) to values.

The script is tokenised with `shlex` and never run. Plain assignments (`TP=8`, `ARGS=( … )`,
`${NNODES:-1}`) are substituted; anything else (`$(…)`, an unset `$VAR`) stays unresolved and is
named. Flags become field names as Megatron builds them (megatron/training/argument_utils.py:
flag = "--" + field.replace("_", "-")). torchrun's --nproc_per_node/--nnodes are kept for the
world size. Ignores: control flow, functions and environment variables set outside the file.
"""
from __future__ import annotations

import re
import shlex

from memledger.configs.source import ConfigError, Source

_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(\[@\]|\[\*\])?(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
MAX_TOKENS = 20_000


def _expand(text: str, env: dict[str, str]) -> str:
    def sub(m):
        name = m.group(1) or m.group(4)
        if name in env:
            return env[name]
        if m.group(3) is not None:
            return m.group(3)
        return m.group(0)  # left for the caller to name as unresolved
    return _VAR.sub(sub, text)


def _logical_lines(text: str) -> list[str]:
    """Lines with `\\` continuations joined and `( … )` array bodies folded onto one line."""
    joined = re.sub(r"\\\r?\n", " ", text)
    out, buf, depth = [], "", 0
    for line in joined.splitlines():
        s = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        if depth:
            buf += " " + s
        else:
            buf = s
        depth += s.count("(") - s.count(")")
        if depth <= 0:
            out.append(buf.strip())
            buf, depth = "", 0
    if buf.strip():
        out.append(buf.strip())
    return out


_ENTRY = re.compile(r"pretrain_\w+\.py|megatron\.training|run_pretrain")


def argv_tokens(src: Source, entry: re.Pattern = _ENTRY) -> list[str]:
    """The launch's tokens after substituting the file's own plain assignments: the command
    lines that run the framework's entry point (`entry`: Megatron's pretrain_*.py) when there
    are any (a script may preprocess data first), else every command line."""
    env: dict[str, str] = {}
    tokens: list[str] = []
    launch: list[str] = []
    for line in _logical_lines(src.text):
        if not line:
            continue
        m = _ASSIGN.match(line)
        if m:
            name, value = m.group(1), m.group(2).strip()
            array = value.startswith("(") and value.endswith(")")
            parts = _split(src, _expand(value[1:-1] if array else value, env))
            if array or len(parts) <= 1:
                if "$(" not in value and "`" not in value:
                    env[name] = " ".join(shlex.quote(p) for p in parts)
                continue
        words = _split(src, _expand(line, env))
        tokens += words
        if any(entry.search(w) for w in words):
            launch += words
        if len(tokens) > MAX_TOKENS:
            raise ConfigError(src.name, f"more than {MAX_TOKENS} tokens; not a launch script")
    return launch or tokens


def _split(src: Source, text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as e:
        raise ConfigError(src.name, f"cannot tokenise: {e}") from None


def flags_from_tokens(tokens: list[str]) -> dict[str, object]:
    """`--flag value` / `--flag=value` / bare `--flag` (= True) as field names."""
    out: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        t = tokens[i]
        i += 1
        if not t.startswith("--") or len(t) < 3:
            continue
        name, eq, value = t[2:].partition("=")
        key = name.replace("-", "_")
        if eq:
            out[key] = value
        elif i < len(tokens) and not tokens[i].startswith("--"):
            out[key] = tokens[i]
            i += 1
        else:
            out[key] = True
    return out


def from_yaml_mapping(data: dict) -> dict[str, object]:
    """MODEL_ARGS (`--flag: value`), --yaml-cfg sections or a Bridge ConfigContainer: leaves."""
    if isinstance(data.get("MODEL_ARGS"), dict):
        return {str(k).lstrip("-").replace("-", "_"): v for k, v in data["MODEL_ARGS"].items()}
    out: dict[str, object] = {}

    def walk(d):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v)
            else:
                out[str(k).lstrip("-").replace("-", "_")] = v
    walk(data)
    return out


def unresolved(flags: dict) -> dict[str, str]:
    """Flags whose value still holds a `$VAR` the file did not define."""
    return {k: v for k, v in flags.items() if isinstance(v, str) and "$" in v}
