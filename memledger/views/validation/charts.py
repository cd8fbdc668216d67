"""The Validation page's parity plot: predicted vs measured bytes, one marker per case and row.

Top panel: log–log, the line predicted = measured and the ±3% band (the activation accuracy bar)
around it. On log axes a 3% band is a hairline across four decades, so the bottom panel plots the
same markers' relative error in % (same x axis) with the ±3% band and the ±0.5% lines of the
static rows. Colours are the ledger's row colours (`palette.ROW_COLORS`, peak allocated in
`palette.PEAK_COLOR`); filled circles were measured on a GPU, open diamonds on the CPU. Reads the
frame of `validation_data.score`; converts nothing but units.
"""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from memledger.views.figures import _layout
from memledger.views.palette import GRID, INK, PEAK_COLOR, ROW_COLORS
from memledger.views.validation.data import ENVIRONMENTS, LABELS, ROW_ORDER

COLORS = {**ROW_COLORS, "peak_allocated": PEAK_COLOR}
MARKERS = {"cuda": dict(symbol="circle", size=9, line=dict(color="white", width=1)),
           "cpu": dict(symbol="diamond-open", size=10, line=dict(width=2))}
BAND_PCT, STATIC_BAR_PCT = 3.0, 0.5
BAND_FILL = "rgba(120,120,120,0.16)"
GIB_TITLE = "measured (GiB = 2³⁰ bytes, log scale)"


def parity_figure(df: pd.DataFrame, title: str, subtitle: str = "") -> go.Figure:
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.66, 0.34],
                        vertical_spacing=0.05)
    if not df.empty:
        lo = float(min(df["measured_gib"].min(), df["predicted_gib"].min())) / 1.6
        hi = float(max(df["measured_gib"].max(), df["predicted_gib"].max())) * 1.6
        _reference(fig, lo, hi)
        for row in ROW_ORDER:
            for env in ENVIRONMENTS:
                d = df[(df["row"] == row) & (df["measured_on"] == env)]
                if not d.empty:
                    _markers(fig, d, row, env)
        span = max(BAND_PCT * 1.25, float(df["error_pct"].abs().max()) * 1.2)
        fig.update_yaxes(range=[-span, span], row=2, col=1)
    # two legend entries per row (four overlapped on a phone): ~13 entries, 7 rows of ~20 px
    _layout(fig, title, subtitle, height=780, bottom=200)
    fig.update_layout(barmode=None, hovermode="closest")
    fig.update_xaxes(type="log", showgrid=True, gridcolor=GRID, dtick=1)  # one tick a decade
    fig.update_xaxes(title_text=GIB_TITLE, row=2, col=1)
    fig.update_yaxes(type="log", dtick=1, title_text="predicted (GiB, log scale)", row=1, col=1)
    fig.update_yaxes(title_text="error, %", zeroline=True, zerolinecolor="#BBBBBB", row=2, col=1)
    return fig


def _reference(fig: go.Figure, lo: float, hi: float) -> None:
    """The y = x line with its ±3% band (top) and the same band in % (bottom)."""
    f = 1 + BAND_PCT / 100
    fig.add_trace(go.Scatter(x=[lo, hi, hi, lo], y=[lo * f, hi * f, hi / f, lo / f],
                             fill="toself", fillcolor=BAND_FILL, line=dict(width=0),
                             name=f"±{BAND_PCT:g}% band", legendgroup="band", hoverinfo="skip",
                             mode="lines"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured",
                             line=dict(color=INK, width=1, dash="dot"), hoverinfo="skip"),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=[lo, hi, hi, lo], y=[BAND_PCT, BAND_PCT, -BAND_PCT, -BAND_PCT],
                             fill="toself", fillcolor=BAND_FILL, line=dict(width=0),
                             legendgroup="band", showlegend=False, hoverinfo="skip",
                             mode="lines"), row=2, col=1)
    for y in (STATIC_BAR_PCT, -STATIC_BAR_PCT):
        fig.add_trace(go.Scatter(x=[lo, hi], y=[y, y], mode="lines", hoverinfo="skip",
                                 line=dict(color="#888888", width=1, dash="dash"),
                                 name=f"±{STATIC_BAR_PCT:g}% (static rows' bar)",
                                 legendgroup="static", showlegend=y > 0), row=2, col=1)
    fig.update_xaxes(range=[math.log10(lo), math.log10(hi)])  # log axes take log10 ranges
    fig.update_yaxes(range=[math.log10(lo), math.log10(hi)], row=1, col=1)


def _markers(fig: go.Figure, d: pd.DataFrame, row: str, env: str) -> None:
    color = COLORS[row]
    marker = {**MARKERS[env], "color": color}
    if row == "weights":  # gradients have the same bytes in most cases: keep a ring visible
        marker["size"] = marker["size"] + 5
    if env == "cpu":
        marker["line"] = dict(color=color, width=2)
    name = f"{LABELS[row]} · {ENVIRONMENTS[env]}"
    extra = d[["case", "environment", "error_pct", "measured_bytes", "predicted_bytes"]]
    hover = ("<b>%{customdata[0]}</b><br>" + LABELS[row] + " · %{customdata[1]}<br>"
             "measured %{x:.4g} GiB (%{customdata[3]:,} B)<br>"
             "predicted %{customdata[5]:.4g} GiB (%{customdata[4]:,} B)<br>"
             "error %{customdata[2]:+.3f}%<extra></extra>")
    custom = extra.assign(p=d["predicted_gib"]).to_numpy(dtype=object)
    fig.add_trace(go.Scatter(x=d["measured_gib"], y=d["predicted_gib"], mode="markers",
                             marker=marker, name=name, legendgroup=name, customdata=custom,
                             hovertemplate=hover), row=1, col=1)
    fig.add_trace(go.Scatter(x=d["measured_gib"], y=d["error_pct"], mode="markers",
                             marker=marker, name=name, legendgroup=name, showlegend=False,
                             customdata=custom, hovertemplate=hover), row=2, col=1)
