"""Ledger items and per-rank ledgers: the data every view and face reads.

An Item is one named line of a row with its exact bytes, a one-line formula and its source.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

ROWS = ("weights", "gradients", "optimizer", "activations", "communication", "runtime")
ROW_LABELS = {
    "weights": "Weights",
    "gradients": "Gradients",
    "optimizer": "Optimizer states",
    "activations": "Activations",
    "communication": "Communication buffers",
    "runtime": "Runtime & transients",
}


class Item(NamedTuple):
    """Immutable; a NamedTuple because a full ledger builds thousands of them."""

    row: str
    name: str
    bytes: int
    formula: str
    source: str = ""


@dataclass(frozen=True)
class RankLedger:
    pp_rank: int
    items: tuple[Item, ...]
    peak_allocated_bytes: int
    peak_total_bytes: int
    layers: tuple[int, ...] = ()
    in_flight: tuple[tuple[int, int], ...] = ()  # (stage, micro-batches held at the peak)
    rows: dict = field(default_factory=dict)
    moves: tuple = ()  # activations.policy.TensorMove per saved tensor: what each policy kept and paid
    transfers: tuple = ()  # levelling.Transfer in or out of this rank (remote offload)
    host: object = None  # static_moves.HostSide: static rows moved to host memory
    peak_event: object = None  # timeline.PeakEvent: where in the step the peak happens
    lazy_shape: object = field(default=None, repr=False, compare=False)  # timeline.Timeline
    # the Timeline the reserved replay walks when the events' own is discounted (torchtitan:
    # the FSDP layer units resharded at the loss, runtime.walk_discounted); None: lazy_shape
    replay_shape: object = field(default=None, repr=False, compare=False)
    fsdp_streams: bool = False  # FSDP's gather / reduce-scatter buffers on their own streams

    @property
    def peak_reserved_bytes(self) -> int | None:
        """The caching allocator's peak reserved over this rank's step, default allocator
        settings (memledger.ledger.reserved; replayed on each call, a few ms)."""
        if self.lazy_shape is None:
            return None
        from memledger.ledger.reserved import MAX_REPLAY_EVENTS, events, replay
        if events(self) > MAX_REPLAY_EVENTS:  # bounded work for any flag or link: not replayed
            return None

        return replay(self, fsdp=self.fsdp_streams).max_reserved

    @property
    def shape(self):
        """timeline_shape.RankShape: the per-layer quantities the timeline moves."""
        return self.lazy_shape.get() if self.lazy_shape is not None else None

    @property
    def timeline(self) -> list:
        """The step's events with the bytes alive at each (memledger.ledger.timeline.Timeline,
        built on first use)."""
        return self.lazy_shape.events() if self.lazy_shape is not None else []

    def timeline_json(self) -> dict | None:
        return self.lazy_shape.json() if self.lazy_shape is not None else None

    def row(self, name: str) -> int:
        return self.rows[name]

    def row_items(self, name: str) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.row == name)

    @property
    def static_bytes(self) -> int:
        return self.rows["weights"] + self.rows["gradients"] + self.rows["optimizer"]


def sum_rows(items) -> dict[str, int]:
    return add_rows(dict.fromkeys(ROWS, 0), items)


def add_rows(rows: dict[str, int], items) -> dict[str, int]:
    """A new per-row sum: `rows` (not changed) plus `items`."""
    rows = dict(rows)
    for i in items:
        rows[i.row] += i.bytes
    return rows
