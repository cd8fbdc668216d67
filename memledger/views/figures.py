"""The house style of every chart: layout, title and subtitle, the capacity line and label, the
fits/over verdict and the one-line description of a configuration.

Every chart states its configuration in the title, labels its axis in GiB (2^30 bytes), draws
the GPU's capacity as a line and uses `palette.ROW_COLORS`. Builders take a finished Ledger and
do no memory arithmetic beyond converting bytes to GiB for display.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import plotly.graph_objects as go

from memledger.ledger import Ledger
from memledger.ledger.items import ROW_LABELS, ROWS
from memledger.specs.hardware import Hardware
from memledger.safe_json import deep_merge as merge  # noqa: F401 - the charts' layout merge
from memledger.units import gib
from memledger.views.peaks import gib_text, peak_label
from memledger.views.palette import CAPACITY_COLOR, FONT_FAMILY, GRID, INK, ROW_COLORS, ROW_SHORT

GIB_AXIS = "memory per GPU (GiB = 2³⁰ bytes)"
MIN_LABEL_SHARE = 0.045  # segments narrower than this share of the axis get no inside label


@dataclass(frozen=True)
class Fit:
    """The verdict for the most loaded rank against one GPU."""

    fits: bool
    rank: int
    peak_bytes: int
    capacity_bytes: int

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes

    def sentence(self, gpu_name: str) -> str:
        cap, diff = gib_text(self.capacity_bytes), gib_text(abs(self.headroom_bytes))
        total = peak_label("total", self.peak_bytes)
        if self.fits:
            return f"Fits: {total} on pp rank {self.rank}, {diff} free on {gpu_name} ({cap})"
        return f"Over by {diff} on {gpu_name} ({cap}): {total} on pp rank {self.rank}"


def fit(led: Ledger, hw: Hardware) -> Fit:
    peak = led.peak
    return Fit(peak.peak_total_bytes <= hw.hbm_bytes, peak.pp_rank, peak.peak_total_bytes,
               hw.hbm_bytes)


def describe(led: Ledger, schedule: bool = True) -> str:
    """The configuration in one line, as chart subtitles state it."""
    p, t = led.parallel, led.train
    vpp = f" · vpp {p.vpp}" if p.vpp > 1 else ""
    etp = f" · etp {p.etp}" if p.etp > 1 else ""
    sched = f" · {p.schedule}" if schedule else ""
    return (f"tp {p.tp} · pp {p.pp}{vpp if schedule else ''} · ep {p.ep}{etp} · cp {p.cp} · "
            f"dp {p.dp}{f' ({p.dp_replicate} HSDP replicas)' if p.dp_replicate > 1 else ''}"
            f" · ZeRO-{p.zero}{sched} · micro-batch {t.micro_batch} × {t.seq:,} tokens"
            f" · {t.micro_batches} micro-batches/step · {t.precision}/{t.optimizer}"
            f" · recompute {t.recompute}")


# Characters per line that fit a phone's chart (about 358 px) at the title's and subtitle's
# sizes; Plotly does not wrap titles itself, and the server does not know the viewer's width.
TITLE_CHARS, SUBTITLE_CHARS = 40, 56
SEPARATORS = (" · ", ": ", ", ", " (", " ")
NBSP = "\u00a0"


def wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` characters, broken after the widest separator that
    fits (a word longer than `width` stands alone)."""
    text = re.sub(r"(?<=\d) (?=(GiB|GB|TiB|TB|B|bytes|tokens|s)\b)", NBSP, text)  # keep units
    lines = []
    while len(text) > width:
        cut = -1
        for sep in SEPARATORS:  # the first separator kind that breaks past half the line
            at = text.rfind(sep, 0, width - len(sep.rstrip()))
            if at >= width // 2:  # break after ":" "·" ",", before "("
                cut = at if sep == " (" else at + len(sep.rstrip())
                break
        if cut <= 0:
            cut = text.find(" ", width) if " " in text[width:] else len(text)
        lines.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    return [x.replace(NBSP, " ") for x in lines + ([text] if text else [])]


def title_block(title: str, subtitle: str) -> tuple[dict, int]:
    """Plotly's title dict with both texts wrapped for a phone, and the top margin it needs."""
    t, sub = wrap(title, TITLE_CHARS), wrap(subtitle, SUBTITLE_CHARS)
    top = 46 + 22 * len(t) + 16 * len(sub)  # + room for labels on the plot's top edge
    return dict(text="<br>".join(t), x=0.01, xanchor="left", font=dict(size=17),
                yref="container", y=1, yanchor="top", pad=dict(t=12),  # top: the margin's rest
                # stays free for labels on the plot's top edge
                subtitle=dict(text="<br>".join(sub), font=dict(size=12, color="#555"))), top


def house_layout(title: str, subtitle: str, height: int, bottom: int = 105) -> dict:
    """House style. The legend sits at the bottom of the figure (container coordinates), below
    the x-axis title, so it never collides with it however the legend wraps; titles wrap so a
    phone shows them whole (the figure grows by what the wrapping adds)."""
    axis = dict(gridcolor=GRID, zerolinecolor=GRID)
    head, top = title_block(title, subtitle)
    return dict(
        title=head,
        font=dict(family=FONT_FAMILY, color=INK, size=13), height=height + max(0, top - 86),
        barmode="stack",
        plot_bgcolor="white", paper_bgcolor="white", margin=dict(l=70, r=30, t=top, b=bottom),
        legend=dict(orientation="h", yref="container", y=0.0, yanchor="bottom", xref="container",
                    x=0.01, xanchor="left", traceorder="normal", font=dict(size=12),
                    entrywidth=0.5, entrywidthmode="fraction"),  # two per row, any width
        hoverlabel=dict(font=dict(family=FONT_FAMILY)), bargap=0.35, xaxis=axis, yaxis=dict(axis),
    )


def _layout(fig: go.Figure, title: str, subtitle: str, height: int, bottom: int = 105) -> go.Figure:
    """Apply the house style to a figure built with plotly's helpers (subplots, seed charts)."""
    lay = house_layout(title, subtitle, height, bottom)
    axis = lay.pop("xaxis")
    lay.pop("yaxis")
    fig.update_layout(**lay)
    fig.update_xaxes(**axis)
    fig.update_yaxes(**axis)
    return fig





def figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure from plain dicts, skipping plotly's per-property validation: ~1 ms instead of
    ~30 ms on every slider move. The tests re-validate every builder's output."""
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def capacity_label(fig: go.Figure, gpu_name: str, capacity_bytes: int) -> None:
    """The capacity line's label in the right margin, clear of any bar or total."""
    fig.add_annotation(_capacity_note(gpu_name, capacity_bytes))
    fig.update_layout(margin=dict(r=90))


def _capacity_note(gpu_name: str, capacity_bytes: int) -> dict:
    cap = gib(capacity_bytes)
    return dict(x=1, xref="paper", xanchor="left", xshift=4, y=cap, yref="y", showarrow=False,
                align="left", text=f"{gpu_name}<br>{cap:,.1f} GiB",
                font=dict(color=CAPACITY_COLOR, size=12))


def _hline(y: float, xref: str = "paper", yref: str = "y") -> dict:
    return dict(type="line", xref=xref, x0=0, x1=1, yref=yref, y0=y, y1=y,
                line=dict(color=CAPACITY_COLOR, width=2, dash="dash"))
