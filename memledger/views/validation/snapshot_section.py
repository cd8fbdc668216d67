"""The Validation page's "Your run" section: a PyTorch memory snapshot uploaded, read safely
(memledger.snapshot.reader), measured, attributed and put beside the ledger of the sidebar's
configuration. A bad file is one st.error; the rest of the page stays as it was.

The upload limit is the server's `server.maxUploadSize` (MB, .streamlit/config.toml; 256 by
default), enforced by Streamlit while the bytes arrive and again by the reader. What is kept
per session is the measurement without the trace (timeline points, rows at the peak, one phase
code per entry), keyed by the uploaded file's id, so a change in the sidebar re-compares
without re-reading the file.
"""
from __future__ import annotations

import json
from dataclasses import replace

import streamlit as st

from memledger.errors import SpecError
from memledger.snapshot.attribute import ATTRIBUTED_ROWS, attribute
from memledger.snapshot.compare import compare
from memledger.snapshot.measure import measure
from memledger.snapshot.reader import read_bytes
from memledger.units import gib
from memledger.views import ui
from memledger.views.compute import ledger_for
from memledger.views.validation.snapshot_charts import rows_figure, timeline_figure

KEY = "_ml_snapshot"


def upload_limit_mb() -> int:
    return int(st.get_option("server.maxUploadSize"))


def _measured(upload):
    """(Measured without its trace, Attribution), or an error message, cached per upload."""
    held = st.session_state.get(KEY)
    if held and held[0] == upload.file_id:
        return held[1]
    try:
        m = measure(read_bytes(upload.getvalue(), upload.name, upload_limit_mb() << 20))
        a = attribute(m)
        out = (replace(m, entries=[], alive=()), a)
    except SpecError as e:
        out = str(e.message)
    st.session_state[KEY] = (upload.file_id, out)
    return out


def table(cmp) -> list[dict]:
    e = cmp.errors()
    return [{"row": r, "measured GiB": gib(e[r]["measured_bytes"]),
             "predicted GiB": gib(e[r]["predicted_bytes"]),
             "difference GiB": gib(e[r]["difference_bytes"]), "error %": e[r]["error_pct"]}
            for r in ATTRIBUTED_ROWS + ("peak_allocated", "peak_reserved")]


def render(res, stem: str) -> bool:
    """Draw the section; True when it is open (the page then draws the sidebar's settings)."""
    box = st.expander("Your run: a PyTorch memory snapshot beside the prediction",
                      icon=":material/upload_file:", key="snapshot_open", on_change="rerun")
    if not box.open:
        return False
    box.caption("Record it with `torch.cuda.memory._record_memory_history(max_entries=...)` and "
                "`torch.cuda.memory._dump_snapshot('snapshot.pickle')` (torchtitan: `[profiling] "
                "enable_memory_snapshot`). The file is read without running anything in it; "
                f"at most {upload_limit_mb():,} MB, gzip accepted. The configuration is the "
                "sidebar's: " + ui.md_escape(f"{res.model.name}, {ui.setting(res)}") + ".")
    upload = box.file_uploader("Snapshot (.pickle or .pickle.gz)", key="snapshot_file",
                               max_upload_size=upload_limit_mb())
    if upload is None:
        return True
    got = _measured(upload)
    if isinstance(got, str):
        box.error(ui.md_escape(got), icon=":material/error:")
        return True
    m, a = got
    try:
        led = ledger_for(res.model, res.cfg)
    except SpecError as e:
        box.error(ui.md_escape(f"{e.field}: {e.message}"), icon=":material/error:")
        return True
    rank = box.selectbox("Pipeline rank of this snapshot", range(len(led.ranks)),
                         index=led.most_loaded_rank, key="pg_snapshot_rank")
    cmp = compare(m, a, led, rank)
    if m.partial:
        box.warning("Partial trace: " + ui.md_escape("; ".join(m.partial_reasons)),
                    icon=":material/content_cut:")
    top = [f"{r} {gib(d):+.2f} GiB" for r, d in cmp.explaining() if d][:3]
    box.markdown("**Biggest differences (measured − predicted):** " + ui.md_escape(", ".join(top) or "none"))
    with box:
        ui.chart(rows_figure(cmp), f"{stem}_snapshot_rows", key="snapshot_rows")
        ui.chart(timeline_figure(cmp, led.ranks[rank]), f"{stem}_snapshot_timeline",
                 key="snapshot_timeline")
        st.dataframe(table(cmp), hide_index=True, width="stretch")
        st.download_button("Comparison (JSON)", lambda: json.dumps(cmp.to_dict()),
                           f"{stem}_snapshot.json", "application/json", key="dl_snapshot_json",
                           on_click="ignore", icon=":material/data_object:",
                           help="What `memledger compare --json` prints for this file.")
    return True
