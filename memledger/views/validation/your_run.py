"""The Validation page's "Your run" section: a PyTorch memory snapshot from the user's own
run, measured and attributed (memledger.snapshot), beside the ledger of the configuration the
share link carries (the sidebar's, on the other pages). Charts: measured vs predicted per row,
and the measured live bytes over the trace. The upload is bounded by Streamlit's
server.maxUploadSize (.streamlit/config.toml, 256 MB) and by the reader's own limits; a file
that is not a snapshot is an error line, the page stays up.
"""
from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from memledger.errors import SpecError
from memledger.ledger import build_ledger
from memledger.views import state, ui
from memledger.views.figures import _layout
from memledger.views.palette import INK, ROW_COLORS

GIB = 2 ** 30


def _read(up):
    """Measured once per uploaded file (kept in the session, one at a time: bounded memory)."""
    from memledger.snapshot.measure import measure
    from memledger.snapshot.reader import loads
    held = st.session_state.get("_snapshot_measured")
    if held is not None and held[0] == up.file_id:
        return held[1]
    st.session_state.pop("_snapshot_measured", None)
    with st.spinner("Reading the snapshot…"):
        m = measure(loads(up.getvalue(), up.name))
    st.session_state["_snapshot_measured"] = (up.file_id, m)
    return m


def _ledger():
    cfg, _issues = state.parse_params(st.query_params.to_dict())
    m = state.load_model(cfg.model)
    p, t = state.to_specs(cfg, m)
    return cfg, build_ledger(m, p, t, state.runtime(cfg), state.hardware(cfg))


def rows_figure(doc: dict) -> go.Figure:
    rows = [r for r in doc["errors"] if r != "peak_allocated"]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=rows, y=[doc["errors"][r]["predicted_bytes"] / GIB for r in rows],
                         name="memledger (predicted)", marker_color="#1F77B4"))
    fig.add_trace(go.Bar(x=rows + ["unattributed"],
                         y=[doc["errors"][r]["measured_bytes"] / GIB for r in rows]
                         + [doc["measured"]["rows"]["unattributed"] / GIB],
                         name="your run (measured at its peak)", marker_color=INK))
    _layout(fig, "Your run: measured vs predicted per row",
            "bytes alive at the measured allocated peak, attributed by stack frames and phase", 420)
    fig.update_layout(barmode="group", yaxis_title="GiB (2³⁰ bytes)")
    return fig


def timeline_figure(m, predicted_peak: int) -> go.Figure:
    x = [i for i, _ in m.timeline]
    fig = go.Figure(go.Scatter(x=x, y=[b / GIB for _, b in m.timeline], mode="lines",
                               name="allocated (measured)", line=dict(color=INK)))
    fig.add_hline(y=predicted_peak / GIB, line=dict(color=ROW_COLORS["activations"], dash="dash"),
                  annotation_text="predicted peak allocated", annotation_position="top left")
    _layout(fig, "Your run: allocated bytes over the trace",
            "each point the largest allocated total of its stretch of trace entries", 380)
    fig.update_layout(xaxis_title="trace entry", yaxis_title="GiB (2³⁰ bytes)")
    return fig


def render() -> None:
    st.subheader("Your run: a PyTorch memory snapshot beside the ledger")
    st.caption("Upload `torch.cuda.memory._dump_snapshot()`'s pickle (gzip accepted; torchtitan "
               "writes one per rank with `[profiling] enable_memory_snapshot`). It is read "
               "without running anything in it. The prediction is the configuration of this "
               "page's link (set it on the Ledger page's sidebar, then open Validation).")
    up = st.file_uploader("Memory snapshot (.pickle)", type=["pickle", "gz", "pkl"],
                          key="snapshot_file")
    if up is None:
        return
    try:
        m = _read(up)
        cfg, led = _ledger()
    except SpecError as e:
        st.error(ui.md_escape(f"{e.field}: {e.message}"), icon=":material/error:")
        return
    from memledger.snapshot.compare import compare
    doc = compare(m, led)
    mm, pr = doc["measured"], doc["predicted"]
    part = " The trace was cut by max_entries: the segments fill what it lacks." \
        if mm["partial"] else ""
    st.info(f"Peak allocated: measured {mm['peak_allocated_bytes'] / GIB:,.2f} GiB, predicted "
            f"{pr['peak_allocated_bytes'] / GIB:,.2f} GiB (pp rank {pr['pp_rank']}, "
            f"{ui.md_escape(cfg.model)}). Peak reserved: measured "
            f"{mm['peak_reserved_bytes'] / GIB:,.2f} GiB.{part}")
    ui.chart(rows_figure(doc), "your-run-rows", key="your_run_rows")
    ui.chart(timeline_figure(m, pr["peak_allocated_bytes"]), "your-run-timeline",
             key="your_run_timeline")
    top = doc["explain"][:3]
    if top:
        st.markdown("**Biggest differences:** " + ", ".join(
            f"{x['row']} {x['difference_bytes'] / GIB:+,.2f} GiB" for x in top))
