"""The frame every page draws first (Streamlit glue): page config, the app menu, the house CSS,
and, once per server process, kaleido's browser (fast exports) and — from the page that plans —
the planner's compiled pass loaded in the background (memledger/planner/sweep/fused.py: its load then
never falls on a search; compiling it on a fresh machine, ~2.5 s of Python holding the GIL, is
not put on the first page a server draws unless that page is the Planner).

Each page calls `page_frame("<url path>")` before anything else. Pages do this themselves rather
than through `st.navigation` in app.py, because Streamlit runs a `pages/` file directly when a
deep link is the first request of a fresh server; a page that draws its own frame looks the same
whichever way it was reached.
"""
from __future__ import annotations

import os
from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitAPIException

from memledger.planner.sweep import fused
from memledger.views import export
from memledger.views.navigation import available, page

ROOT = Path(__file__).resolve().parents[2]
CSS = ("<style>[data-testid='stMainBlockContainer']{padding-top:3.8rem;padding-bottom:2rem}"
       "[data-testid='stPageLink'] p{font-size:0.92rem}"
       # the share link's copy button, shown (Streamlit shows a code block's only on hover)
       # and labelled: a visible Copy button in the Share popover
       "[data-testid='stPopoverBody'] [data-testid='stCode'] div:has([data-testid="
       "'stElementToolbarButton']){opacity:1!important;visibility:visible!important}"
       "[data-testid='stPopoverBody'] [data-testid='stCode'] button[aria-label='Copy to "
       "clipboard']::after{content:'Copy';margin-left:0.3rem;font-size:0.85rem}</style>")


@st.cache_resource
def _start_exports() -> bool:
    """Start kaleido's browser once per server process, so the first export is fast
    (MEMLEDGER_EXPORT_WARMUP=0 skips it, e.g. in unit tests)."""
    return os.environ.get("MEMLEDGER_EXPORT_WARMUP", "1") != "0" and export.warm_up()


@st.cache_resource
def _start_planner_pass() -> bool:
    """Load the planner's compiled pass on a daemon thread, once per server process."""
    fused.warm()
    return True


def page_frame(url_path: str, menu_later: bool = False, plans: bool = False):
    """Page config, menu and CSS for the page served at `/<url_path>`. With `menu_later` the
    menu's place is kept and the page fills it (`fill_menu`) once its chart is sent: the
    browser then draws the chart without first working through the menu's links. `plans`: the
    page runs planner searches (their compiled pass starts loading)."""
    info = page(url_path)
    st.set_page_config(page_title=f"{info.title} · memledger", page_icon=":material/memory:",
                       layout="wide", initial_sidebar_state="auto")
    st.html(CSS)  # less empty space above the first line: a dashboard, not prose
    box = st.container(horizontal=True, gap="small", key="ml_menu")
    if not menu_later:
        fill_menu(box, url_path)
    _start_exports()
    if plans:
        _start_planner_pass()
    return box


def fill_menu(box, current: str) -> None:
    """One link per page along the top, in `box`. A page run on its own (AppTest of one file)
    has no registered pages to link to, and shows no menu."""
    with box:
        for p in available(ROOT):
            try:
                st.page_link(p.file, label=p.title, icon=p.icon, disabled=p.url_path == current,
                             width="content")
            except StreamlitAPIException:
                return
