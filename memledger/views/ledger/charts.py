"""The Ledger page's chart: one stacked bar of the six rows of the most loaded rank, with the
GPU's capacity as a line and the total written after the bar."""
from __future__ import annotations

import plotly.graph_objects as go

from memledger.ledger import Ledger
from memledger.ledger.items import ROW_LABELS, ROWS
from memledger.specs.hardware import Hardware
from memledger.units import gib
from memledger.views import safe_text
from memledger.views.figures import (GIB_AXIS, MIN_LABEL_SHARE, describe, figure, fit, house_layout,
                                     merge)
from memledger.views.palette import CAPACITY_COLOR, ROW_COLORS, ROW_SHORT


def ledger_bar(led: Ledger, hw: Hardware) -> go.Figure:
    """One horizontal stacked bar: the six rows of the most loaded rank, capacity as a line."""
    rank, verdict = led.peak, fit(led, hw)
    total, cap = gib(rank.peak_total_bytes), gib(hw.hbm_bytes)
    span = max(total, cap) * 1.08  # room past the capacity line
    data = []
    for row in ROWS:
        v = gib(rank.rows[row])
        data.append(dict(
            type="bar", x=[v], y=[f"pp rank {rank.pp_rank}"], orientation="h",
            name=f"{ROW_SHORT[row]} {v:,.1f} GiB",
            marker=dict(color=ROW_COLORS[row], line=dict(color="white", width=1)),
            text=[f"{v:,.1f}" if v >= MIN_LABEL_SHARE * span else ""], textposition="inside",
            insidetextanchor="middle", textfont=dict(color="white", size=13), textangle=0,
            customdata=[[rank.rows[row]]],
            hovertemplate=f"<b>{ROW_LABELS[row]}</b><br>%{{x:,.2f}} GiB (%{{customdata[0]:,}} bytes)"
                          "<extra></extra>"))
    word = "fits" if verdict.fits else "does not fit"
    title = (f"{safe_text.plot(led.model.name)} on {hw.name}: the most loaded GPU (pp rank {rank.pp_rank}) "
             f"needs {total:,.1f} GiB: {word}")
    shapes = [dict(type="line", xref="x", x0=cap, x1=cap, yref="paper", y0=0, y1=1,
                   line=dict(color=CAPACITY_COLOR, width=2, dash="dash"))]
    notes = [dict(x=cap, xref="x", y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                  text=f"{hw.name} capacity {cap:,.1f} GiB", font=dict(color=CAPACITY_COLOR),
                  xanchor="right" if cap > 0.6 * span else "left"),
             # over the bar's end, in the band above the bar, right-aligned: inside the chart
             # on a phone too
             dict(x=total, xref="x", y=1, yref="paper", showarrow=False, xanchor="right",
                  yanchor="top", text=f"<b>{total:,.1f} GiB</b>", font=dict(size=14))]
    layout = merge(house_layout(title, describe(led), height=370, bottom=130), dict(
        uniformtext=dict(minsize=11, mode="hide"), shapes=shapes, annotations=notes,
        xaxis=dict(title=dict(text=GIB_AXIS), range=[0, span]),
        yaxis=dict(showticklabels=True, ticks="")))
    return figure(data, layout)
