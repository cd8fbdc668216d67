"""The "Drag to preview" panel under a page's chart (Streamlit glue): pick a setting, then drag
(or arrow-key) the component's slider through every value of it; the component
(memledger/views/dragbar.js, an `st.components.v2` component with inline JS, no build step)
draws `memledger.views.preview`'s data in the browser, and on release reports the value, which
is applied here exactly as a sidebar change (the sidebar widget's state, so the URL, the share
link and every other page follow). Built only while the panel is open, so a sidebar move costs
nothing extra when it is closed. AppTest cannot drive the component: the sidebar stays the
accessible path and the one every test uses.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path

import streamlit as st

from memledger.errors import SpecError
from memledger.views.preview import AXES, committable, preview_data
from memledger.views.state import load_model
from memledger.views.sync import CFG, W, Resolved

_HERE = Path(__file__).parent
dragbar = st.components.v2.component(
    "memledger_drag_preview", js=(_HERE / "dragbar.js").read_text(),
    css=(_HERE / "dragbar.css").read_text(), isolate_styles=False)


def apply_commit(key: str) -> None:
    """The component's `commit` trigger (a callback, so it runs before the page does): the
    released value becomes the sidebar widget's value when the core accepts it; anything else
    the browser sent is ignored."""
    ss = st.session_state
    got = (ss.get(key) or {}).get("commit")
    cfg = ss.get(CFG)
    if not isinstance(got, dict) or cfg is None:
        return
    axis, value = got.get("axis"), got.get("value")
    value = committable(load_model(cfg.model), cfg, axis, value) if axis in AXES else None
    if value is not None:
        ss[W + axis] = value


def panel(res: Resolved, kind: str, key: str) -> None:
    """An expander holding the preview of the page's chart (`kind`: "ledger" or "staircase")."""
    box = st.expander("Drag to preview: every value of one setting, without waiting",
                      icon=":material/swipe:", key=f"{key}_open", on_change="rerun")
    if not box.open:
        return
    with box:
        axis = st.segmented_control("Setting to drag", list(AXES), format_func=AXES.get,
                                    key=f"{key}_axis", default="ep",
                                    help="The chart holds every value of this setting (the "
                                         "others as in the sidebar): drag the slider under it, "
                                         "or focus it and use the arrow keys. Values the core "
                                         "rejects show greyed with the reason. Releasing sets "
                                         "the value in the sidebar.") or "ep"
        try:
            data = preview_data(res.model, res.cfg, axis, kind)
        except SpecError as e:
            st.warning(f"No preview here: {e}", icon=":material/block:")
            return
        drag = f"{key}_drag"
        dragbar(key=drag, data=data, on_commit_change=partial(apply_commit, drag))
