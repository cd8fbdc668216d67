"""JSON from a user, read within bounds: size first, then nesting depth, then parsing.

A config path may name `/dev/zero` or a 10 GB file, and a 100 kB document may nest 50,000
brackets deep (json.loads then raises RecursionError, which is not a ValueError and escaped the
CLI as a traceback). Both limits are checked before the parser runs; every failure is a
SpecError naming the field (`config`, `profile`, `rescore`). Real inputs are far below the
limits: a Hugging Face config.json is 1-10 kB and nests 3 levels; a validation result 50 kB.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from memledger.errors import SpecError

MAX_JSON_BYTES = 4 << 20  # 4 MiB
MAX_DEPTH = 64
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")


def read_bytes(path, field: str, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """At most max_bytes of a regular file; SpecError(field) for anything else."""
    p, shown = Path(path), repr(str(path)[:200])
    if not str(path).strip():
        raise SpecError(field, "the path is empty; give a file")
    try:
        if not p.exists():
            raise SpecError(field, f"cannot read {shown}: no such file")
        if not p.is_file():  # /dev/zero, a fifo or a folder would never end or never parse
            raise SpecError(field, f"{shown} is not a regular file")
        with p.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise SpecError(field, f"cannot read {shown}: {e.strerror or type(e).__name__}") from None
    if len(data) > max_bytes:
        raise SpecError(field, f"{shown} is larger than {max_bytes:,} bytes")
    return data


def nesting_depth(data: bytes) -> int:
    """The deepest bracket nesting of a JSON text, strings skipped (linear, no recursion)."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(_STRINGS.sub(b'""', data)):
        depth += 1 if m.group() in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    return deepest


def loads(data: bytes | str, field: str, max_bytes: int = MAX_JSON_BYTES,
          max_depth: int = MAX_DEPTH):
    """Parse JSON text within the size and depth bounds; SpecError(field) on any failure."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise SpecError(field, f"JSON text is larger than {max_bytes:,} bytes")
    if nesting_depth(raw) > max_depth:
        raise SpecError(field, f"JSON nests deeper than {max_depth} levels")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise SpecError(field, f"not valid JSON: {str(e)[:120]}") from None


def load_file(path, field: str, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_DEPTH):
    return loads(read_bytes(path, field, max_bytes), field, max_bytes, max_depth)


def deep_merge(base: dict, extra: dict) -> dict:
    """A new mapping: `extra`'s leaves replace `base`'s, nested mappings merged (neither input
    changes)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
