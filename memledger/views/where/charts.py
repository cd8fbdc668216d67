"""Figures for "where memory goes" (seed 2): the 16N column, the savings path and the
checkpoint curve. Numbers come from `memledger.costs.textbook` and `memledger.costs.checkpointing`."""
from __future__ import annotations

import math

import plotly.graph_objects as go

from memledger.costs import checkpointing as ck
from memledger.costs.textbook import OPTIMIZER_PARTS, Column, static_bytes
from memledger.units import gib
from memledger.views import safe_text
from memledger.views.figures import GIB_AXIS, _layout, capacity_label
from memledger.views.palette import CAPACITY_COLOR, OPTIMUM_COLOR, ROW_COLORS, ROW_SHORT

SEED_ROWS = ("weights", "gradients", "optimizer", "activations")
# no dtype in the legend: the first column is fp32 (4 + 4 bytes), the others mixed precision
SEED_NAMES = {"weights": "Parameters", "gradients": "Gradients",
              "optimizer": "Optimizer states", "activations": "Activations"}
PATTERNS = ("", "/", "x")  # master copy, m, v: one colour, three textures


def _billions(n: int) -> str:
    return f"{n / 1e9:,.1f}B" if n >= 1e9 else f"{n / 1e6:,.0f}M"


def static_strip(n_params: int, act_bytes: int | None, name: str, act_note: str) -> go.Figure:
    """Seed 2's ledger as one horizontal strip: 2N + 2N + 12N (+ activations), to scale."""
    rows = static_bytes(n_params)
    segs = [("weights", "Parameters 2N", "Params 2N", rows["weights"], ""),
            ("gradients", "Gradients 2N", "Grads 2N", rows["gradients"], "")]
    segs += [("optimizer", f"{part} {b}N", f"{short} {b}N", b * n_params, pat)
             for (part, b), short, pat in zip(OPTIMIZER_PARTS.items(),
                                             ("Master", "Adam m", "Adam v"), PATTERNS)]
    if act_bytes is not None:
        segs.append(("activations", "Activations", "Activations", act_bytes, ""))
    fig = go.Figure()
    for row, label, short, b, pat in segs:
        v = gib(b)
        fig.add_bar(x=[v], y=[""], orientation="h", name=f"{short}: {v:,.1f}",
                    marker=dict(color=ROW_COLORS[row], line=dict(color="white", width=1.5),
                                pattern=dict(shape=pat, fgcolor="white", solidity=0.15,
                                             fillmode="overlay")),
                    text=[f"{label}<br><b>{v:,.1f} GiB</b>"], textposition="inside",
                    insidetextanchor="middle", textfont=dict(color="white", size=13), textangle=0,
                    hovertemplate=f"<b>{label}</b><br>%{{x:,.1f}} GiB<extra></extra>")
    static = gib(sum(rows.values()))
    w, g = gib(rows["weights"]), gib(rows["gradients"])
    fig.add_annotation(x=w + g + gib(rows["optimizer"]) / 2, y=0.5, yanchor="bottom",
                       showarrow=False, yshift=-4,
                       text="optimizer states 12N:<br>¾ of the static rows",
                       font=dict(color=ROW_COLORS["optimizer"], size=13))
    total = static + (gib(act_bytes) if act_bytes is not None else 0)
    act = (f" + activations {gib(act_bytes):,.1f} GiB ({act_note})" if act_bytes is not None
           else "; activations vary with batch × sequence")
    title = f"{safe_text.plot(name)}: {_billions(n_params)} parameters × 16 bytes = {static:,.1f} GiB static"
    _layout(fig, title, "mixed precision + Adam, one GPU, no ZeRO (16 bytes per parameter)" + act, height=330,
            bottom=125)
    fig.update_xaxes(title_text=GIB_AXIS, range=[0, total * 1.01])
    fig.update_yaxes(showticklabels=False, range=[-0.5, 0.9])
    fig.update_layout(uniformtext=dict(minsize=10, mode="hide"), bargap=0.2)
    return fig


SHORT_COLUMNS = {"fp32, no tricks": "fp32", "mixed precision": "mixed",
                 "+ checkpointing": "+ckpt"}


def _d(columns) -> int:
    """d of the ZeRO columns' labels ('ZeRO-1 (d=64)'), 0 when none says it."""
    for c in columns:
        if "(d=" in c.label:
            return int(c.label.split("(d=")[1].rstrip(")"))
    return 0


def techniques(columns: tuple[Column, ...], capacity_bytes: int, gpu_name: str,
               name: str) -> go.Figure:
    """The savings path: per-GPU ledgers after each technique, against one GPU's capacity."""
    # short and never rotated (rotated labels ran into the legend on a phone, full ones into
    # each other): the full label is in the hover, d in the subtitle
    x = [SHORT_COLUMNS.get(c.label, c.label.split(" (")[0].replace("ZeRO-", "Z"))
         for c in columns]
    fig = go.Figure()
    for row in SEED_ROWS:
        fig.add_bar(x=x, y=[gib(c.rows[row]) for c in columns], name=SEED_NAMES[row],
                    marker=dict(color=ROW_COLORS[row]),
                    customdata=[[c.cuts, c.label] for c in columns],
                    hovertemplate=f"<b>{ROW_SHORT[row]}</b>, %{{customdata[1]}}: %{{y:,.1f}} GiB"
                                  "<br>%{customdata[0]}"
                                  "<extra></extra>")
    totals = [gib(sum(c.rows.values())) for c in columns]
    for label, t in zip(x, totals):
        fig.add_annotation(x=label, y=t, yanchor="bottom", showarrow=False, text=f"{t:,.1f}",
                           font=dict(size=12))
    cap = gib(capacity_bytes)
    fig.add_hline(y=cap, line=dict(color=CAPACITY_COLOR, width=2, dash="dash"))
    _layout(fig, f"{safe_text.plot(name)}: what each technique cuts, per GPU",
            "each column adds one technique to the one on its left"
            + (f"; Z1–Z3: ZeRO stages 1–3 over d = {_d(columns):,} GPUs" if _d(columns) else ""),
            height=500, bottom=125)
    fig.update_xaxes(tickangle=0, tickfont=dict(size=11))
    capacity_label(fig, gpu_name, capacity_bytes)
    fig.update_yaxes(title_text=GIB_AXIS, range=[0, max(totals + [cap]) * 1.12])
    fig.update_xaxes(showgrid=False)
    return fig


def checkpoint_curve(n_layers: int, name: str) -> go.Figure:
    """Activation memory against the number of checkpoints, the √L optimum marked."""
    pts = ck.curve(n_layers)
    ks = [p.checkpoints for p in pts]
    fig = go.Figure()
    fig.add_scatter(x=ks, y=[100 * p.peak_share(n_layers) for p in pts], mode="lines",
                    name="kept + one segment recomputed (Chen et al. 2016)",
                    line=dict(color=ROW_COLORS["activations"], width=3),
                    hovertemplate="%{x} checkpoints: peak %{y:.1f}% of storing all<extra></extra>")
    fig.add_scatter(x=ks, y=[100 * p.kept_share(n_layers) for p in pts], mode="lines",
                    name="textbook: ⌈√L⌉+1 kept",
                    line=dict(color=ROW_COLORS["activations"], width=2, dash="dot"),
                    hovertemplate="%{x} checkpoints kept: %{y:.1f}%<extra></extra>")
    k_seed, root = ck.seed_checkpoints(n_layers), math.sqrt(n_layers)
    best = ck.optimum(n_layers)
    fig.add_vline(x=root, line=dict(color=OPTIMUM_COLOR, width=1.5, dash="dash"))
    fig.add_annotation(x=root, y=100, yanchor="bottom", xanchor="left", showarrow=False,
                       text=f"√L = {root:.1f}", font=dict(color=OPTIMUM_COLOR))
    share, pct = 100 * ck.seed_fraction(n_layers), ck.seed_percent(n_layers)
    fig.add_scatter(x=[min(k_seed, n_layers)], y=[share], mode="markers+text", showlegend=False,
                    marker=dict(color=OPTIMUM_COLOR, size=11), textposition="middle right",
                    text=[f"  textbook: ⌈√L⌉+1 = {k_seed} checkpoints ≈ {pct}%"],
                    hovertemplate="%{x} checkpoints: %{y:.1f}%<extra></extra>")
    peak = 100 * ck.segment_peak_layers(n_layers, best) / n_layers
    fig.add_scatter(x=[best], y=[peak], mode="markers+text", showlegend=False,
                    marker=dict(color=OPTIMUM_COLOR, size=11, symbol="diamond"),
                    textposition="top right", text=[f"  minimum: {best} checkpoints, {peak:.0f}%"],
                    hovertemplate="%{x} checkpoints: peak %{y:.1f}%<extra></extra>")
    _layout(fig, f"{safe_text.plot(name)}: gradient checkpointing over L = {n_layers} layers",
            "activation memory as % of storing every layer, one layer = one unit; "
            "the price is one extra forward pass", height=460, bottom=115)
    fig.update_layout(legend=dict(entrywidth=1))  # long names: one per row
    fig.update_xaxes(title_text="checkpoints kept (k)", range=[0, n_layers + 1], zeroline=False)
    fig.update_yaxes(title_text="activations (% of all layers)", range=[0, 109])
    return fig
