"""Streamlit glue for the per-request budget (`memledger.views.budget`): a page asks before it
builds its ledgers; over budget, it shows one error naming the setting, still draws the sidebar
and the share link (so the setting can be changed right there), and stops the run."""
from __future__ import annotations

import streamlit as st

from memledger.views import budget, sidebar, ui
from memledger.views.frame import fill_menu
from memledger.views.sync import Resolved

# Ledgers each page builds per request (the advisor re-checks its plan through ~18 ledgers).
LEDGERS_PER_PAGE = {"ledger": 1, "staircase": 1, "strategies": 20, "where": 2}


def admit(res: Resolved, page: str, extra_ledgers: int = 0, sections=None, specs=(),
          values=None, menu=None) -> None:
    """Stop the page with an error when its ledgers would exceed the request budget (filling
    `menu`, the place `page_frame(menu_later=True)` kept, before it stops)."""
    n = LEDGERS_PER_PAGE[page] + extra_ledgers
    pp = res.cfg.pp if page != "where" else 1  # 'where' computes on one GPU, no pipeline
    try:
        budget.admit_ledgers(n, pp, f"The {page} page")
    except budget.OverBudget as e:
        st.error(ui.md_escape(str(e)), icon=":material/hourglass_disabled:")
        if menu is not None:
            fill_menu(menu, page)
        if sections is None:
            sidebar.draw(res)
        else:
            sidebar.draw(res, sections=sections)
        ui.finish(res, specs, values)
        st.stop()
