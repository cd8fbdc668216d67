"""Plotly chart of one rank's step timeline: the rows alive after every event, stacked.

x is the event index in execution order (forwards and backwards per layer and micro-batch, the
loss, the optimizer step, zero_grad); weights and optimizer states are flat, gradients grow in
the first backward when they are allocated on demand, activations climb the staircase and fall,
the transient on top is whatever the event holds briefly (logits, recompute, step temporaries).
The schedule's phases are shaded (warm-up: forwards before the first backward; steady state:
until the last forward; cool-down: the remaining backwards; the optimizer step) and the peak
event is marked. Builders take a finished Ledger; bytes become GiB only for display.
"""
from __future__ import annotations

import plotly.graph_objects as go

from memledger.ledger import Ledger
from memledger.ledger.timeline import describe as describe_peak
from memledger.units import gib
from memledger.views.peaks import peak_label
from memledger.views.budget import MAX_DRAWN_EVENTS, drawn_events
from memledger.views.figures import GIB_AXIS, describe, title_block
from memledger.views.palette import FONT_FAMILY, GRID, INK, PEAK_COLOR, ROW_COLORS, ROW_SHORT

LAYERS = (("weights", "weights"), ("optimizer", "optimizer"), ("gradients", "gradients"),
          ("activations", "activations"), ("communication", "communication"),
          ("transient", "runtime"))
PHASE_SHADES = {"warm-up": "rgba(0,114,178,0.07)", "steady state": "rgba(230,159,0,0.08)",
                "cool-down": "rgba(0,158,115,0.07)", "optimizer": "rgba(123,78,163,0.09)"}


def phases(evs) -> list[tuple[str, int, int]]:
    """(name, first event, last event) of each phase present in the timeline."""
    bwd = [i for i, e in enumerate(evs) if e.phase in ("backward", "loss-backward")]
    fwd = [i for i, e in enumerate(evs) if e.phase in ("forward", "loss-forward")]
    opt = next((i for i, e in enumerate(evs) if e.phase == "optimizer-step"), len(evs))
    if not bwd or not fwd:
        return [("optimizer", opt, len(evs) - 1)]
    first_b, last_f = bwd[0], fwd[-1]
    out = [("warm-up", 0, first_b - 1)]
    if last_f > first_b:
        out.append(("steady state", first_b, last_f))
    out.append(("cool-down", max(first_b, last_f + 1), opt - 1))
    out.append(("optimizer", opt, len(evs) - 1))
    return [x for x in out if x[2] >= x[1]]


def _label(e) -> str:
    if e.phase in ("optimizer-step", "zero-grad"):
        return e.phase.replace("-", " ")
    where = f"layer {e.layer}" if e.layer >= 0 else e.phase.replace("-", " ")
    return f"{e.phase.replace('-', ' ')} · {where} · stage {e.stage} · micro-batch {e.micro_batch}"


def timeline_chart(led: Ledger, rank: int | None = None, measured: list[int] | None = None,
                   events: list | None = None) -> go.Figure:
    """Stacked rows over the step's events of `rank` (default: the most loaded); `measured`:
    allocated bytes after each event from a real run, overlaid as a line; `events`: the rank's
    timeline when the caller has built it already (it is rebuilt on every access)."""
    r = led.ranks[led.most_loaded_rank if rank is None else rank]
    every, sh = (r.timeline if events is None else events), r.shape
    weights, opt = r.rows["weights"], r.rows["optimizer"]
    x = drawn(every)
    evs = [every[i] for i in x]
    text = [_label(e) for e in evs]
    fig = go.Figure()
    series = {"weights": [weights] * len(evs), "optimizer": [opt] * len(evs),
              "gradients": [e.gradients for e in evs], "activations": [e.activations for e in evs],
              "communication": [e.communication for e in evs],
              "transient": [e.transient for e in evs]}
    for key, color_key in LAYERS:
        name = "Transient" if key == "transient" else ROW_SHORT[key]  # short: half a phone
        fig.add_trace(go.Scatter(
            x=x, y=[gib(v) for v in series[key]], name=name, stackgroup="rows", mode="none",
            fillcolor=ROW_COLORS[color_key], line=dict(width=0, shape="hv"), customdata=text,
            hovertemplate=f"{name}: %{{y:,.2f}} GiB<br>%{{customdata}}<extra></extra>"))
    # the phases are named in the legend, not on the plot: a phase a few events wide (the
    # optimizer step; any phase on a phone) has no room for its name, and names piled up
    for name, a, b in phases(every):
        fig.add_vrect(x0=a - 0.5, x1=b + 0.5, fillcolor=PHASE_SHADES[name], line_width=0,
                      layer="below")
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"phase: {name}",
                                 marker=dict(symbol="square", size=14,
                                             color=PHASE_SHADES[name].replace("0.0", "0.3")),
                                 hoverinfo="skip"))
    pe = r.peak_event
    at = next(i for i, e in enumerate(every) if e.live(sh.static_bytes) == r.peak_allocated_bytes)
    fig.add_trace(go.Scatter(
        x=[at], y=[gib(r.peak_allocated_bytes)], mode="markers",
        name=peak_label("allocated", r.peak_allocated_bytes),  # in the legend: nothing to collide
        marker=dict(color=PEAK_COLOR, size=10, symbol="diamond"),
        hovertemplate=f"peak allocated %{{y:,.2f}} GiB<br>{describe_peak(pe)}<extra></extra>"))
    if measured is not None:
        xs = [i for i in x if i < len(measured)]
        fig.add_trace(go.Scatter(x=xs, y=[None if measured[i] is None else gib(measured[i]) for i in xs],
                                 name="measured", connectgaps=True,
                                 mode="lines", line=dict(color=PEAK_COLOR, dash="dot", width=2)))
    loop = led.loop.name if led.loop else "?"
    head, top = title_block(f"Memory over one training step: pp rank {r.pp_rank}, loop {loop}",
                            describe(led))
    fig.update_layout(
        title=head,
        xaxis=dict(title="event, in execution order", gridcolor=GRID, zeroline=False),
        yaxis=dict(title=GIB_AXIS, gridcolor=GRID, rangemode="tozero"),
        font=dict(family=FONT_FAMILY, color=INK), plot_bgcolor="white", hovermode="x unified",
        # two entries per row at any width (~12 entries: 6 rows of ~19 px), below the x title
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", xref="container",
                    x=0.01, xanchor="left", entrywidth=0.5, entrywidthmode="fraction",
                    traceorder="normal", font=dict(size=12)),
        margin=dict(t=top, l=60, r=20, b=190), height=520 + top)
    return fig


def drawn(evs) -> list[int]:
    """The indices of the events drawn: all, or the highest (bytes alive) of each bin of
    consecutive events when more than the browser's budget (`budget.drawn_events`); the peak
    is always the highest of its bin, so the drawn envelope keeps it."""
    starts = drawn_events(len(evs))
    if starts is None:
        return list(range(len(evs)))
    ends = starts[1:] + [len(evs)]
    live = [e.gradients + e.activations + e.communication + e.transient for e in evs]
    return [max(range(a, b), key=live.__getitem__) for a, b in zip(starts, ends)]


def drawn_note(n: int) -> str | None:
    """Markdown: how many of a timeline's `n` events the chart draws, when not all."""
    starts = drawn_events(n)
    if starts is None:
        return None
    return (f"This timeline has {n:,} events; the chart draws {len(starts):,} of them, the "
            f"highest of every {starts[1]:,} consecutive events (the peak among them): this "
            f"server sends the browser at most {MAX_DRAWN_EVENTS:,} events per chart.")


def peak_sentence(led, rank: int) -> str:
    """Markdown: where rank `rank`'s peak allocated happens, in GiB (2^30 bytes)."""
    r = led.ranks[rank]
    return (f"Rank {rank}: **{peak_label('allocated', r.peak_allocated_bytes)}** at the "
            f"{describe_peak(r.peak_event)}; **{peak_label('total', r.peak_total_bytes)}** "
            "with the allocator slack and the CUDA context.")
