"""The "Drag to preview" panel under a page's chart (Streamlit glue): pick an axis, then drag
Plotly's slider through every value of it; the figure is `memledger.views.preview`'s, built
only while the panel is open, so a sidebar move costs nothing extra when it is closed."""
from __future__ import annotations

import streamlit as st

from memledger.errors import SpecError
from memledger.views import export
from memledger.views.preview import AXES, preview_figure
from memledger.views.sync import Resolved


def panel(res: Resolved, chart, key: str) -> None:
    """An expander holding the preview of `chart` (a builder `(Ledger, Hardware) → Figure`)."""
    box = st.expander("Drag to preview: every value of one setting, without waiting",
                      icon=":material/swipe:", key=f"{key}_open", on_change="rerun")
    if not box.open:
        return
    with box:
        axis = st.segmented_control("Setting to drag", list(AXES), format_func=AXES.get,
                                    key=f"{key}_axis", default="ep",
                                    help="The chart holds every value of this setting (the "
                                         "others as in the sidebar): drag the slider under it. "
                                         "Values the core rejects show greyed with the reason. "
                                         "Set the value you want in the sidebar.") or "ep"
        try:
            fig = preview_figure(res.model, res.cfg, axis, chart)
        except SpecError as e:
            st.warning(f"No preview here: {e}", icon=":material/block:")
            return
        st.plotly_chart(fig, config=export.modebar_config(f"preview_{axis}"), key=f"{key}_fig",
                        theme=None, width="stretch")
