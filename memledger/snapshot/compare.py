"""A measured snapshot beside the ledger's prediction of the same rank, row by row (pure).

The measured rows are the bytes alive at the snapshot's allocated peak, attributed by
`attribute.at_peak`; the predicted ones the ledger's rows of the chosen pipeline rank (the most
loaded one unless named), whose peak_allocated_bytes is the predicted peak. Reserved is
compared when the ledger has a reserved figure, else the measured value stands alone.
`explain` orders the rows by |measured − predicted|, biggest first, with the unattributed
remainder named as such.
"""
from __future__ import annotations

from memledger.ledger.items import ROWS
from memledger.snapshot.attribute import UNATTRIBUTED, at_peak
from memledger.snapshot.measure import Measured


def _rel(p: int, m: int) -> float | None:
    return None if not m else (p - m) / m


def compare(m: Measured, led, pp_rank: int | None = None) -> dict:
    rank = led.ranks[led.peak.pp_rank if pp_rank is None else pp_rank]
    rows = at_peak(m)
    measured_rows = {r: rows.get(r, 0) for r in (*ROWS, UNATTRIBUTED)}
    predicted_rows = {r: rank.rows[r] for r in ROWS}
    pred_reserved = getattr(rank, "peak_reserved_bytes", None)
    errors = {r: {"measured_bytes": measured_rows[r], "predicted_bytes": predicted_rows[r],
                  "difference_bytes": measured_rows[r] - predicted_rows[r],
                  "rel_error": _rel(predicted_rows[r], measured_rows[r])} for r in ROWS}
    errors["peak_allocated"] = {
        "measured_bytes": m.peak_allocated_bytes, "predicted_bytes": rank.peak_allocated_bytes,
        "difference_bytes": m.peak_allocated_bytes - rank.peak_allocated_bytes,
        "rel_error": _rel(rank.peak_allocated_bytes, m.peak_allocated_bytes)}
    return {"measured": {"device": m.device, "trace_entries": m.entries, "partial": m.partial,
                         "peak_allocated_bytes": m.peak_allocated_bytes,
                         "peak_reserved_bytes": m.peak_reserved_bytes,
                         "base_allocated_bytes": m.base_allocated_bytes, "rows": measured_rows},
            "predicted": {"pp_rank": rank.pp_rank, "rows": predicted_rows,
                          "peak_allocated_bytes": rank.peak_allocated_bytes,
                          "peak_total_bytes": rank.peak_total_bytes,
                          **({"peak_reserved_bytes": pred_reserved} if pred_reserved else {})},
            "errors": errors, "explain": explain(measured_rows, predicted_rows)}


def explain(measured: dict, predicted: dict) -> list[dict]:
    out = [{"row": r, "difference_bytes": measured.get(r, 0) - predicted.get(r, 0)}
           for r in (*ROWS, UNATTRIBUTED)]
    return sorted((x for x in out if x["difference_bytes"]),
                  key=lambda x: -abs(x["difference_bytes"]))
