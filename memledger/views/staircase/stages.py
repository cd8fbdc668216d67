"""The pipeline staircase with each rank's activations split by the stages it holds.

For a schedule with two chunks per rank (zb-v, dualpipev: a V; dualpipe: mirrored stages) the
activation segment of every rank is drawn as one segment per chunk — rank r's first chunk
(stage r, down the V) solid, its second (stage 2p−1−r, back up) hatched — so the V is visible:
the first chunk shrinks from rank 0 to rank p−1 while the second grows. The rank that holds the
last stage (head, logits, loss) is named on the chart. Bytes come from the core
(`memledger.ledger.pipeline.stages`); this module only converts them to GiB.
"""
from __future__ import annotations

import plotly.graph_objects as go

from memledger.ledger import Ledger
from memledger.ledger.items import ROW_LABELS
from memledger.ledger.pipeline.engines import ENGINE_NAMES, engine_notes, resolve_engine
from memledger.ledger.pipeline.stages import loss_rank, stage_split
from memledger.specs.hardware import Hardware
from memledger.units import gib
from memledger.views.peaks import peak_label
from memledger.views import figures as charts
from memledger.views import safe_text
from memledger.views.palette import ROW_COLORS, ROW_SHORT

BELOW = ("weights", "gradients", "optimizer")
ABOVE = ("communication", "runtime")
LEGS = {"zb-v": ("down the V", "back up the V"), "dualpipev": ("down the V", "back up the V"),
        "dualpipe": ("own stage", "mirrored stage")}
PATTERNS = ("", "/", "x", ".")


def leg_names(schedule: str, chunks: int) -> tuple[str, ...]:
    return LEGS.get(schedule, tuple(f"chunk {c}" for c in range(chunks)))


def _row_trace(led: Ledger, row: str) -> dict:
    ranks = led.ranks
    return dict(type="bar", x=[r.pp_rank for r in ranks], y=[gib(r.rows[row]) for r in ranks],
                name=ROW_SHORT[row], legendgroup=row, marker=dict(color=ROW_COLORS[row],
                                                                   line=dict(width=0)),
                hovertemplate=f"<b>{ROW_LABELS[row]}</b>: %{{y:,.2f}} GiB<br>pp rank %{{x}}"
                              "<extra></extra>")


def _chunk_traces(led: Ledger) -> list[dict]:
    split = stage_split(led)
    chunks = max(len(x.stages) for x in split)
    names = leg_names(led.parallel.schedule, chunks)
    out = []
    for c in range(chunks):
        shares = [x.stages[c] if c < len(x.stages) else None for x in split]
        custom = [[s.stage, s.micro_batches, " · holds the loss" if s.last else
                   (" · holds the embedding" if s.first else "")] if s else [None, 0, ""]
                  for s in shares]
        out.append(dict(
            type="bar", x=[x.rank for x in split], y=[gib(s.bytes) if s else 0 for s in shares],
            name=f"Activations · {names[c]}", legendgroup="activations",
            marker=dict(color=ROW_COLORS["activations"], line=dict(width=0.5, color="white"),
                        pattern=dict(shape=PATTERNS[c % len(PATTERNS)], fgcolor="white")),
            customdata=custom,
            hovertemplate=("<b>Activations, stage %{customdata[0]}</b>: %{y:,.2f} GiB<br>"
                           "pp rank %{x} · %{customdata[1]} micro-batches held at the peak"
                           "%{customdata[2]}<extra></extra>")))
    rest = [gib(x.rank_wide_bytes) for x in split]
    if any(rest):
        out.append(dict(type="bar", x=[x.rank for x in split], y=rest,
                        name="Activations · rank-wide", legendgroup="activations",
                        marker=dict(color=ROW_COLORS["activations"], opacity=0.55),
                        hovertemplate="<b>Activations held for the whole rank</b> (staging, "
                                      "casts): %{y:,.2f} GiB<extra></extra>"))
    return out


def loss_note(led: Ledger) -> str:
    p = led.parallel
    r = loss_rank(led)
    held = dict(led.ranks[r].in_flight).get(p.n_stages - 1, 0)
    return (f"loss on pp rank {r}: stage {p.n_stages - 1} (final norm, head, logits), "
            f"{held} micro-batch{'es' * (held != 1)} held at its peak")


def staircase_stages(led: Ledger, hw: Hardware) -> go.Figure:
    """Stacked rows per pipeline rank with the activation row split by chunk (stage)."""
    cap, peak = gib(hw.hbm_bytes), led.peak
    p, r_loss = led.parallel, loss_rank(led)
    loss = led.ranks[r_loss]
    notes = [dict(x=peak.pp_rank, xref="x", y=gib(peak.peak_total_bytes), yref="y",
                  yanchor="bottom", text=f"most loaded: {peak_label('total', peak.peak_total_bytes)}",
                  showarrow=True, arrowhead=2, ay=-28, font=dict(size=12)),
             dict(x=r_loss, xref="x", y=gib(loss.peak_total_bytes), yref="y", yanchor="bottom",
                  text=f"loss on rank {r_loss} (stage {p.n_stages - 1}, "
                       f"{dict(loss.in_flight).get(p.n_stages - 1, 0)} micro-batch held)",
                  showarrow=True, arrowhead=2, ax=70, ay=-70,
                  font=dict(size=12)),
             charts._capacity_note(hw.name, hw.hbm_bytes)]
    title = f"{safe_text.plot(led.model.name)}: memory per pipeline rank and stage, {p.schedule} schedule"
    ticks = [r.pp_rank for r in led.ranks] if p.pp <= 32 else None
    top = max(cap, gib(peak.peak_total_bytes)) * 1.2
    layout = charts.merge(charts.house_layout(title, charts.describe(led),
                                              height=600, bottom=235), dict(
        barmode="stack", shapes=[charts._hline(cap)], annotations=notes, margin=dict(r=90),
        # one entry per row (~9 rows of ~20 px): with the right margin's capacity note, half
        # the plot is narrower than 'Activations · back up the V' on a phone
        legend=dict(entrywidth=1),
        yaxis=dict(title=dict(text=charts.GIB_AXIS), range=[0, top]),
        xaxis=dict(title=dict(text="pipeline-parallel rank (0 = first stage)"), showgrid=False,
                   zeroline=False, tickmode="array" if ticks else "auto", tickvals=ticks)))
    data = ([_row_trace(led, row) for row in BELOW] + _chunk_traces(led)
            + [_row_trace(led, row) for row in ABOVE])
    return charts.figure(data, layout)


SPLIT_SCHEDULES = frozenset(LEGS)


def engine_sentence(led: Ledger) -> str | None:
    """Which engine's order the ledger follows, when another engine refuses this micro-batch
    count (e.g. 1F1B with m < pp: Megatron-Core runs it, PyTorch does not); None otherwise."""
    p, m = led.parallel, led.train.micro_batches
    if p.pp == 1:
        return None
    notes = engine_notes(p.schedule, p.pp, m)
    refused = {e: why for e, why in notes.items() if why}
    if not refused:
        return None
    used = resolve_engine(p.schedule, led.runtime.pipeline_engine, p.pp, m)
    others = " ".join(f"{ENGINE_NAMES[e]} refuses them: it {why}." for e, why in refused.items())
    return (f"{m} micro-batches of {p.schedule} on pp {p.pp}: {ENGINE_NAMES[used]} runs them and "
            f"the ledger follows its order. {others}")
