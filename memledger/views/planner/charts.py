"""Views of a Plan: the time-vs-peak scatter with the capacity line, the top-K table, and the
query string that opens one configuration on the Ledger page.

Only views live here (plotly for the chart, pandas for the table); every number comes from
`memledger.planner.Plan`. GiB = 2^30 bytes, labelled on every axis and column.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from memledger.planner import Plan
from memledger.planner.answer.groups import shown_seconds, top_groups, variants_text
from memledger.planner.question.spec import PLAN_RECOMPUTE
from memledger.planner.time.throughput import throughput
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
GRID_TEXT = "#777777"


def _sample(result: Plan, max_points: int) -> np.ndarray:
    """The Pareto front and the fastest configurations, then an even sample of the rest."""
    n = len(result.evaluated.seconds)
    if n <= max_points:
        return np.arange(n)
    keep = np.union1d(result.pareto, result.top(min(n, 200)))
    rest = np.ones(n, bool)  # a mask, not setdiff1d: that sorts all n (1.4 s at 2 M points)
    rest[keep] = False
    rest = np.flatnonzero(rest)
    step = max(1, len(rest) // max(1, max_points - len(keep)))
    return np.union1d(keep, rest[::step])


def searching_frame(model_name: str, gpu_name: str) -> go.Figure:
    """The scatter's empty frame, drawn while the search runs: the browser loads and starts
    Plotly meanwhile, so the real chart only has to be filled in when the search ends."""
    head, top = title_block(f"{safe_text.plot(model_name)} on {gpu_name}: searching…", "")
    fig = go.Figure()
    fig.add_annotation(text="the chart appears here when the search ends", showarrow=False,
                       x=0.5, y=0.5, xref="paper", yref="paper", font=dict(color=GRID_TEXT))
    fig.update_layout(title=head, height=480 + top, plot_bgcolor="white",
                      paper_bgcolor="white", font=dict(family=FONT_FAMILY, color=INK, size=13),
                      xaxis=dict(visible=False), yaxis=dict(visible=False),
                      margin=dict(l=70, r=30, t=top + 20, b=105))
    return fig


def seconds_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Ticks of a log seconds axis from lo to hi, labelled as times ('500 s', '0.2 s'): the
    1-2-5 steps of each decade, finer steps when the range holds fewer than three of them, and
    even steps (1, 2 or 5 × 10^n) inside a narrow range."""
    if not (0 < lo <= hi):
        return [], []
    for mantissas in ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)):
        vals = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)),
                                             math.floor(math.log10(hi)) + 1) for m in mantissas]
        vals = [v for v in vals if lo <= v <= hi]
        if len(vals) >= 3:
            return vals, [_seconds(v) for v in vals]
    span = max(hi - lo, hi * 1e-3)
    e = math.floor(math.log10(span / 4))
    step = min((m * 10.0 ** e for m in (1, 2, 5, 10) if m * 10.0 ** e >= span / 6))
    vals = [round(i * step, 9) for i in range(math.ceil(lo / step), math.floor(hi / step) + 1)]
    return vals, [_seconds(v) for v in vals]


def _seconds(v: float) -> str:
    return f"{v:,.6f}".rstrip("0").rstrip(".") + " s"


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
                  annotation_text=f"{spec.hardware.name} {cap:,.1f} GiB")
    if spec.limit_bytes < spec.capacity_bytes:
        fig.add_vline(x=spec.limit_bytes / GIB, line=dict(color=HEADROOM_COLOR, dash="dot"),
                      annotation_text=f"headroom {spec.headroom:.0%}",
                      annotation_position="bottom right")
    shown = f" ({len(idx):,} of {len(ev.seconds):,} shown)" if len(idx) < len(ev.seconds) else ""
    axis = dict(gridcolor=GRID, zerolinecolor=GRID)
    head, top = title_block(f"{safe_text.plot(spec.model.name)} on {spec.hardware.name}: fitting "
                            f"configurations{shown}", "")
    fig.update_layout(title=head,
                      font=dict(family=FONT_FAMILY, color=INK, size=13), height=520 + top,
                      plot_bgcolor="white", paper_bgcolor="white",
                      xaxis=dict(axis, title="peak total of the most loaded rank<br>(GiB = 2³⁰ bytes)",
                                 nticks=6),
                      # log: a few slow layouts (deep pipelines, tiny micro-batches) would
                      # otherwise squash the fast ones that matter into one line
                      yaxis=dict(axis, type="log", title="estimated step time (log scale)",
                                 **_tick_layout(ev.seconds[idx])),
                      # legend two entries a row in the bottom margin, below the x title: one a
                      # row on a phone pushed the title onto the data and hid the ticks
                      legend_title_text="", margin=dict(l=70, r=30, t=top + 20, b=150),
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom",
                                  xref="container", x=0.01, xanchor="left", entrywidth=0.5,
                                  entrywidthmode="fraction", font=dict(size=11)))
    return fig


def _tick_layout(seconds: np.ndarray) -> dict:
    vals, text = seconds_ticks(float(seconds.min()), float(seconds.max())) if len(seconds) else ([], [])
    if not vals:
        return dict(ticksuffix=" s", exponentformat="none")
    return dict(tickmode="array", tickvals=vals, ticktext=text)


MB_SIZE, MB_COUNT = "micro-batch size", "micro-batches per step"
DIFFERS = "differs from the row above"
# what tells two rows apart, in the order a reader scans for it
DIFF_KEYS = ("world", "tp", "pp", "vpp", "ep", "etp", "cp", "dp", "zero", "schedule",
             "micro_batch", "micro_batches", "recompute")
DIFF_NAMES = {"micro_batch": "mb", "micro_batches": "m"}


def layout_text(row: dict, n_layers: int) -> str:
    """The stage split: 'even', or — when pp·vpp does not divide the layers and the planner
    gave the stages `balanced_layout` — a custom layout the framework must be told (Megatron:
    --decoder-first/last-pipeline-num-layers or a pipeline layout string)."""
    if row["layout"] is None:
        return "even"
    return f"custom: {n_layers} layers over {row['pp'] * row['vpp']} stages"


def differs(rows: list[dict]) -> list[str]:
    """For each row, the settings that differ from the row above ('' for the first)."""
    out = [""]
    for a, b in zip(rows, rows[1:]):
        out.append(", ".join(f"{DIFF_NAMES.get(k, k)} {a[k]}→{b[k]}" for k in DIFF_KEYS
                             if a[k] != b[k]) or "same layout")
    return out


def top_table(result: Plan, k: int, groups: list | None = None) -> pd.DataFrame:
    """One row per group of near-duplicates (`planner.answer.groups.top_groups`), the k first, GiB
    columns labelled, step times to the shown precision; every cell a value (no None)."""
    groups = top_groups(result, k) if groups is None else groups
    rows = result.rows([g[0] for g in groups])
    cols = ["world", "tp", "pp", "vpp", "ep", "etp", "cp", "dp", "zero", "schedule"]
    table = pd.DataFrame({
        "est. s/step": shown_seconds([r["seconds"] for r in rows]),
        DIFFERS: differs(rows),
        "peak GiB": [r["peak_bytes"] / GIB for r in rows],
        "free GiB": [r["free_bytes"] / GIB for r in rows],
        **{c: [r[c] for r in rows] for c in cols},
        "layout": [layout_text(r, result.spec.model.n_layers) for r in rows],
        MB_SIZE: [r["micro_batch"] for r in rows],
        MB_COUNT: [r["micro_batches"] for r in rows],
        "recompute": [r["recompute"] for r in rows],
        "similar": [variants_text(result, g) for g in groups]})
    table.index = pd.RangeIndex(1, len(rows) + 1, name="#")
    return table


def describe_row(row: dict) -> str:
    """One configuration of the plan in one line, as the Ledger's subtitles spell it."""
    parts = [f"{k} {row[k]}" for k in ("tp", "pp", "vpp", "ep", "etp", "cp", "dp")
             if k in ("tp", "pp", "dp") or row[k] > 1]
    return " · ".join(parts + [f"ZeRO-{row['zero']}", row["schedule"],
                               f"micro-batch size {row['micro_batch']} × "
                               f"{row['micro_batches']} micro-batches",
                               f"recompute {row['recompute']}"])


def top_csv(result: Plan, k: int, groups: list | None = None) -> str:
    """The table's configurations (one per group) with their peaks in exact bytes, exact step
    times and the table's throughput columns: tokens/s, TFLOP/s per GPU, MFU (download)."""
    groups = top_groups(result, k) if groups is None else groups
    rows = result.rows([g[0] for g in groups])
    frame = pd.DataFrame(rows, index=pd.RangeIndex(1, len(rows) + 1))
    tps, tflops, mfu = throughput(result.spec, [r["seconds"] for r in rows],
                                  [r["world"] for r in rows])
    frame["tokens_per_s"], frame["tflops_per_gpu"], frame["mfu_pct"] = tps, tflops, mfu
    frame[DIFFERS.replace(" ", "_")] = differs(rows)
    frame["layout"] = [layout_text(r, result.spec.model.n_layers) for r in rows]
    frame["similar"] = [variants_text(result, g) for g in groups]
    return frame.to_csv(index_label="#")


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
