"""Plotly figures of a ledger: the six rows of the most loaded rank, and the pipeline staircase.

Every chart states its configuration in the title, labels its axis in GiB (2^30 bytes), draws
the GPU's capacity as a line and uses `palette.ROW_COLORS`. Builders take a finished Ledger and
do no memory arithmetic beyond converting bytes to GiB for display.
"""
from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..items import ROW_LABELS, ROWS
from ..ledger import Ledger
from ..specs.hardware import Hardware
from ..units import gib
from . import safe_text
from .palette import CAPACITY_COLOR, FONT_FAMILY, GRID, INK, ROW_COLORS, ROW_SHORT

GIB_AXIS = "memory per GPU (GiB = 2³⁰ bytes)"
MIN_LABEL_SHARE = 0.045  # segments narrower than this share of the axis get no inside label


@dataclass(frozen=True)
class Fit:
    """The verdict for the most loaded rank against one GPU."""

    fits: bool
    rank: int
    peak_bytes: int
    capacity_bytes: int

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes

    def sentence(self, gpu_name: str) -> str:
        cap, diff = gib(self.capacity_bytes), gib(abs(self.headroom_bytes))
        if self.fits:
            return f"Fits: {diff:.1f} GiB free on {gpu_name} ({cap:.1f} GiB)"
        return f"Over by {diff:.1f} GiB on {gpu_name} ({cap:.1f} GiB)"


def fit(led: Ledger, hw: Hardware) -> Fit:
    peak = led.peak
    return Fit(peak.peak_total_bytes <= hw.hbm_bytes, peak.pp_rank, peak.peak_total_bytes,
               hw.hbm_bytes)


def describe(led: Ledger, schedule: bool = True) -> str:
    """The configuration in one line, as chart subtitles state it."""
    p, t = led.parallel, led.train
    vpp = f" · vpp {p.vpp}" if p.vpp > 1 else ""
    etp = f" · etp {p.etp}" if p.etp > 1 else ""
    sched = f" · {p.schedule}" if schedule else ""
    return (f"tp {p.tp} · pp {p.pp}{vpp if schedule else ''} · ep {p.ep}{etp} · cp {p.cp} · "
            f"dp {p.dp} · ZeRO-{p.zero}{sched} · micro-batch {t.micro_batch} × {t.seq:,} tokens"
            f" · {t.micro_batches} micro-batches/step · {t.precision}/{t.optimizer}"
            f" · recompute {t.recompute}")


def house_layout(title: str, subtitle: str, height: int, bottom: int = 105) -> dict:
    """House style. The legend sits at the bottom of the figure (container coordinates), below
    the x-axis title, so it never collides with it however the legend wraps."""
    axis = dict(gridcolor=GRID, zerolinecolor=GRID)
    return dict(
        title=dict(text=title, subtitle=dict(text=subtitle, font=dict(size=12, color="#555")),
                   x=0.01, xanchor="left", font=dict(size=17)),
        font=dict(family=FONT_FAMILY, color=INK, size=13), height=height, barmode="stack",
        plot_bgcolor="white", paper_bgcolor="white", margin=dict(l=70, r=30, t=86, b=bottom),
        legend=dict(orientation="h", yref="container", y=0.0, yanchor="bottom", xref="container",
                    x=0.01, xanchor="left", traceorder="normal", font=dict(size=12),
                    entrywidth=0.5, entrywidthmode="fraction"),  # two per row, any width
        hoverlabel=dict(font=dict(family=FONT_FAMILY)), bargap=0.35, xaxis=axis, yaxis=dict(axis),
    )


def _layout(fig: go.Figure, title: str, subtitle: str, height: int, bottom: int = 105) -> go.Figure:
    """Apply the house style to a figure built with plotly's helpers (subplots, seed charts)."""
    lay = house_layout(title, subtitle, height, bottom)
    axis = lay.pop("xaxis")
    lay.pop("yaxis")
    fig.update_layout(**lay)
    fig.update_xaxes(**axis)
    fig.update_yaxes(**axis)
    return fig


def merge(base: dict, extra: dict) -> dict:
    """Deep merge of plain layout dicts (extra wins)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure from plain dicts, skipping plotly's per-property validation: ~1 ms instead of
    ~30 ms on every slider move. The tests re-validate every builder's output."""
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def capacity_label(fig: go.Figure, gpu_name: str, capacity_bytes: int) -> None:
    """The capacity line's label in the right margin, clear of any bar or total."""
    fig.add_annotation(_capacity_note(gpu_name, capacity_bytes))
    fig.update_layout(margin=dict(r=90))


def _capacity_note(gpu_name: str, capacity_bytes: int) -> dict:
    cap = gib(capacity_bytes)
    return dict(x=1, xref="paper", xanchor="left", xshift=4, y=cap, yref="y", showarrow=False,
                align="left", text=f"{gpu_name}<br>{cap:.1f} GiB",
                font=dict(color=CAPACITY_COLOR, size=12))


def _hline(y: float, xref: str = "paper", yref: str = "y") -> dict:
    return dict(type="line", xref=xref, x0=0, x1=1, yref=yref, y0=y, y1=y,
                line=dict(color=CAPACITY_COLOR, width=2, dash="dash"))


def ledger_bar(led: Ledger, hw: Hardware) -> go.Figure:
    """One horizontal stacked bar: the six rows of the most loaded rank, capacity as a line."""
    rank, verdict = led.peak, fit(led, hw)
    total, cap = gib(rank.peak_total_bytes), gib(hw.hbm_bytes)
    span = max(total, cap) * 1.16  # room for the total written after the bar
    data = []
    for row in ROWS:
        v = gib(rank.rows[row])
        data.append(dict(
            type="bar", x=[v], y=[f"pp rank {rank.pp_rank}"], orientation="h",
            name=f"{ROW_SHORT[row]} {v:.1f} GiB",
            marker=dict(color=ROW_COLORS[row], line=dict(color="white", width=1)),
            text=[f"{v:.1f}" if v >= MIN_LABEL_SHARE * span else ""], textposition="inside",
            insidetextanchor="middle", textfont=dict(color="white", size=13), textangle=0,
            customdata=[[rank.rows[row]]],
            hovertemplate=f"<b>{ROW_LABELS[row]}</b><br>%{{x:.2f}} GiB (%{{customdata[0]:,}} bytes)"
                          "<extra></extra>"))
    word = "fits" if verdict.fits else "does not fit"
    title = (f"{safe_text.plot(led.model.name)} on {hw.name}: the most loaded GPU (pp rank {rank.pp_rank}) "
             f"needs {total:.1f} GiB: {word}")
    shapes = [dict(type="line", xref="x", x0=cap, x1=cap, yref="paper", y0=0, y1=1,
                   line=dict(color=CAPACITY_COLOR, width=2, dash="dash"))]
    notes = [dict(x=cap, xref="x", y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                  text=f"{hw.name} capacity {cap:.1f} GiB", font=dict(color=CAPACITY_COLOR),
                  xanchor="right" if cap > 0.6 * span else "left"),
             dict(x=total, xref="x", y=0, yref="y", showarrow=False, xanchor="left", xshift=6,
                  text=f"<b>{total:.1f} GiB</b>", font=dict(size=14))]
    layout = merge(house_layout(title, describe(led), height=370, bottom=130), dict(
        uniformtext=dict(minsize=11, mode="hide"), shapes=shapes, annotations=notes,
        xaxis=dict(title=dict(text=GIB_AXIS), range=[0, span]),
        yaxis=dict(showticklabels=True, ticks="")))
    return figure(data, layout)


def _rank_traces(led: Ledger, showlegend: bool) -> list[dict]:
    ranks = led.ranks
    x = [r.pp_rank for r in ranks]
    extra = [[r.rows["activations"], _flight(r), _layers(r), gib(r.peak_total_bytes)]
             for r in ranks]
    return [dict(
        type="bar", x=x, y=[gib(r.rows[row]) for r in ranks], name=ROW_SHORT[row],
        legendgroup=row, showlegend=showlegend,
        marker=dict(color=ROW_COLORS[row], line=dict(width=0)), customdata=extra,
        hovertemplate=(f"<b>{ROW_LABELS[row]}</b>: %{{y:.2f}} GiB<br>pp rank %{{x}} · total "
                       "%{customdata[3]:.1f} GiB<br>%{customdata[1]}<br>%{customdata[2]}"
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
                  yanchor="bottom", text=f"most loaded: {gib(peak.peak_total_bytes):.1f} GiB",
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
                                        f"{gib(ledgers[s].peak.peak_total_bytes):.1f} GiB"
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
