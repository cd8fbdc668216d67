"""The rule-table engine every importer uses: a framework key → a memledger flag (argparse dest)
and value, with the framework file the key and its default come from.

An importer is data: `Rule`s (read keys), `UNMODELLED` (keys that change memory that memledger
does not model, with why) and `IGNORED` (keys read and deliberately dropped, with why). `apply`
walks them over a file's flat key → value mapping and returns an `Imported`: the flags, and one
`Row` per key for `memledger config` and the app's table. Ignores: keys' order and comments.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from memledger.configs.source import Source

MISSING = object()
KINDS = ("read", "default", "ignored", "unmodelled", "unresolved")


@dataclass(frozen=True, kw_only=True)
class Rule:
    key: str  # the framework's key (flat, dotted for nested sections)
    dest: str  # memledger flag dest it sets ("" when `conv` returns a mapping of dests)
    source: str  # framework file the key and its default come from
    conv: Callable | None = None  # value -> value, or -> {dest: value}; ValueError on bad input
    default: object = MISSING  # the framework's default when the key is absent
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Row:
    kind: str  # one of KINDS
    key: str
    value: object = None  # the file's value (or the default used)
    flags: tuple[tuple[str, object], ...] = ()  # memledger dests and values it set
    source: str = ""
    why: str = ""
    line: int = 0
    file: str = ""


@dataclass(kw_only=True)
class Imported:
    """What one (or several merged) configuration files say, as memledger flags."""

    format: str
    files: tuple[str, ...] = ()
    read: dict = field(default_factory=dict)  # dest -> value from a key in a file
    defaults: dict = field(default_factory=dict)  # dest -> framework default for an absent key
    origin: dict = field(default_factory=dict)  # dest -> (file, line, key), for messages
    rows: list = field(default_factory=list)
    model: object = None  # a ModelSpec built from the file's model flags (Megatron), or None

    def flags(self) -> dict:
        """Every dest the files set: a key read anywhere beats a framework default."""
        return {**self.defaults, **self.read}

    def row(self, kind: str, key: str, src: Source, **kw) -> None:
        # a framework default has no line: the key is absent (its leaf may sit in another section)
        line = 0 if kind == "default" else src.line_of(key)
        self.rows.append(Row(kind=kind, key=key, line=line, file=src.file_of(key), **kw))

    def set(self, dest: str, value, src: Source, key: str, *, default: bool = False) -> None:
        (self.defaults if default else self.read)[dest] = value
        if not default or dest not in self.origin:
            self.origin[dest] = (src.file_of(key), 0 if default else src.line_of(key), key)
        for i in range(len(self.rows) - 1, -1, -1):  # the key's row shows what it set
            r = self.rows[i]
            if r.key == key and r.file == src.file_of(key) and r.kind in ("read", "default"):
                kept = tuple(kv for kv in r.flags if kv[0] != dest)
                self.rows[i] = replace(r, flags=kept + ((dest, value),))
                break


def _as_dict(rule: Rule, value) -> dict:
    out = rule.conv(value) if rule.conv else value
    return out if isinstance(out, dict) else {rule.dest: out}


def apply(src: Source, data: dict, rules: tuple[Rule, ...], *, unmodelled: dict[str, str],
          ignored: dict[str, str], imp: Imported, skip: frozenset = frozenset()) -> dict:
    """Map `data` (flat key -> value) through `rules` into `imp`; returns the unread keys."""
    seen = set()
    for rule in rules:
        # null / an empty YAML value means unset: the framework's default applies
        key = next((k for k in (rule.key, *rule.aliases) if data.get(k) is not None), None)
        if key is None:
            if rule.default is MISSING:
                continue
            value, kind, shown = rule.default, "default", rule.key
        else:
            value, kind, shown = data[key], "read", key
            seen.add(key)
        try:
            out = _as_dict(rule, value)
        except (ValueError, TypeError) as e:
            raise src.error(shown, str(e)) from None
        for dest, v in out.items():
            imp.set(dest, v, src, shown, default=kind == "default")
        imp.row(kind, shown, src, value=value, flags=tuple(out.items()), source=rule.source)
    rest = {}
    for key, value in data.items():
        if key in seen or key in skip or value is None:
            continue
        why = _lookup(unmodelled, key)
        if why and _off(value):  # the feature is off: nothing memledger leaves out
            imp.row("ignored", key, src, value=value, why=f"off ({why}: not modelled when on)")
            continue
        if why:
            imp.row("unmodelled", key, src, value=value, why=why)
            continue
        rest[key] = value
        imp.row("ignored", key, src, value=value,
                why=_lookup(ignored, key) or "not a key memledger maps: no per-GPU memory "
                                             "effect it models")
    return rest


def _off(value) -> bool:
    return value in (False, 0, "", "none", "no", "false", "False") or value == []


def _lookup(table: dict[str, str], key: str) -> str:
    """A table entry for the key itself or for a section it is in (`profiling.` covers
    `profiling.enable_memory_snapshot`)."""
    if key in table:
        return table[key]
    for k, why in table.items():
        if k.endswith(".") and key.startswith(k):
            return why
    return ""


# -- value converters: each raises ValueError with the valid range ----------------------------
def as_int(v, minimum: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"expected an integer >= {minimum}, got {v!r}")
    try:
        f = float(v)
    except ValueError:
        raise ValueError(f"expected an integer >= {minimum}, got {v!r}") from None
    if f != int(f) or f < minimum or f > 2**53:
        raise ValueError(f"expected an integer >= {minimum}, got {v!r}")
    return int(f)


def as_bool(v) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0", "yes", "no"):
        return v.lower() in ("true", "1", "yes")
    if v in (0, 1):
        return bool(v)
    raise ValueError(f"expected true or false, got {v!r}")


def fsdp_cpu_offload(v) -> dict:
    """An FSDP CPU-offload switch (torchtitan enable_cpu_offload, accelerate
    fsdp_offload_params): on, it moves parameters, gradients and the optimizer step together."""
    return {"param_offload": True, "optimizer_offload": True} if as_bool(v) else {}


def choice(v, table: dict):
    key = v if v in table or not isinstance(v, str) else v.lower()
    if key not in table:
        raise ValueError(f"unknown value {v!r}; valid: {', '.join(map(str, table))}")
    return table[key]
