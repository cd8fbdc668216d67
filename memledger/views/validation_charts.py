"""Validation views: the predicted-vs-measured table (pandas) and the parity plot (plotly).

Reads the records `memledger validate` writes (validation/validation-<device>.json): one record
per case and row with predicted and measured bytes. The parity plot has log axes, one marker per
case and row, the y = x line and the ±3% band (the activation accuracy bar).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from ..units import GIB

ROW_ORDER = ["weights", "gradients", "optimizer", "activations", "peak_allocated"]


def load_results(folder: Path) -> list[dict]:
    """Every validation-*.json in `folder`, each {"environment": ..., "records": [...]}."""
    docs = []
    for path in sorted(Path(folder).glob("validation-*.json")):
        doc = json.loads(path.read_text())
        doc["file"] = path.name
        docs.append(doc)
    return docs


def environment_label(env: dict) -> str:
    if env.get("device") == "cuda":
        return (f"measured on {env.get('gpu', 'a GPU')} — torch {env.get('torch')}, "
                f"transformers {env.get('transformers')}, CUDA {env.get('cuda')}")
    return (f"measured on CPU (saved-tensor bytes only, no allocator peak) — torch "
            f"{env.get('torch')}, transformers {env.get('transformers')}")


def records_frame(docs: list[dict]) -> pd.DataFrame:
    rows = []
    for doc in docs:
        label = environment_label(doc["environment"])
        for r in doc["records"]:
            rows.append({**r, "environment": label,
                         "predicted_gib": r["predicted_bytes"] / GIB,
                         "measured_gib": r["measured_bytes"] / GIB,
                         "error_pct": 100 * r["rel_error"]})
    df = pd.DataFrame(rows)
    if not df.empty:
        df["row"] = pd.Categorical(df["row"], ROW_ORDER, ordered=True)
        df = df.sort_values(["measured_on", "case", "row"]).reset_index(drop=True)
    return df


def worst_table(df: pd.DataFrame) -> pd.DataFrame:
    """Worst |error| per row and environment, with the bar it is judged against."""
    if df.empty:
        return df
    g = df.assign(abs_err=df["error_pct"].abs()).groupby(["measured_on", "row"], observed=True)
    out = g.agg(worst_abs_error_pct=("abs_err", "max"), cases=("case", "nunique"),
                tolerance_pct=("tolerance", lambda s: 100 * s.iloc[0]), all_ok=("ok", "all"))
    return out.reset_index()


def parity_figure(df: pd.DataFrame, colors: dict[str, str], title: str) -> go.Figure:
    fig = go.Figure()
    if df.empty:
        return fig
    lo = min(df["measured_gib"].min(), df["predicted_gib"].min()) * 0.8
    hi = max(df["measured_gib"].max(), df["predicted_gib"].max()) * 1.25
    xs = [lo, hi]
    fig.add_trace(go.Scatter(x=xs + xs[::-1], y=[lo * 1.03, hi * 1.03, hi * 0.97, lo * 0.97],
                             fill="toself", fillcolor="rgba(120,120,120,0.15)", line=dict(width=0),
                             name="±3% band", hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=xs, y=xs, mode="lines", line=dict(color="gray", dash="dot"),
                             name="predicted = measured", hoverinfo="skip"))
    for row in ROW_ORDER:
        d = df[df["row"] == row]
        if d.empty:
            continue
        for env, marker in (("cuda", "circle"), ("cpu", "diamond-open")):
            e = d[d["measured_on"] == env]
            if e.empty:
                continue
            fig.add_trace(go.Scatter(
                x=e["measured_gib"], y=e["predicted_gib"], mode="markers",
                marker=dict(symbol=marker, size=9, color=colors.get(row, "#444")),
                name=f"{row} ({'GPU' if env == 'cuda' else 'CPU'})",
                customdata=e[["case", "error_pct"]].to_numpy(),
                hovertemplate="%{customdata[0]}<br>measured %{x:.3f} GiB<br>predicted %{y:.3f} GiB"
                              "<br>error %{customdata[1]:+.2f}%<extra>" + row + "</extra>"))
    fig.update_layout(title=title, xaxis=dict(type="log", title="measured (GiB, 2^30 bytes)"),
                      yaxis=dict(type="log", title="predicted (GiB, 2^30 bytes)"),
                      legend=dict(orientation="h", yanchor="top", y=-0.15), height=560,
                      margin=dict(l=60, r=20, t=60, b=40))
    return fig
