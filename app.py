"""memledger dashboard: `streamlit run app.py`.

Registers the pages with st.navigation. The pages built on other branches (strategies, planner,
validation) are registered when their file exists, so the navigation lists only pages that exist.
The URL is the state: each page reads and writes its settings as query parameters.
"""
import os
from pathlib import Path

import streamlit as st

from memledger.views import export
from memledger.views.navigation import available

HERE = Path(__file__).parent


@st.cache_resource
def _start_exports() -> bool:
    """Start kaleido's browser once per server process, so the first export is fast
    (MEMLEDGER_EXPORT_WARMUP=0 skips it, e.g. in unit tests)."""
    return os.environ.get("MEMLEDGER_EXPORT_WARMUP", "1") != "0" and export.warm_up()


st.set_page_config(page_title="memledger: GPU memory ledger", page_icon=":material/memory:",
                   layout="wide", initial_sidebar_state="auto")
pages = [st.Page(str(HERE / p.file), title=p.title, icon=p.icon, url_path=p.url_path,
                 default=n == 0) for n, p in enumerate(available(HERE))]
current = st.navigation(pages, position="top")
# Less empty space above the first line (Streamlit's default suits prose, not dashboards).
st.html("<style>[data-testid='stMainBlockContainer']{padding-top:4rem;padding-bottom:2rem}</style>")
_start_exports()
current.run()
