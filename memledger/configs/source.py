"""Reading a framework configuration file safely: size limit, safe parsers, and error messages
that name the file, the line and the key.

YAML goes through `yaml.safe_load` only (a `!!python/object` tag is refused by the safe loader,
never constructed); TOML through `tomllib`; JSON through `json` with duplicate keys refused.
Nothing read is executed or evaluated. Ignores: YAML anchors' provenance (a key's line is the
first line that spells it).
"""
from __future__ import annotations

import bisect
import json
import re
import tomllib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

MAX_BYTES = 1_000_000  # larger files are refused before they are parsed
MAX_DEPTH = 64  # bracket nesting (JSON, TOML and YAML flow style), checked before parsing
_WORD = re.compile(r"\w+")  # on the text with dashes read as underscores
MAX_KEYS = 50_000  # leaves after flattening: YAML aliases may repeat a mapping many times


class ConfigError(ValueError):
    """Bad configuration input: the message is one line naming file, line and key."""

    def __init__(self, name: str, message: str, *, line: int = 0, key: str = ""):
        where = f"{name}:{line}" if line else name
        super().__init__(f"{where}: {key + ': ' if key else ''}{message}")
        self.name, self.line, self.key, self.message = name, line, key, message


@dataclass(frozen=True)
class Source:
    """One configuration file's text and the name messages use for it."""

    name: str
    text: str

    @cached_property
    def _index(self) -> dict[str, list[int]]:
        """word (dashes read as underscores, leading -- dropped) -> the lines it is on, once
        per file: a 4,000-line dump with 2,000 keys is looked up in linear time."""
        index: dict[str, list[int]] = {}
        for i, line in enumerate(self.text.replace("-", "_").splitlines(), 1):
            for word in {w.lstrip("_") for w in _WORD.findall(line)}:  # `--x-y` -> `x_y`
                index.setdefault(word, []).append(i)
        return index

    def _find(self, word: str, start: int) -> int:
        lines = self._index.get(word.replace("-", "_").lstrip("_"), ())
        k = bisect.bisect_left(lines, start)
        return lines[k] if k < len(lines) else 0

    def line_of(self, key: str) -> int:
        """1-based line of `key` (a dotted key: its leaf after the line naming its first
        section, so `compile.enable` is found under [compile]); 0 when not found."""
        if not key:
            return 0
        parts = key.split(".")
        start = self._find(parts[0], 0) if len(parts) > 1 else 0
        return self._find(parts[-1], start) or self._find(parts[-1], 0)

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(self.name, message, line=self.line_of(key), key=key)

    def file_of(self, key: str) -> str:
        """The file that says `key`: this one (torchtitan_launch.Layered: a launch or its TOML)."""
        return self.name


def from_path(path: str | Path) -> Source:
    p = Path(path)
    try:
        if not p.is_file():  # /dev/zero, a fifo or a folder would never end or never parse
            raise ConfigError(str(path), "not a regular file" if p.exists() else "no such file")
        with p.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ConfigError(str(path), f"cannot read: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(str(path), f"file is over {MAX_BYTES:,} bytes; configuration files "
                                     f"over {MAX_BYTES:,} bytes are refused")
    return from_bytes(data, str(path))


def check_depth(src: Source) -> None:
    """Bracket nesting bounded before any parser recurses into it."""
    from memledger.safe_json import nesting_depth
    if nesting_depth(src.text.encode()) > MAX_DEPTH:
        raise ConfigError(src.name, f"nests deeper than {MAX_DEPTH} levels")


def from_bytes(data: bytes, name: str) -> Source:
    if len(data) > MAX_BYTES:
        raise ConfigError(name, f"{len(data):,} bytes; configuration files over {MAX_BYTES:,} "
                                f"bytes are refused")
    try:
        return Source(name, data.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise ConfigError(name, f"not UTF-8 text (byte {e.start})") from None


def parse_yaml(src: Source):
    import yaml
    check_depth(src)
    try:
        return yaml.safe_load(src.text)
    except RecursionError:
        raise ConfigError(src.name, f"nests deeper than {MAX_DEPTH} levels") from None
    except yaml.constructor.ConstructorError as e:  # !!python/object and other unsafe tags
        mark = e.problem_mark
        raise ConfigError(src.name, f"refused YAML tag: {e.problem}",
                          line=mark.line + 1 if mark else 0) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(src.name, f"unparseable YAML: {getattr(e, 'problem', None) or e}",
                          line=mark.line + 1 if mark else 0) from None


def parse_toml(src: Source) -> dict:
    check_depth(src)
    try:
        return tomllib.loads(src.text)
    except RecursionError:
        raise ConfigError(src.name, f"nests deeper than {MAX_DEPTH} levels") from None
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ConfigError(src.name, f"unparseable TOML: {str(e).split(' (at')[0]}",
                          line=int(m.group(1)) if m else 0) from None


def _no_dupes(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def parse_json(src: Source):
    check_depth(src)
    try:
        return json.loads(src.text, object_pairs_hook=_no_dupes,
                          parse_constant=lambda c: _bad_constant(c))
    except json.JSONDecodeError as e:
        raise ConfigError(src.name, f"unparseable JSON: {e.msg}", line=e.lineno) from None
    except ValueError as e:
        raise ConfigError(src.name, f"unparseable JSON: {e}") from None


def _bad_constant(c: str):
    raise ValueError(f"{c} is not a number JSON allows")


def check_size(src: Source, data) -> None:
    """At most MAX_KEYS values, counted as they would be walked (a YAML alias repeated at
    every level is refused here, before anything walks 2^depth copies of it)."""
    seen, stack = 0, [(data, 0)]
    while stack:
        node, depth = stack.pop()
        items = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for v in items:
            seen += 1
            if seen > MAX_KEYS or depth > MAX_DEPTH:
                raise ConfigError(src.name, f"more than {MAX_KEYS:,} values or {MAX_DEPTH} "
                                            f"levels; not a training configuration")
            if isinstance(v, (dict, list)):
                stack.append((v, depth + 1))


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    """Nested mappings as dotted keys (`zero_optimization.stage`); bounded by check_size."""
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
