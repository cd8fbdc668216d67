"""The Pipeline staircase page's charts: stacked rows per pipeline rank (activations on the
static rows), and the same for several schedules side by side on one y axis."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from memledger.ledger import Ledger
from memledger.ledger.items import ROW_LABELS, ROWS
from memledger.specs.hardware import Hardware
from memledger.units import gib
from memledger.views.peaks import peak_label
from memledger.views import safe_text
from memledger.views.figures import (GIB_AXIS, _capacity_note, _hline, _layout, capacity_label,
                                     describe, figure, house_layout, merge)
from memledger.views.palette import ROW_COLORS, ROW_SHORT


def _rank_traces(led: Ledger, showlegend: bool) -> list[dict]:
    ranks = led.ranks
    x = [r.pp_rank for r in ranks]
    extra = [[r.rows["activations"], _flight(r), _layers(r), gib(r.peak_total_bytes)]
             for r in ranks]
    return [dict(
        type="bar", x=x, y=[gib(r.rows[row]) for r in ranks], name=ROW_SHORT[row],
        legendgroup=row, showlegend=showlegend,
        marker=dict(color=ROW_COLORS[row], line=dict(width=0)), customdata=extra,
        hovertemplate=(f"<b>{ROW_LABELS[row]}</b>: %{{y:,.2f}} GiB<br>pp rank %{{x}} · total "
                       "%{customdata[3]:,.1f} GiB<br>%{customdata[1]}<br>%{customdata[2]}"
                       "<extra></extra>")) for row in ROWS]


def _flight(r) -> str:
    return "micro-batches in flight: " + ", ".join(f"stage {s}: {n}" for s, n in r.in_flight)


def _layers(r) -> str:
    if not r.layers:
        return "no transformer layers"
    return f"{len(r.layers)} layers ({r.layers[0]}–{r.layers[-1]})"


def staircase(led: Ledger, hw: Hardware) -> go.Figure:
    """Stacked rows per pipeline rank: seed 1's staircase of activations on the static rows."""
    cap, peak = gib(hw.hbm_bytes), led.peak
    notes = [dict(x=peak.pp_rank, xref="x", y=gib(peak.peak_total_bytes), yref="y",
                  yanchor="bottom", text=f"most loaded: {peak_label('total', peak.peak_total_bytes)}",
                  showarrow=True, arrowhead=2, ay=-28, font=dict(size=12)),
             _capacity_note(hw.name, hw.hbm_bytes)]
    title = f"{safe_text.plot(led.model.name)}: memory per pipeline rank, {led.parallel.schedule} schedule"
    ticks = [r.pp_rank for r in led.ranks] if led.parallel.pp <= 32 else None
    layout = merge(house_layout(title, describe(led), height=500, bottom=125), dict(
        shapes=[_hline(cap)], annotations=notes, margin=dict(r=90),
        yaxis=dict(title=dict(text=GIB_AXIS),
                   range=[0, max(cap, gib(peak.peak_total_bytes)) * 1.15]),
        xaxis=dict(title=dict(text="pipeline-parallel rank (0 = first stage)"), showgrid=False,
                   zeroline=False, tickmode="array" if ticks else "auto", tickvals=ticks)))
    return figure(_rank_traces(led, True), layout)


def staircase_compare(ledgers: dict[str, Ledger], hw: Hardware,
                      skipped: dict[str, str]) -> go.Figure:
    """The staircase of several schedules side by side on one y axis."""
    names = list(ledgers)
    fig = make_subplots(rows=1, cols=max(1, len(names)), shared_yaxes=True,
                        horizontal_spacing=0.03,
                        subplot_titles=[f"<b>{s}</b><br>"
                                        f"{gib(ledgers[s].peak.peak_total_bytes):,.1f} GiB"
                                        for s in names] or [""])
    for i, s in enumerate(names, start=1):
        for tr in _rank_traces(ledgers[s], showlegend=i == 1):
            fig.add_trace(tr, row=1, col=i)
        last = ledgers[s].parallel.pp - 1  # first and last rank only: panels sit close together
        fig.update_xaxes(showgrid=False, zeroline=False, row=1, col=i, tickfont=dict(size=11),
                         tickmode="array", tickvals=sorted({0, last}))
    fig.add_hline(y=gib(hw.hbm_bytes), line=_hline(0)["line"], row="all", col="all")
    first = next(iter(ledgers.values()), None)
    model = safe_text.plot(first.model.name) if first else ""
    note = (" · not valid here: " + ", ".join(skipped)) if skipped else ""
    sub = (describe(first, schedule=False) if first else "") + note
    _layout(fig, f"{model}: pipeline staircase by schedule", sub, height=510, bottom=135)
    fig.update_annotations(yshift=4, font=dict(size=13))  # the subplot titles: schedule, peak
    fig.add_annotation(x=0.5, xref="paper", y=0, yref="paper", yshift=-28, yanchor="top",
                       showarrow=False, text="pipeline-parallel rank, one panel per schedule")
    capacity_label(fig, hw.name, hw.hbm_bytes)
    peak = max((gib(x.peak.peak_total_bytes) for x in ledgers.values()), default=0)
    fig.update_yaxes(range=[0, max(peak, gib(hw.hbm_bytes)) * 1.12])
    fig.update_yaxes(title_text=GIB_AXIS, row=1, col=1)
    fig.update_layout(margin=dict(t=140))
    return fig
