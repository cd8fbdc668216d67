"""A/B: a pinned configuration (A) beside the sidebar's (B), row by row. Pure: no Streamlit.

A is one page parameter, `pin`: the pinned configuration's own query string (`model=...&tp=4`),
parsed exactly like a share link (bounded, every value validated; a bad one is refused with the
reason, never half-used), so the link carries both layouts. The table puts A's and B's six rows
and peaks on the most loaded rank side by side with B − A; the chart, both staircases (peak
total per pipeline rank). GiB = 2^30 bytes.
"""
from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

import pandas as pd
import plotly.graph_objects as go

from memledger.ledger import Ledger
from memledger.ledger.items import ROW_LABELS, ROWS
from memledger.units import gib
from memledger.views.figures import GIB_AXIS, house_layout, merge
from memledger.views.palette import INK, ROW_COLORS
from memledger.views.state import KEYS, MAX_VALUE_CHARS, BadValue, Config, parse_params, to_params

A_COLOR, B_COLOR = "#9A9A9A", ROW_COLORS["weights"]


def pin_text(cfg: Config) -> str:
    """The pinned configuration as its query string (the model always named)."""
    return urlencode({"model": cfg.model} | to_params(cfg))


def parse_pin(raw: str) -> str:
    """A pinned configuration from a link: canonical text, or BadValue naming what is wrong."""
    if not raw:
        return ""
    if len(raw) > MAX_VALUE_CHARS:
        raise BadValue(f"the pinned configuration is {len(raw)} characters (at most "
                       f"{MAX_VALUE_CHARS})")
    pairs = parse_qsl(raw, keep_blank_values=True, max_num_fields=len(KEYS))
    unknown = [k for k, _ in pairs if k not in KEYS]
    if unknown:
        raise BadValue(f"the pinned configuration has unknown keys: {', '.join(unknown[:3])}")
    cfg, issues = parse_params(dict(pairs))
    if issues:
        raise BadValue(f"the pinned configuration: {issues[0]}")
    return pin_text(cfg)


def pinned(text: str) -> Config:
    return parse_params(dict(parse_qsl(text)))[0]


def _rows(led: Ledger) -> dict[str, int]:
    peak = led.peak
    return {**{ROW_LABELS[r]: peak.rows[r] for r in ROWS},
            "Peak allocated": peak.peak_allocated_bytes, "Peak total (+ context, slack)":
            peak.peak_total_bytes}


def diff_table(a: Ledger, b: Ledger) -> pd.DataFrame:
    """One line per row of the most loaded rank and the peaks: A, B, B − A (GiB) and B − A in
    exact bytes."""
    ra, rb = _rows(a), _rows(b)
    return pd.DataFrame({"row": list(ra), "A (GiB)": [gib(v) for v in ra.values()],
                         "B (GiB)": [gib(rb[k]) for k in ra],
                         "B − A (GiB)": [gib(rb[k] - ra[k]) for k in ra],
                         "B − A (bytes)": [rb[k] - ra[k] for k in ra]})


def staircases(a: Ledger, b: Ledger, label_a: str, label_b: str) -> go.Figure:
    """Peak total per pipeline rank of A and B, side by side."""
    fig = go.Figure()
    for led, name, color in ((a, f"A: {label_a}", A_COLOR), (b, f"B: {label_b}", B_COLOR)):
        fig.add_bar(x=[r.pp_rank for r in led.ranks],
                    y=[gib(r.peak_total_bytes) for r in led.ranks], name=name,
                    marker_color=color,
                    hovertemplate="pp rank %{x}: %{y:,.2f} GiB<extra>" + name[:1] + "</extra>")
    fig.update_layout(merge(house_layout("A/B: peak per pipeline rank", "A pinned, B the sidebar's",
                                         height=420, bottom=120), dict(
        barmode="group", font=dict(color=INK), legend=dict(entrywidth=1),
        xaxis=dict(title=dict(text="pipeline-parallel rank"), dtick=1),
        yaxis=dict(title=dict(text=GIB_AXIS), rangemode="tozero"))))
    return fig


def describe(cfg: Config) -> str:
    """A layout in one short line (the A/B legend and headers)."""
    hsdp = f" ({cfg.dp_replicate} HSDP replicas)" if cfg.dp_replicate > 1 else ""
    return (f"{cfg.world:,} × {cfg.gpu}, tp {cfg.tp} pp {cfg.pp} ep {cfg.ep} cp {cfg.cp} "
            f"ZeRO-{cfg.zero}{hsdp}, mb {cfg.mb} × {cfg.m}, {cfg.recompute}")
