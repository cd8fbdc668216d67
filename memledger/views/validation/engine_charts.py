"""Charts of the engine validation (`memledger validate --engine torch`): per-rank parity,
the measured pipeline staircase over the predicted one, and PyTorch's FSDPMemTracker next to
memledger and the measured run. Builders take the records of `memledger.engine.compare`
(predictions re-derived by the current ledger) and convert nothing but units (MiB = 2²⁰ B).
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from memledger.views.figures import _layout, wrap
from memledger.views.palette import INK, PEAK_COLOR, ROW_COLORS

ROWS = ("weights", "gradients", "optimizer", "activations", "peak_allocated")
LABELS = {"weights": "Weights", "gradients": "Gradients", "optimizer": "Optimizer states",
          "activations": "Activations", "peak_allocated": "Peak allocated"}
COLORS = {**ROW_COLORS, "peak_allocated": PEAK_COLOR}
MIB = 2 ** 20
TRACKER_COLORS = {"measured": INK, "memledger": "#1F77B4", "FSDPMemTracker": "#D62728"}


def rank_parity_figure(records: list[dict], case: str) -> go.Figure:
    """One panel per row: predicted (line) and measured (open markers) bytes on every rank."""
    recs = [r for r in records if r["case"] == case and r["row"] in ROWS]
    rows = [row for row in ROWS if any(r["row"] == row for r in recs)]
    # room between panels for each title and its rank ticks (titles sat on the panel above)
    fig = make_subplots(rows=max(len(rows), 1), cols=1, shared_xaxes=True,
                        vertical_spacing=min(0.12, 0.5 / max(len(rows), 1)),
                        subplot_titles=[LABELS[r] for r in rows])
    for i, row in enumerate(rows, start=1):
        d = sorted((r for r in recs if r["row"] == row), key=lambda r: r["rank"])
        x = [r["rank"] for r in d]
        fig.add_trace(go.Scatter(x=x, y=[r["predicted_bytes"] / MIB for r in d], mode="lines+markers",
                                 name="memledger (line)", legendgroup="predicted",
                                 showlegend=i == 1,  # the panel titles name the rows
                                 line=dict(color=COLORS[row], width=2)), row=i, col=1)
        fig.add_trace(go.Scatter(x=x, y=[r["measured_bytes"] / MIB for r in d], mode="markers",
                                 name="measured (open diamonds)", legendgroup="measured",
                                 showlegend=i == 1,
                                 marker=dict(color=COLORS[row], symbol="diamond-open", size=11,
                                             line=dict(width=2)),
                                 customdata=[100 * r["rel_error"] for r in d],
                                 hovertemplate="rank %{x}: %{y:.3f} MiB measured, "
                                               "error %{customdata:+.2f}%<extra></extra>"),
                      row=i, col=1)
        # from zero on every panel: heights compare as fractions of the row, so a 0.001 %
        # difference between ranks looks like one (an autoscaled axis made it look like 3 %)
        fig.update_yaxes(title_text="MiB", rangemode="tozero", row=i, col=1)
    _layout(fig, f"Per rank: {case}", "line: memledger (re-derived now) · open diamonds: "
            "measured · every panel from 0 MiB", height=200 * max(len(rows), 1) + 140, bottom=90)
    fig.update_xaxes(dtick=1, showticklabels=True, tickprefix="rank ")  # every panel
    return fig


def staircase_figure(records: list[dict], case: str) -> go.Figure:
    """Micro-batches each pipeline rank holds at its first backward: measured bars, predicted
    markers (1F1B: min(P - r, m))."""
    held = sorted((r for r in records if r["case"] == case and r["row"] == "held"),
                  key=lambda r: r["pp_rank"])
    by_pp: dict[int, dict] = {}
    for r in held:
        by_pp.setdefault(r["pp_rank"], r)
    x = list(by_pp)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=x, y=[by_pp[k]["measured_bytes"] for k in x], name="measured",
                         marker_color=ROW_COLORS["activations"], opacity=0.75))
    fig.add_trace(go.Scatter(x=x, y=[by_pp[k]["predicted_bytes"] for k in x], name="memledger",
                             mode="lines+markers", line=dict(color=INK, dash="dot"),
                             marker=dict(size=10, symbol="x")))
    _layout(fig, f"Pipeline staircase: {case}",
            "micro-batches held at each rank's first backward (all its chunks)", height=360,
            bottom=80)
    fig.update_xaxes(title_text="pipeline rank", dtick=1)
    fig.update_yaxes(title_text="micro-batches", dtick=1)
    return fig


def trackers_figure(rows: list[dict]) -> go.Figure:
    """Peak per FSDP case: the measured run, memledger, and FSDPMemTracker's own estimate.
    Horizontal bars: the case names read on a phone (as columns, seven wrapped names ran into
    each other)."""
    fig = go.Figure()
    names = ["<br>".join(wrap(r["case"], 22)) for r in rows]
    for key, label in (("measured_bytes", "measured"), ("memledger_bytes", "memledger"),
                       ("fsdpmemtracker_bytes", "FSDPMemTracker")):
        fig.add_trace(go.Bar(y=names, x=[r[key] / MIB for r in rows], name=label,
                             orientation="h", marker_color=TRACKER_COLORS[label]))
    _layout(fig, "Peak per FSDP2 case: measured vs memledger vs FSDPMemTracker",
            "FSDPMemTracker: PyTorch's own estimate (what a torchtitan user runs), same step",
            height=140 + 70 * max(len(rows), 1), bottom=110)
    fig.update_layout(barmode="group")
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=11), automargin=True)
    fig.update_xaxes(title_text="peak, MiB (log scale)", type="log")
    return fig


def rows_figure(records: list[dict], case: str, engine: str = "torchtitan",
                title: str = "") -> go.Figure:
    """One case on one rank: predicted and measured bytes per row, side by side (GiB)."""
    recs = [r for r in records if r["case"] == case and r["row"] in ROWS]
    names = [LABELS[r["row"]].replace(" ", "<br>", 1) for r in recs]  # two lines: fits a phone
    fig = go.Figure()
    fig.add_trace(go.Bar(x=names, y=[r["predicted_bytes"] / 2 ** 30 for r in recs],
                         name="memledger (predicted)", marker_color="#1F77B4"))
    fig.add_trace(go.Bar(x=names, y=[r["measured_bytes"] / 2 ** 30 for r in recs],
                         name=f"{engine} (measured)", marker_color=INK,
                         customdata=[100 * r["rel_error"] for r in recs],
                         hovertemplate="%{x}: %{y:.3f} GiB measured, memledger "
                                       "%{customdata:+.2f}%<extra></extra>"))
    _layout(fig, title or f"{engine} at scale: {case}", "rank 0 · blue: memledger (re-derived "
            f"now) · black: {engine}'s code, measured", 420)
    fig.update_layout(barmode="group", yaxis_title="GiB (2³⁰ bytes)")
    return fig
