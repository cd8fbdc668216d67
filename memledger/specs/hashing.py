"""Specs are used as cache keys on every ledger build; a frozen dataclass re-hashes all its
fields (recursively) on each lookup, which dominated the build time. `cache_hash` replaces the
generated __hash__ with one computed once per instance (same value semantics: equal specs hash
equal). The cache lives outside the instance — keyed by id, dropped when the instance dies — so
`vars(spec)` still holds exactly the fields."""
from __future__ import annotations

import weakref
from dataclasses import fields

_HASHES: dict[int, int] = {}


def _cached_hash(self) -> int:
    try:  # every cache lookup with a spec argument lands here: the hit path first
        return _HASHES[id(self)]
    except KeyError:
        pass
    key = id(self)
    cached = hash((type(self).__name__,) + tuple(getattr(self, f.name) for f in fields(self)))
    _HASHES[key] = cached
    weakref.finalize(self, _HASHES.pop, key, None)
    return cached


def cache_hash(cls):
    cls.__hash__ = _cached_hash
    return cls
