"""A ModelSpec in a URL: `spec:` + URL-safe base64 of zlib-compressed JSON of its fields.

An imported Hugging Face config never reaches the server again: the share link carries the
resulting ModelSpec (~0.5 kB), so opening the link reproduces the model. Decoding is plain JSON
checked field by field against ModelSpec's annotations, then validated by the spec itself —
nothing is eval'ed or unpickled, and the decompressed size is capped.
"""
from __future__ import annotations

import base64
import binascii
import json
import typing
import zlib
from dataclasses import asdict, fields

from memledger.errors import SpecError
from memledger.specs.model import MLASpec, ModelSpec, MoESpec

PREFIX = "spec:"
MAX_JSON_BYTES = 16_384
MAX_TEXT = 512
NESTED = {MLASpec, MoESpec}


def encode_model(m: ModelSpec) -> str:
    text = json.dumps(asdict(m), separators=(",", ":"), sort_keys=True)
    packed = base64.urlsafe_b64encode(zlib.compress(text.encode(), 9)).decode().rstrip("=")
    return PREFIX + packed


def _unpack(text: str) -> dict:
    data = text[len(PREFIX):]
    damaged = SpecError("model", "the encoded model in the link is damaged")
    try:
        d = zlib.decompressobj()
        out = d.decompress(base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)), MAX_JSON_BYTES)
    except (binascii.Error, zlib.error, ValueError):
        raise damaged from None
    if d.unconsumed_tail:
        raise SpecError("model", f"encoded model is larger than {MAX_JSON_BYTES} bytes")
    if not d.eof:  # truncated: the checksum at the end of the stream is missing
        raise damaged
    try:
        obj = json.loads(out)
    except ValueError:  # includes UnicodeDecodeError
        raise damaged from None
    if not isinstance(obj, dict):
        raise SpecError("model", "the encoded model is not a JSON object")
    return obj


def _check(cls, name: str, value, hint):
    """Check one field's JSON value against its annotation; returns the Python value."""
    args = typing.get_args(hint)
    if type(None) in args:  # "MLASpec | None"
        if value is None:
            return None
        (hint,) = [a for a in args if a is not type(None)]
    if hint in NESTED:
        if not isinstance(value, dict):
            raise SpecError(name, f"expected an object, got {value!r}")
        return _build(hint, value)
    if typing.get_origin(hint) is tuple:
        ints = isinstance(value, list) and all(type(v) is int for v in value)
        if not ints or len(value) > 4096:
            raise SpecError(name, "expected a list of integers")
        return tuple(value)
    if hint is int and type(value) is not int:
        raise SpecError(name, f"expected an integer, got {value!r}")
    if hint is bool and type(value) is not bool:
        raise SpecError(name, f"expected true/false, got {value!r}")
    if hint is str and (not isinstance(value, str) or len(value) > MAX_TEXT):
        raise SpecError(name, f"expected a string of at most {MAX_TEXT} characters")
    return value


def _build(cls, obj: dict):
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(obj) - names)
    if unknown:
        raise SpecError("model", f"unknown {cls.__name__} fields: {', '.join(unknown)}")
    kw = {k: _check(cls, k, v, hints[k]) for k, v in obj.items()}
    try:
        return cls(**kw)
    except TypeError as e:  # a required field is missing
        raise SpecError("model", f"{cls.__name__}: {e}") from None


def decode_model(text: str) -> ModelSpec:
    """The ModelSpec a `spec:` link carries; raises SpecError naming what is wrong."""
    if not text.startswith(PREFIX):
        raise SpecError("model", f"expected a value starting with {PREFIX!r}")
    return _build(ModelSpec, _unpack(text))
