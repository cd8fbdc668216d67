"""A fitted traced profile: per-token byte formulas for one model at full size, written by
`memledger trace` as JSON and read back as a `traced:<file>` activation profile.

The document (FORMAT) holds, per layer kind, the tensors of the heaviest traced layer of that
kind, and outside the layers the embedding's and shared tensors (first stage) and the rest
(last stage); each tensor with its fitted bytes per token, per token per seq (s×s terms) and
per micro-batch constant at full width (memledger.trace.fit), as JSON integers, or "n/d"
strings where a coefficient is not whole. The residual of the check trace rides along.
As a profile: values per token = ⌈(bytes_per_token + bytes_per_token_seq·seq) / dtype size⌉;
routed-expert rows (tensors under an `experts` module, expert and router classes) count per
token-expert row when top-k is known (so EP/ETP sharding applies); splits follow the class as
in memledger.trace.profile. Constants are dropped (per micro-batch, not per token); the layer
input under full recompute is m.hidden in the activation format; no transients.
Fitted at the traced micro-batch: tensors shared by a micro-batch's sequences (RoPE tables)
are per token of that micro-batch size.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction as F

from memledger.errors import SpecError
from memledger.ledger.activations.inventory import ActTensor
from memledger.ledger.activations.profiles.hf import SELECTIVE
from memledger.trace.fit import Point, Row
from memledger.trace.records import _FMT, SHARED, split_of
from memledger.units import format_bytes

FORMAT = "memledger-fitted-profile/1"
_ROUTED = ("expert_in", "expert_fc1", "expert_act", "expert_out", "expert_idx", "router")


def num(x: F):
    """A JSON number for an exact coefficient: int when whole, else "n/d"."""
    x = F(x)
    return x.numerator if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def parse_num(v, where: str) -> F:
    if isinstance(v, int) and not isinstance(v, bool):
        return F(v)
    if isinstance(v, str):
        try:
            return F(v)
        except (ValueError, ZeroDivisionError):
            pass
    raise SpecError("profile", f"{where}: expected an integer or 'n/d', got {v!r}")


def _routed(r: Row, top_k: int | None) -> bool:
    in_experts = "experts" in r.module.lower() and "shared" not in r.module.lower()
    a = r.full("T")
    return bool(top_k) and in_experts and r.cls in _ROUTED and a > 0 and a % top_k == 0


def _row_doc(r: Row, top_k: int | None) -> dict:
    return {"name": r.name, "cls": r.cls, "dtype": r.dtype, "shape": r.shape,
            "per": "routed" if _routed(r, top_k) else "token",
            "bytes_per_token": num(r.full("T")), "bytes_per_token_seq": num(r.full("Ts")),
            "bytes_const": num(r.full("1"))}


def profile_doc(rows: list[Row], kinds: dict[int, str], ref: Point, *, top_k: int | None,
                meta: dict, residual: dict) -> dict:
    """The JSON document; `kinds` maps traced layer index -> "dense" / "moe", `ref` is the
    size at which the heaviest layer of each kind is picked."""
    per_layer: dict[int, list[Row]] = {}
    for r in rows:
        if r.layer is not None:
            per_layer.setdefault(r.layer, []).append(r)

    def weight(i):
        return sum(r.bytes_at(ref.seq, ref.width, ref.batch) for r in per_layer[i])
    kind_doc = {}
    for i in sorted(per_layer, key=lambda i: (-weight(i), i)):
        kind = kinds.get(i, "dense")
        if kind not in kind_doc:
            kind_doc[kind] = {"layer": i, "tensors": [_row_doc(r, top_k) for r in per_layer[i]]}
    outside = [r for r in rows if r.layer is None]
    first = [r for r in outside if r.cls in ("embedding", SHARED)]
    last = [r for r in outside if r.cls not in ("embedding", SHARED)]
    return {"format": FORMAT, "meta": meta, "top_k": top_k,
            "layer_kinds": {str(i): kinds.get(i, "dense") for i in sorted(per_layer)},
            "kinds": kind_doc, "first": [_row_doc(r, top_k) for r in first],
            "last": [_row_doc(r, top_k) for r in last], "residual": residual}


@dataclass(frozen=True)
class _Tensor:
    name: str
    cls: str
    fmt: str
    split: str
    per: str
    per_token: F  # bytes
    per_token_seq: F  # bytes

    def act(self, seq: int, top_k: int) -> ActTensor:
        size = format_bytes(self.fmt, 1)
        rows = top_k if self.per == "routed" else 1
        v = (self.per_token + self.per_token_seq * seq) / (size * rows)
        return ActTensor(self.name, self.cls, -(-v.numerator // v.denominator), self.fmt,
                         self.split, self.per)


def _tensors(rows: list, where: str) -> tuple[_Tensor, ...]:
    out = []
    for i, d in enumerate(rows):
        at = f"{where}[{i}]"
        try:
            a, q = parse_num(d["bytes_per_token"], at), parse_num(d["bytes_per_token_seq"], at)
            name, cls, dtype, per = d["name"], d["cls"], d["dtype"], d.get("per", "token")
        except (KeyError, TypeError) as e:
            raise SpecError("profile", f"{at}: missing field {e}") from None
        split = split_of(cls)
        if per == "routed" and split == "sp":
            split = "none"  # routed rows are already counted after the SP split
        if a or q:  # constants are per micro-batch, not per token
            out.append(_Tensor(name, cls, _FMT.get(dtype, "uint8"), split, per, a, q))
    return tuple(out)


@dataclass(frozen=True)
class FittedProfile:
    name: str
    kinds: dict  # kind -> tuple[_Tensor, ...]
    first: tuple
    last: tuple
    top_k: int
    model: dict  # dims the profile was fitted for ({} when unknown: a user module)
    selective: frozenset = SELECTIVE

    @classmethod
    def from_doc(cls, d: dict, name: str) -> "FittedProfile":
        if not isinstance(d.get("kinds"), dict) or not d["kinds"]:
            raise SpecError("profile", f"{name}: the fitted profile has no layer kinds")
        kinds = {k: _tensors(v.get("tensors", []), f"kinds.{k}") for k, v in d["kinds"].items()}
        model = (d.get("meta") or {}).get("model") or {}
        return cls(name, kinds, _tensors(d.get("first", []), "first"),
                   _tensors(d.get("last", []), "last"), int(d.get("top_k") or 1), model)

    def _check(self, m) -> None:
        for field, have in (("hidden", m.hidden), ("vocab", m.vocab)):
            want = self.model.get(field)
            if want is not None and want != have:
                raise SpecError("profile", f"{self.name} was fitted for {field}={want}, the "
                                           f"model has {field}={have}: trace that model")

    def layer(self, m, kind, t, p) -> tuple[ActTensor, ...]:
        self._check(m)
        if kind not in self.kinds:
            raise SpecError("profile", f"{self.name}: the trace has no {kind} layer "
                                       f"(traced kinds: {', '.join(sorted(self.kinds))})")
        return tuple(x.act(t.seq, self.top_k) for x in self.kinds[kind])

    def first_stage(self, m, t, p) -> tuple[ActTensor, ...]:
        return tuple(x.act(t.seq, self.top_k) for x in self.first)

    def last_stage(self, m, t, p) -> tuple[ActTensor, ...]:
        return tuple(x.act(t.seq, self.top_k) for x in self.last)

    def layer_input(self, m, t, p) -> ActTensor:
        return ActTensor("layer.input", "layer_input", m.hidden)

    def transients(self, m, t, p) -> tuple[ActTensor, ...]:
        return ()
