"""Chart export: the Plotly modebar's PNG button, server-side PNG/SVG via kaleido ≥ 1, and
standalone HTML.

kaleido drives a headless Chromium; we use the system one (/usr/bin/chromium, or the first
`chromium` / `chromium-browser` / `google-chrome` on PATH) and start kaleido's sync server once
per process, so an export after the first costs a render (~0.5 s), not a browser start.
Exports are produced on demand (Streamlit calls them when a download button is clicked), never
on every slider move. Without kaleido ≥ 1 or a browser, `status()` says why and the buttons
say so instead of failing.
"""
from __future__ import annotations

import html
import os
import re
import shutil
import threading
from dataclasses import dataclass
from datetime import date
from importlib import metadata

import plotly.graph_objects as go

from memledger.views import export_pool

CHROMIUM = "/usr/bin/chromium"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
EXPORT_WIDTH, SCALE = 1200, 2
_started = False


@dataclass(frozen=True)
class Status:
    ok: bool
    reason: str  # why exports are unavailable ("" when ok)
    browser: str = ""


def find_browser() -> str:
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    return next((p for b in BROWSERS if (p := shutil.which(b))), "")


def status() -> Status:
    try:
        version = metadata.version("kaleido")
    except metadata.PackageNotFoundError:
        return Status(False, "server-side export needs kaleido ≥ 1 "
                             "(pip install 'memledger[export]')")
    if int(version.split(".")[0]) < 1:
        return Status(False, f"server-side export needs kaleido ≥ 1, found {version}")
    browser = find_browser()
    if not browser:
        return Status(False, "server-side export needs Chromium (e.g. apt-get install chromium); "
                             "the chart's camera icon still saves a PNG")
    return Status(True, "", browser)


def start_server() -> bool:
    """Start kaleido's sync server once per process; False when export is unavailable."""
    global _started
    st = status()
    if not st.ok:
        return False
    if not _started:
        export_pool.pool(st.browser)  # one browser, several tabs (export_pool.py)
        _started = True
    return True


def warm_up() -> bool:
    """Start the server and render a one-bar figure in the background, so that the browser and
    plotly.js are loaded before the first real export is asked for."""
    if not start_server():
        return False

    def _tiny():
        try:
            to_image(go.Figure(go.Bar(x=[0], y=[1])), "svg")
        except Exception:  # noqa: BLE001 — a failed warm-up only means a slower first export
            pass

    threading.Thread(target=_tiny, daemon=True, name="kaleido-warm-up").start()
    return True


def stamp_text(setting: str = "", today: date | None = None) -> str:
    """What an exported chart says about itself: the setting (world size and GPU), the
    memledger version that computed it, and the date."""
    parts = [setting, f"memledger {_version()}", (today or date.today()).isoformat()]
    return " · ".join(p for p in parts if p)


def stamped(fig: go.Figure, stamp: str) -> go.Figure:
    """A copy of `fig` with `stamp` in small type under its bottom-right corner (reviews need
    to know what produced a chart and when)."""
    out = go.Figure(fig)
    out.add_annotation(text=html.escape(stamp), x=1, xref="paper", xanchor="right",
                       y=0, yref="paper", yanchor="top", yshift=-(out.layout.margin.b or 80) + 14,
                       showarrow=False, font=dict(size=10, color="#6b6b6b"))
    # the title inside the image's margin: kaleido draws a container-top title flush with the
    # image's edge (the page's pad is not applied), so the export gets EXPORT_TOP_PX more room
    # above and the title moves down by it
    height = int(out.layout.height or 500) + EXPORT_TOP_PX
    top = (out.layout.margin.t if out.layout.margin.t is not None else 80) + EXPORT_TOP_PX
    out.update_layout(height=height, margin=dict(t=top))
    if out.layout.title.text:
        out.update_layout(title=dict(yref="container", y=1 - EXPORT_TOP_PX / height,
                                     yanchor="top"))
    return out


EXPORT_TOP_PX = 20


def page_title(fig: go.Figure, file_stem: str) -> str:
    """The HTML export's <title>: the chart's title as text, else the file name."""
    text = re.sub(r"<[^>]+>", " ", fig.layout.title.text or "").split()
    return html.escape(" ".join(text) or file_stem)


def _version() -> str:
    try:
        return metadata.version("memledger")
    except metadata.PackageNotFoundError:
        return "dev"


def to_image(fig: go.Figure, fmt: str) -> bytes:
    """PNG or SVG bytes of a figure at a fixed export size (white background)."""
    if fmt not in ("png", "svg"):
        raise ValueError(f"format must be png or svg, got {fmt!r}")
    if not start_server():
        raise RuntimeError(status().reason)
    height = int(fig.layout.height or 500)
    opts = {"format": fmt, "width": EXPORT_WIDTH, "height": height,
            "scale": SCALE if fmt == "png" else 1}
    out = export_pool.pool(status().browser).render(fig, opts)  # no global lock: a tab each
    if isinstance(out, Exception):  # the server hands back the error instead of raising
        raise RuntimeError(f"kaleido failed: {out}")
    return out


def to_html(fig: go.Figure, file_stem: str) -> str:
    """A standalone HTML page titled like the chart: plotly.js inlined (~4.8 MB), so each
    file opens offline in a review by itself. Not "cdn" (needs the network) and not a shared
    bundle beside the files ("directory"): a browser download is one file, and a page that
    needs a second one saved next to it breaks when it is mailed or attached on its own."""
    page = fig.to_html(include_plotlyjs=True, full_html=True,
                       config=modebar_config(file_stem), default_width="100%")
    return page.replace("<head>", f"<head><title>{page_title(fig, file_stem)}</title>", 1)


def modebar_config(file_stem: str) -> dict:
    """Plotly config: the camera button saves a 2× PNG named after the configuration."""
    return {"displaylogo": False,
            "toImageButtonOptions": {"format": "png", "filename": file_stem, "scale": SCALE},
            "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def file_stem(*parts: object) -> str:
    """A safe file name from configuration parts: memledger_ledger_llama3-70b_tp8_pp4."""
    text = "_".join(str(p) for p in ("memledger",) + parts if str(p))
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:120]
