"""A measured snapshot beside the ledger's prediction for the same configuration, row by row.

Predicted rows are the chosen pipeline rank's ledger rows (default: the most loaded rank), with
the runtime row taken without the allocator slack and the CUDA context, which the caching
allocator's allocated bytes never contain; predicted reserved is peak allocated + slack.
Per row: measured − predicted in bytes and as a share of predicted; the rows that explain the
peak's difference are listed biggest |difference| first, "unattributed" among them. The
timeline overlay puts the measured live bytes and the ledger's step events on one phase axis
(forward, backward, optimizer), each phase stretched to the same width, since a trace's entries
and the ledger's events are not on a common clock.
Ignores: other pipeline ranks than the one compared; what the allocator does outside the trace.
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.ledger.items import ROWS
from memledger.snapshot.attribute import ATTRIBUTED_ROWS, UNATTRIBUTED, Attribution
from memledger.snapshot.measure import Measured

OUTSIDE_ALLOCATOR = ("allocator slack", "cuda context")
PHASE_OF_EVENT = {"forward": "forward", "loss-forward": "forward", "loss-backward": "backward",
                  "backward": "backward", "optimizer-step": "optimizer", "zero-grad": "optimizer"}
PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True, kw_only=True)
class Comparison:
    measured: Measured
    attribution: Attribution
    pp_rank: int
    predicted_rows: dict
    predicted_peak_allocated_bytes: int
    predicted_peak_reserved_bytes: int
    predicted_peak_total_bytes: int

    def errors(self) -> dict:
        out = {}
        for row in ATTRIBUTED_ROWS:
            meas, pred = self.attribution.rows[row], self.predicted_rows.get(row, 0)
            out[row] = {"measured_bytes": meas, "predicted_bytes": pred,
                        "difference_bytes": meas - pred,
                        "error_pct": None if not pred else round(100 * (meas - pred) / pred, 3)}
        for key, meas, pred in (("peak_allocated", self.measured.peak_allocated_bytes,
                                 self.predicted_peak_allocated_bytes),
                                ("peak_reserved", self.measured.peak_reserved_bytes,
                                 self.predicted_peak_reserved_bytes)):
            out[key] = {"measured_bytes": meas, "predicted_bytes": pred,
                        "difference_bytes": meas - pred,
                        "error_pct": None if not pred else round(100 * (meas - pred) / pred, 3)}
        return out

    def explaining(self) -> list[tuple[str, int]]:
        """(row, measured − predicted) for every row, biggest |difference| first."""
        e = self.errors()
        diffs = [(r, e[r]["difference_bytes"]) for r in ATTRIBUTED_ROWS]
        return sorted(diffs, key=lambda x: (-abs(x[1]), ATTRIBUTED_ROWS.index(x[0])))

    def to_dict(self) -> dict:
        m, a = self.measured, self.attribution
        return {
            "measured": {"peak_allocated_bytes": m.peak_allocated_bytes,
                         "peak_reserved_bytes": m.peak_reserved_bytes, "rows": dict(a.rows),
                         "partial": m.partial, "partial_reasons": list(m.partial_reasons),
                         "device": m.device, "trace_entries": m.n_entries,
                         "peak_entry": m.peak_index, "phase_at_peak": a.phase_at_peak,
                         "decided_by_phase_bytes": a.by_phase_bytes,
                         "allocations_at_peak": len(m.alive),
                         "details": [{"row": r, "detail": d, "bytes": b} for (r, d), b in
                                     sorted(a.details.items(), key=lambda x: -x[1])]},
            "predicted": {"pp_rank": self.pp_rank, "rows": dict(self.predicted_rows),
                          "peak_allocated_bytes": self.predicted_peak_allocated_bytes,
                          "peak_reserved_bytes": self.predicted_peak_reserved_bytes,
                          "peak_total_bytes": self.predicted_peak_total_bytes},
            "errors": self.errors(),
            "explaining": [{"row": r, "difference_bytes": d} for r, d in self.explaining()],
        }


def predicted_rows(rank) -> dict:
    """The rank's rows as the allocator sees them: runtime without slack and CUDA context."""
    rows = {r: rank.rows[r] for r in ROWS}
    rows["runtime"] -= sum(i.bytes for i in rank.items if i.row == "runtime"
                           and i.name in OUTSIDE_ALLOCATOR)
    rows[UNATTRIBUTED] = 0
    return rows


def compare(measured: Measured, attribution: Attribution, ledger, pp_rank: int | None = None) -> Comparison:
    r = ledger.most_loaded_rank if pp_rank is None else pp_rank
    rank = ledger.ranks[r]
    slack = sum(i.bytes for i in rank.items if i.row == "runtime" and i.name == "allocator slack")
    return Comparison(measured=measured, attribution=attribution, pp_rank=r,
                      predicted_rows=predicted_rows(rank),
                      predicted_peak_allocated_bytes=rank.peak_allocated_bytes,
                      predicted_peak_reserved_bytes=rank.peak_allocated_bytes + slack,
                      predicted_peak_total_bytes=rank.peak_total_bytes)


def measured_by_phase(measured: Measured, phase_codes) -> list[tuple[float, int]]:
    """(x, allocated bytes) per timeline point, x in [0, 3): forward [0, 1), backward [1, 2),
    optimizer [2, 3); points between steps or of unknown phase are left out."""
    pts = _peak_step([(k, b) for k, _, b, _ in measured.timeline if k >= 0], phase_codes,
                     measured.peak_index)
    names = {1: 0, 2: 1, 3: 2}
    spans: dict[int, list] = {}
    for k, b in pts:
        slot = names.get(int(phase_codes[k]))
        if slot is not None:
            spans.setdefault(slot, []).append((k, b))
    out = []
    for slot, xs in sorted(spans.items()):
        lo, hi = xs[0][0], xs[-1][0]
        out += [(slot + (k - lo) / max(hi - lo, 1), b) for k, b in xs]
    return sorted(out)


def _peak_step(pts, codes, peak: int):
    """The points of the step holding the peak: steps start where a forward follows an
    optimizer (or the trace's start)."""
    step, last, step_of = 0, 0, []
    for k, _ in pts:
        c = int(codes[k])
        if c == 1 and last == 3:
            step += 1
        last = c or last
        step_of.append(step)
    at = max((s for (k, _), s in zip(pts, step_of) if k <= peak), default=0)
    return [pt for pt, s in zip(pts, step_of) if s == at]


def predicted_by_phase(rank) -> list[tuple[float, int]]:
    """(x, live bytes) per ledger event on the same phase axis as measured_by_phase."""
    evs = rank.timeline
    static = rank.static_bytes
    slots: dict[int, list] = {}
    for e in evs:
        slots.setdefault(PHASES.index(PHASE_OF_EVENT[e.phase]), []).append(e.live(static))
    out = []
    for slot, xs in sorted(slots.items()):
        out += [(slot + i / max(len(xs) - 1, 1), b) for i, b in enumerate(xs)]
    return out
