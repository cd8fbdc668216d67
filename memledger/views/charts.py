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


def _layout(fig: go.Figure, title: str, subtitle: str, height: int, bottom: int = 105) -> go.Figure:
    """House style. The legend sits at the bottom of the figure (container coordinates), below
    the x-axis title, so it never collides with it however the legend wraps."""
    fig.update_layout(
        title=dict(text=title, subtitle=dict(text=subtitle, font=dict(size=12, color="#555")),
                   x=0.01, xanchor="left", font=dict(size=17)),
        font=dict(family=FONT_FAMILY, color=INK, size=13), height=height, barmode="stack",
        plot_bgcolor="white", paper_bgcolor="white", margin=dict(l=70, r=30, t=86, b=bottom),
        legend=dict(orientation="h", yref="container", y=0.0, yanchor="bottom", x=0,
                    xanchor="left", traceorder="normal", font=dict(size=12)),
        hoverlabel=dict(font=dict(family=FONT_FAMILY)), bargap=0.35,
    )
    fig.update_xaxes(gridcolor=GRID, zerolinecolor=GRID)
    fig.update_yaxes(gridcolor=GRID, zerolinecolor=GRID)
    return fig


def capacity_label(fig: go.Figure, gpu_name: str, capacity_bytes: int) -> None:
    """The capacity line's label in the right margin, clear of any bar or total."""
    cap = gib(capacity_bytes)
    fig.add_annotation(x=1, xref="paper", xanchor="left", xshift=4, y=cap, showarrow=False,
                       align="left", text=f"{gpu_name}<br>{cap:.1f} GiB",
                       font=dict(color=CAPACITY_COLOR, size=12))
    fig.update_layout(margin=dict(r=90))


def ledger_bar(led: Ledger, hw: Hardware) -> go.Figure:
    """One horizontal stacked bar: the six rows of the most loaded rank, capacity as a line."""
    rank, verdict = led.peak, fit(led, hw)
    total, cap = gib(rank.peak_total_bytes), gib(hw.hbm_bytes)
    span = max(total, cap) * 1.1
    fig = go.Figure()
    for row in ROWS:
        v = gib(rank.rows[row])
        fig.add_bar(
            x=[v], y=[f"pp rank {rank.pp_rank}"], orientation="h", name=f"{ROW_SHORT[row]} {v:.1f} GiB",
            marker=dict(color=ROW_COLORS[row], line=dict(color="white", width=1)),
            text=[f"{v:.1f}" if v >= MIN_LABEL_SHARE * span else ""], textposition="inside",
            insidetextanchor="middle", textfont=dict(color="white", size=13), textangle=0,
            customdata=[[rank.rows[row]]],
            hovertemplate=f"<b>{ROW_LABELS[row]}</b><br>%{{x:.2f}} GiB (%{{customdata[0]:,}} bytes)"
                          "<extra></extra>")
    fig.add_vline(x=cap, line=dict(color=CAPACITY_COLOR, width=2, dash="dash"))
    fig.add_annotation(x=cap, y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                       text=f"{hw.name} capacity {cap:.1f} GiB", font=dict(color=CAPACITY_COLOR),
                       xanchor="right" if cap > 0.6 * span else "left")
    fig.add_annotation(x=total, y=0, showarrow=False, xanchor="left", xshift=6,
                       text=f"<b>{total:.1f} GiB</b>", font=dict(size=14))
    word = "fits" if verdict.fits else "does not fit"
    title = (f"{led.model.name} on {hw.name}: the most loaded GPU (pp rank {rank.pp_rank}) "
             f"needs {total:.1f} GiB: {word}")
    _layout(fig, title, describe(led), height=350, bottom=110)
    fig.update_layout(uniformtext=dict(minsize=11, mode="hide"))
    fig.update_xaxes(title_text=GIB_AXIS, range=[0, span])
    fig.update_yaxes(showticklabels=True, ticks="")
    return fig


def _rank_traces(led: Ledger, showlegend: bool) -> list[go.Bar]:
    ranks = led.ranks
    x = [r.pp_rank for r in ranks]
    extra = [[r.rows["activations"], _flight(r), _layers(r), gib(r.peak_total_bytes)] for r in ranks]
    out = []
    for row in ROWS:
        out.append(go.Bar(
            x=x, y=[gib(r.rows[row]) for r in ranks], name=ROW_SHORT[row], legendgroup=row,
            showlegend=showlegend, marker=dict(color=ROW_COLORS[row], line=dict(width=0)),
            customdata=extra,
            hovertemplate=(f"<b>{ROW_LABELS[row]}</b>: %{{y:.2f}} GiB<br>pp rank %{{x}} · total "
                           "%{customdata[3]:.1f} GiB<br>%{customdata[1]}<br>%{customdata[2]}"
                           "<extra></extra>")))
    return out


def _flight(r) -> str:
    return "micro-batches in flight: " + ", ".join(f"stage {s}: {n}" for s, n in r.in_flight)


def _layers(r) -> str:
    if not r.layers:
        return "no transformer layers"
    return f"{len(r.layers)} layers ({r.layers[0]}–{r.layers[-1]})"


def _capacity_line(fig: go.Figure, hw: Hardware, **where) -> None:
    fig.add_hline(y=gib(hw.hbm_bytes), line=dict(color=CAPACITY_COLOR, width=2, dash="dash"),
                  **where)


def staircase(led: Ledger, hw: Hardware) -> go.Figure:
    """Stacked rows per pipeline rank: seed 1's staircase of activations on the static rows."""
    fig = go.Figure(_rank_traces(led, True))
    _capacity_line(fig, hw)
    cap = gib(hw.hbm_bytes)
    peak = led.peak
    fig.add_annotation(x=peak.pp_rank, y=gib(peak.peak_total_bytes), yanchor="bottom",
                       text=f"most loaded: {gib(peak.peak_total_bytes):.1f} GiB", showarrow=True,
                       arrowhead=2, ay=-28, font=dict(size=12))
    title = f"{led.model.name}: memory per pipeline rank, {led.parallel.schedule} schedule"
    _layout(fig, title, describe(led), height=480)
    capacity_label(fig, hw.name, hw.hbm_bytes)
    top = max(cap, gib(peak.peak_total_bytes)) * 1.15
    fig.update_yaxes(title_text=GIB_AXIS, range=[0, top])
    fig.update_xaxes(title_text="pipeline-parallel rank (0 = first stage)", tickmode="array",
                     showgrid=False, zeroline=False,
                     tickvals=[r.pp_rank for r in led.ranks] if led.parallel.pp <= 32 else None)
    return fig


def staircase_compare(ledgers: dict[str, Ledger], hw: Hardware, skipped: dict[str, str]) -> go.Figure:
    """The staircase of several schedules side by side on one y axis."""
    names = list(ledgers)
    fig = make_subplots(rows=1, cols=max(1, len(names)), shared_yaxes=True,
                        horizontal_spacing=0.03,
                        subplot_titles=[f"{s}: peak {gib(ledgers[s].peak.peak_total_bytes):.1f} GiB"
                                        for s in names] or [""])
    for i, s in enumerate(names, start=1):
        for tr in _rank_traces(ledgers[s], showlegend=i == 1):
            fig.add_trace(tr, row=1, col=i)
        fig.update_xaxes(title_text="pp rank", showgrid=False, zeroline=False, row=1, col=i)
    _capacity_line(fig, hw, row="all", col="all")
    first = next(iter(ledgers.values()), None)
    model = first.model.name if first else ""
    note = (" · not valid here: " + ", ".join(skipped)) if skipped else ""
    sub = (describe(first, schedule=False) if first else "") + note
    _layout(fig, f"{model}: pipeline staircase by schedule", sub, height=490)
    fig.update_annotations(yshift=4, font=dict(size=13))  # the subplot titles
    capacity_label(fig, hw.name, hw.hbm_bytes)
    peak = max((gib(x.peak.peak_total_bytes) for x in ledgers.values()), default=0)
    fig.update_yaxes(range=[0, max(peak, gib(hw.hbm_bytes)) * 1.12])
    fig.update_yaxes(title_text=GIB_AXIS, row=1, col=1)
    fig.update_layout(margin=dict(t=118))
    return fig
