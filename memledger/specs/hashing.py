"""Specs are used as cache keys on every ledger build; a frozen dataclass re-hashes all its
fields (recursively) on each lookup, which dominated the build time. `cache_hash` replaces the
generated __hash__ with one computed once per instance (same value semantics: equal specs hash
equal). Equality stays the dataclass's field-wise comparison."""
from __future__ import annotations

from dataclasses import fields


def _cached_hash(self) -> int:
    cached = self.__dict__.get("_cached_hash")
    if cached is None:
        cached = hash((type(self).__name__,) + tuple(getattr(self, f.name) for f in fields(self)))
        object.__setattr__(self, "_cached_hash", cached)
    return cached


def cache_hash(cls):
    cls.__hash__ = _cached_hash
    return cls
