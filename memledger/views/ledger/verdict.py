"""The Ledger page's verdict (Streamlit glue): fits or over, and for a configuration that does
not fit, the fewest GPUs the model needs and one-click changes that would fit
(memledger.views.ledger.fixes)."""
from __future__ import annotations

import streamlit as st

from memledger.ledger import Ledger
from memledger.specs.hardware import Hardware
from memledger.units import gib
from memledger.views import safe_text, ui
from memledger.views.ledger import summary
from memledger.views.ledger.fixes import fixes, gpus_needed
from memledger.views.sync import Resolved, W


def _apply(changes: dict) -> None:
    for k, v in changes.items():
        st.session_state[W + k] = v


def verdict(res: Resolved, led: Ledger, hw: Hardware) -> None:
    fits, sentence = summary.verdict(led, hw)
    (st.success if fits else st.error)(f"**{sentence}**", icon=":material/check_circle:" if fits
                                       else ":material/error:")
    for w in led.warnings:  # modelled, but the layout wastes memory (FSDP2 dim-0 padding)
        st.warning(ui.md_escape(safe_text.plain(w, 600)), icon=":material/warning:")
    if fits:
        return
    need = gpus_needed(res.model, res.cfg)
    options = fixes(res.model, res.cfg)
    st.markdown(f"The model's weights, gradients and optimizer states alone need at least "
                f"**{need:,} GPUs** of this kind. " + ("Changes that fit:" if options else
                "No change of ZeRO, EP, PP, TP, recompute, micro-batch or world size found here "
                "fits: the Planner page searches every layout."))
    with st.container(horizontal=True, gap="small"):
        for i, f in enumerate(options):
            st.button(f"{f.label} → {gib(f.peak_bytes):,.1f} GiB", key=f"fix_{i}",
                      on_click=_apply, args=(f.changes,), icon=":material/build:",
                      help="Apply this change to the sidebar (the link follows).")
