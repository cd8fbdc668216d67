"""Charts of a measured snapshot beside the prediction (memledger.snapshot.compare).

rows_figure: per ledger row, measured (at the snapshot's peak) and predicted bytes side by side,
"unattributed" last, peak allocated and reserved as markers. timeline_figure: the measured live
bytes of the step holding the peak and the ledger's step events on one phase axis (forward,
backward, optimizer, each one unit wide). Units only: GiB = 2³⁰ bytes.
"""
from __future__ import annotations

import plotly.graph_objects as go

from memledger.snapshot.attribute import ATTRIBUTED_ROWS, UNATTRIBUTED
from memledger.snapshot.compare import PHASES, measured_by_phase, predicted_by_phase
from memledger.units import gib
from memledger.views.figures import GIB_AXIS, house_layout
from memledger.views.palette import PEAK_COLOR, ROW_COLORS, ROW_SHORT

UNATTRIBUTED_COLOR = "#9E9E9E"
PREDICTED_COLOR = "#0072B2"


def _label(row: str) -> str:
    return "Unattributed" if row == UNATTRIBUTED else ROW_SHORT[row]


def rows_figure(cmp, title: str = "Your run: measured at the peak vs predicted, row by row") -> go.Figure:
    m = cmp.measured
    names = [_label(r) for r in ATTRIBUTED_ROWS]
    colors = [ROW_COLORS.get(r, UNATTRIBUTED_COLOR) for r in ATTRIBUTED_ROWS]
    sub = (f"measured: {m.n_entries:,} trace entries, peak {gib(m.peak_allocated_bytes):.2f} GiB "
           f"allocated ({cmp.attribution.phase_at_peak}); predicted: pp rank {cmp.pp_rank}, "
           f"{gib(cmp.predicted_peak_allocated_bytes):.2f} GiB"
           + (" · PARTIAL trace" if m.partial else ""))
    lay = house_layout(title, sub, 460)
    lay.update(barmode="group", yaxis=dict(lay["yaxis"], title=GIB_AXIS))
    fig = go.Figure(layout=lay)
    fig.add_bar(name="measured", x=names, y=[gib(cmp.attribution.rows[r]) for r in ATTRIBUTED_ROWS],
                marker=dict(color=colors), hovertemplate="%{x}: %{y:.3f} GiB measured<extra></extra>")
    fig.add_bar(name="predicted", x=names, y=[gib(cmp.predicted_rows[r]) for r in ATTRIBUTED_ROWS],
                marker=dict(color="white", line=dict(color=colors, width=2)),
                hovertemplate="%{x}: %{y:.3f} GiB predicted<extra></extra>")
    return fig


def timeline_figure(cmp, rank, title: str = "Your run: live bytes by phase, measured vs predicted") -> go.Figure:
    meas = measured_by_phase(cmp.measured, cmp.attribution.phase_codes)
    pred = predicted_by_phase(rank)
    lay = house_layout(title, "each phase stretched to one unit: a trace's entries and the "
                       "ledger's events share no clock", 440)
    lay.update(yaxis=dict(lay["yaxis"], title=GIB_AXIS),
               xaxis=dict(lay["xaxis"], tickvals=[0.5, 1.5, 2.5], ticktext=list(PHASES),
                          range=[0, 3]))
    fig = go.Figure(layout=lay)
    fig.add_scatter(name="measured (allocated)", x=[x for x, _ in meas], y=[gib(b) for _, b in meas],
                    mode="lines", line=dict(color=PEAK_COLOR, width=2))
    fig.add_scatter(name=f"predicted (pp rank {cmp.pp_rank})", x=[x for x, _ in pred],
                    y=[gib(b) for _, b in pred], mode="lines+markers",
                    line=dict(color=PREDICTED_COLOR, width=2, dash="dot"), marker=dict(size=4))
    for x in (1, 2):
        fig.add_vline(x=x, line=dict(color="#BBBBBB", width=1))
    return fig
