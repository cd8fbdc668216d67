"""A `traced:<name>` activation profile made from a trace JSON (docs/design.md §5).

Per layer kind ("moe" when the layer saved any expert or router tensor, else "dense") the
heaviest traced layer of that kind is the inventory; outside the layers, the embedding's and
shared tensors (RoPE tables) go to the first stage, the rest to the last. Each storage becomes
an ActTensor in its traced dtype with values = ⌊elements / traced tokens⌋, so routed-expert
rows count per token at the traced top-k; a tensor whose last two dims are the traced sequence
length (eager attention's s×s) scales with `train.seq`. Splits follow the class (attention and
MLP tensors ÷tp, expert fc1/act ÷etp, indices, routed rows and norm outputs not split — DTensor
saves the gathered block input, as in the `hf` profile — the rest by SP), a guess for a model
traced on one device.
A fitted profile (`memledger trace`, per-token formulas at full size) is read by
memledger.trace.fitted; `register_traced` accepts both formats.
Ignores: tensors with fewer elements than tokens (per-layer constants: expert offsets, rng
state, the loss weight); the layer input under full recompute is m.hidden in the activation
format; no transients (a forward trace cannot see backward's working set).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from memledger.errors import SpecError
from memledger.ledger.activations.inventory import ActTensor
from memledger.ledger.activations.profiles.hf import SELECTIVE
from memledger.trace.records import _FMT, PARAM_COPY, SHARED, SavedTensor, Trace, split_of
from memledger.units import format_bytes


@dataclass(frozen=True)
class _Row:
    name: str
    cls: str
    elements: int  # in the traced batch
    fmt: str
    split: str
    seq_scaled: bool  # s×s: values grow with train.seq


def _row(x: SavedTensor, name: str, seq: int) -> _Row:
    fmt = _FMT.get(x.dtype, "uint8")  # unknown dtypes are sized in bytes
    elements = x.storage_bytes // format_bytes(fmt, 1)
    split = split_of(x.cls)
    seq_scaled = bool(seq) and len(x.shape) >= 2 and x.shape[-1] == x.shape[-2] == seq
    return _Row(name, x.cls, elements, fmt, split, seq_scaled)


def _rows(tensors, tokens: int, seq: int, strip_layer: bool) -> tuple[_Row, ...]:
    out = []
    for i, x in enumerate(tensors):
        if x.cls == PARAM_COPY or x.storage_bytes < tokens:  # constants, not per token
            continue
        mod = x.module.split(f"layers.{x.layer}.", 1)[-1] if strip_layer else (x.module or "model")
        out.append(_row(x, f"{mod}#{i}", seq))
    return tuple(out)


@dataclass(frozen=True)
class TracedProfile:
    name: str
    tokens: int
    seq: int
    kinds: dict  # kind -> tuple[_Row, ...]
    first: tuple
    last: tuple
    selective: frozenset = SELECTIVE

    @classmethod
    def from_trace(cls, trace: Trace, name: str) -> "TracedProfile":
        if trace.tokens <= 0:
            raise SpecError("profile", f"trace {name!r} records no token count")
        seq = int(trace.meta.get("seq") or 0)
        by_layer: dict[int, list[SavedTensor]] = {}
        for x in trace.activations:
            if x.layer is not None:
                by_layer.setdefault(x.layer, []).append(x)
        kinds: dict[str, tuple] = {}
        for _, xs in sorted(by_layer.items(), key=lambda kv: -sum(x.storage_bytes for x in kv[1])):
            kind = "moe" if any(x.cls.startswith("expert") or x.cls == "router" for x in xs) else "dense"
            kinds.setdefault(kind, _rows(xs, trace.tokens, seq, True))
        outside = [x for x in trace.activations if x.layer is None]
        first = [x for x in outside if x.cls in ("embedding", SHARED)]
        last = [x for x in outside if x.cls not in ("embedding", SHARED)]
        return cls(name, trace.tokens, seq, kinds, _rows(first, trace.tokens, seq, False),
                   _rows(last, trace.tokens, seq, False))

    def _tensors(self, rows, t) -> tuple[ActTensor, ...]:
        out = []
        for r in rows:
            n = r.elements * t.seq if r.seq_scaled else r.elements
            d = self.tokens * self.seq if r.seq_scaled else self.tokens
            out.append(ActTensor(r.name, r.cls, n // d, r.fmt, r.split))  # whole values per token
        return tuple(out)

    def layer(self, m, kind, t, p) -> tuple[ActTensor, ...]:
        if kind not in self.kinds:
            raise SpecError("profile", f"{self.name}: the trace has no {kind} layer "
                                       f"(traced kinds: {', '.join(sorted(self.kinds))})")
        return self._tensors(self.kinds[kind], t)

    def first_stage(self, m, t, p) -> tuple[ActTensor, ...]:
        return self._tensors(self.first, t)

    def last_stage(self, m, t, p) -> tuple[ActTensor, ...]:
        return self._tensors(self.last, t)

    def layer_input(self, m, t, p) -> ActTensor:
        return ActTensor("layer.input", "layer_input", m.hidden)

    def transients(self, m, t, p) -> tuple[ActTensor, ...]:
        return ()


def register_traced(path: str) -> str:
    """Read a trace JSON (Trace.to_json) or a fitted profile (`memledger trace --out`, see
    memledger.trace.fitted), register it as `traced:<file stem>`, return that name."""
    from memledger.ledger.activations import register
    from memledger.trace.fitted import FORMAT, FittedProfile
    f = Path(path)
    name = f"traced:{f.stem}"
    from memledger.safe_json import load_file
    try:
        doc = load_file(f, "profile")  # bounded in size and nesting before parsing
    except SpecError as e:
        raise SpecError("profile", f"cannot read trace {path!r}: {e.message}") from None
    text = json.dumps(doc)
    try:
        if isinstance(doc, dict) and doc.get("format") == FORMAT:
            profile = FittedProfile.from_doc(doc, name)
        else:
            profile = TracedProfile.from_trace(Trace.from_json(text), name)
    except OSError as e:
        raise SpecError("profile", f"cannot read trace {path!r}: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        if isinstance(e, SpecError):
            raise
        raise SpecError("profile", f"{path!r} is not a memledger trace JSON: {e}") from None
    register(name, profile)
    return name
