"""The allocations alive at a snapshot's peak, attributed to the ledger's rows.

Each allocation's stack goes through the rule table (memledger.snapshot.rules; innermost
matching frame decides). Where the stack decides nothing — on CUDA the autograd engine runs
backward on its own thread, so with stacks="python" its allocations carry no frames — the
allocation's place in the step decides: an entry after the step's last forward-marked entry and
before the optimizer's first is in backward. A backward allocation (by phase or by the engine's
C++ frames) that is still allocated when the optimizer starts (or at the dump) is a gradient;
one freed inside backward is a backward transient (runtime row: activation gradients, the
layer's working set). What neither decides is "unattributed", reported as such, never forced.
Ignores: sub-row detail beyond the rule's label and the module kind of activations.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field

import numpy as np

from memledger.ledger.items import ROWS
from memledger.snapshot import rules as R
from memledger.snapshot.measure import Measured
from memledger.snapshot.reader import MAX_FRAMES, SnapshotError, frames_ok

UNATTRIBUTED = "unattributed"
ATTRIBUTED_ROWS = ROWS + (UNATTRIBUTED,)
_F, _B, _O, _NONE, _BARE = 1, 2, 3, 0, 4  # phase markers; _BARE: an allocation with no frames


@dataclass(frozen=True, kw_only=True)
class Attribution:
    rows: dict  # row → bytes alive at the peak (ATTRIBUTED_ROWS, every key present)
    details: dict  # (row, detail) → bytes
    counts: dict  # row → number of allocations
    phase_at_peak: str  # forward | backward | optimizer | between steps | unknown
    by_phase_bytes: int  # bytes decided by their place in the step rather than their frames
    phase_codes: object = field(default=None, repr=False, compare=False)  # per entry, _F.._O


class _Rules:
    """match() once per distinct stack: torch shares one dict per distinct frame, so a stack is
    the tuple of its frames' ids (the entries keep them alive). A stack is checked here, the
    first time it is seen (reader.frames_ok), not once per entry."""

    def __init__(self):
        self._cache: dict[tuple, R.Rule | None] = {}

    def __call__(self, frames) -> R.Rule | None:
        if not frames:
            return None
        key = tuple(map(id, frames))
        try:
            return self._cache[key]
        except KeyError:
            if not frames_ok(frames):
                raise SnapshotError("a trace entry's or block's frames are not a list of at most "
                                    f"{MAX_FRAMES} frames (dicts with 'filename', 'line', 'name')") from None
            rule = self._cache[key] = R.match(frames)
            return rule


def _marker(rule) -> int:
    if rule is None:
        return _NONE
    if rule.row == "activations":
        return _F
    if rule.row == "backward" or rule.detail.startswith("AccumulateGrad"):
        return _B
    if rule.row == "optimizer" or rule.detail.startswith("optimizer"):
        return _O
    return _NONE


def phases(entries, rule_of) -> np.ndarray:
    """Per entry: its phase (_F, _B, _O, or _NONE between steps / unknown)."""
    n = len(entries)
    # allocations mark the phases (a free's stack is where it was freed, often a later phase)
    mark = np.fromiter(((_marker(rule_of(e["frames"])) if e.get("frames") else _BARE)
                        if e["action"] == "alloc" else _NONE for e in entries), dtype=np.int8, count=n)
    bare = mark == _BARE
    mark[bare] = _NONE
    idx = np.arange(n)
    has = mark != _NONE
    prev_i = np.maximum.accumulate(np.where(has, idx, -1)) if n else idx
    next_i = (np.minimum.accumulate(np.where(has, idx, n)[::-1])[::-1]) if n else idx
    prev_m = np.where(prev_i >= 0, mark[np.clip(prev_i, 0, None)], _NONE) if n else mark
    next_m = np.where(next_i < n, mark[np.clip(next_i, None, n - 1)], _NONE) if n else mark
    out = mark.copy()
    # unmarked: inside a phase when both neighbours agree; after the last forward and before the
    # optimizer (or an engine frame) it is backward
    same = ~has & (prev_m == next_m)
    out[same] = prev_m[same]
    bwd = ~has & np.isin(prev_m, (_F, _B)) & np.isin(next_m, (_O, _B))
    out[bwd] = _B
    # with stacks="python" every forward allocation has Python frames (the main thread); one
    # with none after a forward is the autograd engine's thread: backward, even when the next
    # marker is the next micro-batch's forward (gradient accumulation)
    out[bare & np.isin(prev_m, (_F, _B))] = _B
    return out


def _backward_end(ph: np.ndarray) -> np.ndarray:
    """Per entry: the index of the first optimizer entry after it (len(ph) if none)."""
    n = len(ph)
    idx = np.where(ph == _O, np.arange(n), n)
    return np.minimum.accumulate(idx[::-1])[::-1] if n else idx


def attribute(m: Measured) -> Attribution:
    enabled = gc.isenabled()
    gc.disable()  # a key tuple per entry; the trace's million dicts need no cyclic rescans
    try:
        return _attribute(m)
    finally:
        if enabled:
            gc.enable()


def _attribute(m: Measured) -> Attribution:
    rule_of = _Rules()
    ph = phases(m.entries, rule_of)
    bwd_end = _backward_end(ph)
    rows = dict.fromkeys(ATTRIBUTED_ROWS, 0)
    counts = dict.fromkeys(ATTRIBUTED_ROWS, 0)
    details: dict = {}
    by_phase = 0
    for a in m.alive:
        rule = rule_of(a.frames) if a.frames else None
        in_bwd = a.alloc_index >= 0 and ph[a.alloc_index] == _B
        if rule is not None and rule.row != "backward":
            row = rule.row
            detail = f"activations: {R.kind(a.frames)}" if row == "activations" else rule.detail
        elif rule is not None or in_bwd:
            end = bwd_end[a.alloc_index] if a.alloc_index >= 0 else len(ph)
            kept = a.free_index < 0 or a.free_index >= end
            row = "gradients" if kept else "runtime"
            detail = ("backward: alive past the end of backward" if kept else
                      "backward transient: freed inside backward")
            by_phase += a.size_bytes if rule is None else 0
        else:
            row = UNATTRIBUTED
            detail = ("allocated before the trace, stack unknown" if a.alloc_index < 0
                      and not a.frames else "no frame matches a rule" if a.frames else
                      "no frames, outside backward")
        rows[row] += a.size_bytes
        counts[row] += 1
        details[(row, detail)] = details.get((row, detail), 0) + a.size_bytes
    p = m.peak_index
    names = {_F: "forward", _B: "backward", _O: "optimizer", _NONE: "between steps"}
    at = names[int(ph[p])] if 0 <= p < len(ph) else "unknown"
    return Attribution(rows=rows, details=details, counts=counts, phase_at_peak=at,
                       by_phase_bytes=by_phase, phase_codes=ph)
