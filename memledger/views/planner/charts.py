"""Views of a Plan: the time-vs-peak scatter with the capacity line, the top-K table, and the
query string that opens one configuration on the Ledger page.

Only views live here (plotly for the chart, pandas for the table); every number comes from
`memledger.planner.Plan`. GiB = 2^30 bytes, labelled on every axis and column.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from memledger.planner import Plan
from memledger.planner.spec import PLAN_RECOMPUTE
from memledger.units import GIB
from memledger.views import safe_text
from memledger.views.figures import title_block
from memledger.views.palette import (CAPACITY_COLOR, FONT_FAMILY, GRID, INK, OPTIMUM_COLOR,
                                     RECOMPUTE_COLORS)

# The share-link keys the dashboard reads (memledger.views.state.KEYS on branch dashboard).
LEDGER_KEYS = ("model", "gpu", "world", "tp", "pp", "vpp", "ep", "etp", "cp", "dp", "zero", "sp",
               "schedule", "layout", "mb", "seq", "m", "precision", "optimizer", "profile",
               "attention", "recompute")
HEADROOM_COLOR = "#E69F00"


def _sample(result: Plan, max_points: int) -> np.ndarray:
    """The Pareto front and the fastest configurations, then an even sample of the rest."""
    n = len(result.evaluated.seconds)
    keep = np.union1d(result.pareto, result.top(min(n, 200)))
    if n <= max_points:
        return np.arange(n)
    rest = np.setdiff1d(np.arange(n), keep)
    step = max(1, len(rest) // max(1, max_points - len(keep)))
    return np.union1d(keep, rest[::step])


def plan_scatter(result: Plan, selected: dict | None = None, max_points: int = 20000) -> go.Figure:
    """Estimated step time vs per-rank peak of the fitting configurations, coloured by recompute
    mode, with the Pareto front, the GPU capacity (and the headroom limit) as vertical lines."""
    ev, spec = result.evaluated, result.spec
    idx = _sample(result, max_points)
    rc = ev.columns(idx)["recompute"]
    fig = go.Figure()
    for code, name in enumerate(PLAN_RECOMPUTE):
        sel = idx[rc == code]
        fig.add_trace(go.Scattergl(x=ev.peak_bytes[sel] / GIB, y=ev.seconds[sel], mode="markers",
                                   name=f"recompute {name}", marker=dict(
                                       size=5, opacity=0.6, color=RECOMPUTE_COLORS[name])))
    front = result.pareto
    fig.add_trace(go.Scatter(x=ev.peak_bytes[front] / GIB, y=ev.seconds[front],
                             mode="lines+markers", name="Pareto front",
                             line=dict(color=INK, width=1), marker=dict(size=6, color=INK)))
    if selected is not None:
        fig.add_trace(go.Scatter(x=[selected["peak_bytes"] / GIB], y=[selected["seconds"]],
                                 mode="markers", name="selected",
                                 marker=dict(size=16, symbol="star", color=OPTIMUM_COLOR,
                                             line=dict(color="white", width=1))))
    cap = spec.capacity_bytes / GIB
    fig.add_vline(x=cap, line=dict(color=CAPACITY_COLOR, width=2, dash="dash"),
                  annotation_text=f"{spec.hardware.name} {cap:.1f} GiB")
    if spec.limit_bytes < spec.capacity_bytes:
        fig.add_vline(x=spec.limit_bytes / GIB, line=dict(color=HEADROOM_COLOR, dash="dot"),
                      annotation_text=f"headroom {spec.headroom:.0%}",
                      annotation_position="bottom right")
    shown = f" ({len(idx):,} of {len(ev.seconds):,} shown)" if len(idx) < len(ev.seconds) else ""
    axis = dict(gridcolor=GRID, zerolinecolor=GRID)
    head, top = title_block(f"{safe_text.plot(spec.model.name)} on {spec.hardware.name}: fitting "
                            f"configurations{shown}", "")
    fig.update_layout(title=head,
                      font=dict(family=FONT_FAMILY, color=INK, size=13), height=480 + top,
                      plot_bgcolor="white", paper_bgcolor="white",
                      xaxis=dict(axis, title="peak of the most loaded rank<br>(GiB = 2³⁰ bytes)"),
                      # log: a few slow layouts (deep pipelines, tiny micro-batches) would
                      # otherwise squash the fast ones that matter into one line
                      yaxis=dict(axis, type="log", dtick="D2",
                                 title="estimated step time (s, log scale)"),
                      legend_title_text="", margin=dict(l=70, r=30, t=top + 20, b=105),
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom",
                                  xref="container", x=0.01, xanchor="left"))
    return fig


def top_table(result: Plan, k: int) -> pd.DataFrame:
    """The k fastest fitting configurations, one row each, GiB columns labelled."""
    rows = result.rows(result.top(k))
    cols = ["world", "tp", "pp", "vpp", "ep", "etp", "cp", "dp", "zero", "schedule", "layout",
            "micro_batch", "micro_batches", "recompute"]
    table = pd.DataFrame({
        "est. s/step": [r["seconds"] for r in rows],
        "peak GiB": [r["peak_bytes"] / GIB for r in rows],
        "free GiB": [r["free_bytes"] / GIB for r in rows],
        **{c: [r[c] for r in rows] for c in cols}})
    table.index = pd.RangeIndex(1, len(rows) + 1, name="#")
    return table


def describe_row(row: dict) -> str:
    """One configuration of the plan in one line, as the Ledger's subtitles spell it."""
    parts = [f"{k} {row[k]}" for k in ("tp", "pp", "vpp", "ep", "etp", "cp", "dp")
             if k in ("tp", "pp", "dp") or row[k] > 1]
    return " · ".join(parts + [f"ZeRO-{row['zero']}", row["schedule"],
                               f"micro-batch {row['micro_batch']} × {row['micro_batches']}",
                               f"recompute {row['recompute']}"])


def top_csv(result: Plan, k: int) -> str:
    """The k fastest fitting configurations with their peaks in exact bytes (download)."""
    rows = result.rows(result.top(k))
    return pd.DataFrame(rows, index=pd.RangeIndex(1, len(rows) + 1)).to_csv(index_label="#")


def ledger_query(result: Plan, row: dict, model_key: str, gpu_key: str) -> dict[str, str]:
    """Query parameters that open `row` on the Ledger page. With the dashboard's URL state
    (`memledger.views.state`) they are its own encoding, defaults left out; without it every
    key is written. layout=balanced reproduces the planner's stage split either way (for a
    layer count the stages divide, balanced is the even split)."""
    spec = result.spec
    values = {"model": model_key, "gpu": gpu_key, "world": row["world"],
              **{k: row[k] for k in ("tp", "pp", "vpp", "ep", "etp", "cp", "dp", "zero", "sp",
                                     "schedule", "recompute")},
              "layout": "balanced", "mb": row["micro_batch"], "m": row["micro_batches"],
              "seq": spec.seq, "precision": spec.precision, "optimizer": spec.optimizer,
              "profile": spec.profile, "attention": spec.attention}
    try:
        from memledger.views import state  # the dashboard's URL state
    except ImportError:
        return {k: _text(values[k]) for k in LEDGER_KEYS}
    return state.to_params(state.Config(**{k: v for k, v in values.items()
                                           if k in state.CONFIG_KEYS}))


def _text(v) -> str:
    return ("1" if v else "0") if isinstance(v, bool) else str(v)


__all__ = ["plan_scatter", "top_table", "top_csv", "describe_row", "ledger_query", "LEDGER_KEYS"]
