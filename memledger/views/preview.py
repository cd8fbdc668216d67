"""Drag to preview: one Plotly figure holding the chart of every value along one parallelism
axis (the other settings held), switched in the browser by Plotly's own slider — no server
round trip per value while the pointer moves.

For the axis, every candidate value (`options.CANDIDATES`, plus short lists for micro-batch and
sequence) is asked of the core (`options.problem`); a valid one gets its ledger from
`compute.ledger_for` (cached per configuration) drawn by the page's own chart builder, so each
frame is the chart the page would draw for that configuration; an invalid one gets a greyed
frame carrying the core's reason, never a number. The work is bounded: `budget.admit_ledgers`
counts the ledgers (at most the axis's valid values) times their pipeline ranks.

Uses Plotly's client-side frames and `layout.sliders` (plotly.js `animate` with zero-length
frames: https://plotly.com/javascript/animations/, https://plotly.com/javascript/sliders/).
Ignores: keyboard stepping (Plotly's slider takes the pointer only; the sidebar sliders keep
the keyboard), and committing a previewed value (the sidebar does that, as before). Pure: no
Streamlit.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go

from memledger.ledger import Ledger
from memledger.specs import ModelSpec
from memledger.specs.hardware import Hardware
from memledger.units import gib
from memledger.views.budget import admit_ledgers
from memledger.views.compute import ledger_for
from memledger.views.figures import describe, fit, title_block
from memledger.views.options import CANDIDATES, problem, with_value
from memledger.views.state import Config, hardware

AXES = {"tp": "TP", "pp": "PP", "vpp": "VPP", "ep": "EP", "cp": "CP", "zero": "ZeRO",
        "mb": "micro-batch", "seq": "sequence"}
GREY = "#c8c8c8"
NUMBER = re.compile(r"[-+]?\d[\d,.]*\s*(GiB|TiB|B)?")
SLIDER_ROOM = 95  # pixels under the legend for Plotly's slider and its value label
# Frame layout keys a chart builder sets per configuration (the rest stays the base figure's).
# Margins and height stay the base figure's (the tallest title's): a frame that resized the
# figure would cost a relayout of the page around it on every step.
FRAME_LAYOUT = ("title", "annotations", "shapes", "xaxis", "yaxis")


def candidates(m: ModelSpec, cfg: Config, axis: str) -> tuple:
    """The values the preview offers along `axis`, in order, valid or not."""
    if axis == "mb":
        out = {cfg.mb} | {2**k for k in range(7)}
    elif axis == "seq":
        out = {cfg.seq} | {2**k for k in range(9, 18)}
    else:
        out = set(CANDIDATES[axis](m, cfg))
    return tuple(sorted(out))


@dataclass(frozen=True)
class Step:
    """One value along the axis: its configuration and ledger, or the core's reason."""

    value: int
    cfg: Config
    ledger: Ledger | None
    reason: str | None


def steps(m: ModelSpec, cfg: Config, axis: str) -> list[Step]:
    """Every candidate value of `axis` with `cfg`'s other settings, each valid one's ledger."""
    if axis not in AXES:
        raise ValueError(f"axis {axis!r}: one of {', '.join(AXES)}")
    alts = [(v, with_value(cfg, axis, v)) for v in candidates(m, cfg, axis)]
    errs = {v: problem(m, alt) for v, alt in alts}
    valid = [alt for v, alt in alts if errs[v] is None]
    admit_ledgers(len(valid), max((a.pp for a in valid), default=1), f"the {AXES[axis]} preview")
    return [Step(v, alt, ledger_for(m, alt) if errs[v] is None else None,
                 None if errs[v] is None else str(errs[v])) for v, alt in alts]


def headline(led: Ledger, hw: Hardware) -> str:
    """The verdict and the headline numbers, as the Ledger page's metrics state them."""
    v = fit(led, hw)
    return (f"{v.sentence(hw.name)} · busiest GPU pp rank {v.rank} of {led.parallel.pp}: "
            f"{gib(v.peak_bytes):.1f} GiB")


def _frame(fig: go.Figure, name: str, subtitle: str) -> dict:
    lay = fig.layout.to_plotly_json()
    head, top = title_block(lay["title"]["text"].replace("<br>", " "), subtitle)
    lay["title"] = head
    for k in ("annotations", "shapes"):  # an invalid frame may have hidden them: show again
        lay[k] = [{**a, "visible": True} for a in lay.get(k, [])]
    return dict(name=name, data=[t.to_plotly_json() for t in fig.data],
                layout={"top": top} | {k: lay[k] for k in FRAME_LAYOUT if k in lay})


def _invalid_frame(like: dict, name: str, label: str, reason: str) -> dict:
    """The shape of a valid frame with every bar at zero and the reason in its place."""
    data = []
    for t in like["data"]:  # no number survives: legend names lose theirs too
        axis = "x" if t.get("orientation") == "h" else "y"
        n = len(t.get(axis, []))
        data.append({**t, axis: [0] * n, "text": [""] * n, "customdata": [],
                     "marker": {**t.get("marker", {}), "color": GREY}, "hoverinfo": "skip",
                     "name": NUMBER.sub("", t.get("name", "")).strip()})
    head, top = title_block(f"{label}: not valid here", reason)
    note = dict(x=0.5, xref="paper", y=0.5, yref="paper", showarrow=False, text=f"✕ {label}",
                font=dict(size=22, color="#888"))
    # Plotly merges a frame's arrays into the figure's item by item: blank every item of the
    # valid frame's annotations and hide its shapes, rather than send shorter arrays
    blank = [dict(text="", visible=False)] * (len(like["layout"].get("annotations", [])) - 1)
    hidden = [dict(visible=False)] * len(like["layout"].get("shapes", []))
    lay = {**like["layout"], "title": head, "annotations": [note] + blank, "shapes": hidden,
           "top": top}
    return dict(name=name, data=data, layout=lay)


def preview_figure(m: ModelSpec, cfg: Config, axis: str,
                   chart: Callable[[Ledger, Hardware], go.Figure]) -> go.Figure:
    """`chart` drawn for every value of `axis`, one Plotly frame each, with a slider over them
    that starts at `cfg`'s value."""
    hw, label = hardware(cfg), AXES[axis]
    all_steps = steps(m, cfg, axis)
    frames, base = [], None
    for s in all_steps:
        if s.ledger is not None:
            fig = chart(s.ledger, hw)
            frames.append(_frame(fig, str(s.value), f"{describe(s.ledger)} · "
                                 + headline(s.ledger, hw)))
            base = base or fig
    if base is None:  # the current configuration is always valid, so this is defensive
        raise ValueError(f"no valid {label} value")
    like = next(f for f in frames)
    frames = [next((f for f in frames if f["name"] == str(s.value)), None)
              if s.ledger is not None else
              _invalid_frame(like, str(s.value), f"{label} = {s.value}", s.reason)
              for s in all_steps]
    current = [s.value for s in all_steps].index(getattr(cfg, axis))
    start = frames[current]
    layout = {**base.layout.to_plotly_json(), **start["layout"]}
    top = max(f["layout"].pop("top") for f in frames)
    layout.pop("top")
    layout["height"] += top - base.layout.margin.t + SLIDER_ROOM
    layout["margin"] = {**layout["margin"], "t": top, "b": layout["margin"]["b"] + SLIDER_ROOM}
    layout["sliders"] = [_slider(all_steps, label, current, layout)]
    # the legend sits above the slider (both in container coordinates)
    layout["legend"] = {**layout.get("legend", {}), "y": SLIDER_ROOM / layout["height"]}
    return go.Figure({"data": start["data"], "layout": layout, "frames": frames},
                     _validate=False)


def _slider(all_steps: list[Step], label: str, active: int, layout: dict) -> dict:
    """Plotly's slider in the bottom margin: its y is in plot fractions, so the figure's bottom
    edge is -(bottom margin) / (plot height)."""
    margin = layout["margin"]
    plot_px = max(1, layout["height"] - margin["t"] - margin["b"])
    instant = dict(mode="immediate", frame=dict(duration=0, redraw=True),
                   transition=dict(duration=0))
    return dict(
        active=active, x=0.02, len=0.96, xanchor="left", y=-(margin["b"] - 4) / plot_px, yanchor="bottom",
        pad=dict(t=0, b=8), currentvalue=dict(prefix=f"drag to preview · {label} = ",
                                              font=dict(size=13)),
        steps=[dict(label=str(s.value) + ("" if s.ledger is not None else " ✕"),
                    method="animate", args=[[str(s.value)], instant]) for s in all_steps])
