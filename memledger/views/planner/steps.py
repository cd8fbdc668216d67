"""The Planner page's step-time views: predicted throughput columns, each row's reason for its
rank, and the breakdown of one configuration's step as a stacked bar (terms of
`memledger.costs.stepmodel`, computed by `memledger.planner.time.throughput`)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from memledger.planner import Plan
from memledger.planner.answer.breakdown import annotate, breakdown
from memledger.planner.time.throughput import LABELS, throughput
from memledger.views.palette import FONT_FAMILY, GRID, INK, TERM_COLORS

WHY_ROWS = 20  # rows that get a reason (one single-configuration search each)


def throughput_columns(result: Plan, table: pd.DataFrame, rows: list[dict]) -> pd.DataFrame:
    """The table (one line per row of `rows`, the Plan rows it shows) with tokens/s, TFLOP/s
    per GPU and MFU from each row's exact step time, and `why` for its first WHY_ROWS rows."""
    tps, tflops, mfu = throughput(result.spec, [r["seconds"] for r in rows],
                                  [r["world"] for r in rows])
    why = [r["why"] for r in annotate(result.spec, rows[:WHY_ROWS])]
    why += [""] * (len(table) - len(why))
    out = table.copy()
    out.insert(1, "tokens/s", tps.round())
    out.insert(2, "TFLOP/s per GPU", tflops.round(1))
    out.insert(3, "MFU %", mfu.round(1))
    out["why it ranks here"] = why
    return out


def breakdown_chart(result: Plan, row: dict) -> go.Figure:
    """One horizontal bar: the configuration's step split into its terms, seconds; each term in
    its fixed colour (palette.TERM_COLORS), the legend below the axis title."""
    parts = breakdown(result.spec, row)
    fig = go.Figure()
    for k, v in parts.items():
        if v > 0:
            fig.add_trace(go.Bar(y=[""], x=[v], name=LABELS[k], orientation="h",
                                 marker_color=TERM_COLORS[k],
                                 hovertemplate=f"{LABELS[k]}: %{{x:,.3f}} s<extra></extra>"))
    fig.update_layout(barmode="stack", height=300, margin=dict(l=10, r=10, t=40, b=110),
                      title=f"Step breakdown: {row['seconds']:,.2f} s predicted",
                      font=dict(family=FONT_FAMILY, color=INK), plot_bgcolor="white",
                      xaxis=dict(title="seconds per step", gridcolor=GRID),
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom",
                                  xref="container", x=0.01, xanchor="left"),
                      yaxis=dict(showticklabels=False))
    return fig
