"""Planner: every layout of the sidebar's model on a GPU budget that fits, fastest first.

The model, GPU, default world size, sequence length, precision, optimizer, activation profile
and attention kernel are the shared sidebar's; the planner's own inputs (world sizes to search,
global batch, GPUs per node, headroom, constraints, top K, the row to open) are page parameters
(`planner_state.SPECS`). Widgets → PlanSpec → memledger.planner.plan → chart/table builders
(memledger.views.planner.charts). The selected configuration opens on the Ledger page. Below
the results, built only while open, the step-time model's record on published trainings
(memledger.views.planner.track: what `memledger reference` prints).
"""
from urllib.parse import urlencode

import streamlit as st

from memledger.errors import SpecError
from memledger.planner.answer.groups import top_groups
from memledger.views import budget, export, safe_text, sidebar, ui
from memledger.views.frame import page_frame
from memledger.views.peaks import peak_help
from memledger.views.planner import state as pst
from memledger.views.planner import track
from memledger.views.planner.charts import (describe_row, ledger_query, plan_scatter,
                                            searching_frame, top_csv, top_table)
from memledger.views.planner.steps import breakdown_chart, throughput_columns
from memledger.views.state import hardware, load_model
from memledger.views.sync import resolve

page_frame("planner", plans=True)
LEDGER_PAGE = "ledger"  # url path of the Ledger page (memledger.views.navigation)
SPECS = pst.SPECS
LIMITS = {s.key: s.limits for s in SPECS}
SIMILAR_HELP = ("Configurations of the same layout that differ only in vpp or recompute, within "
                "5% of this row's step time: folded into this row. Equal step times (to the "
                "digits shown) rank by headroom.")


def _plan(model_key: str, gpu_key: str, items: tuple, bar, slot):
    """Cached by the model's key (a preset name or an encoded spec) and the settings; while
    it is computed, `bar` (an `st.empty` slot) shows a progress bar with the stage and an ETA, and
    `slot` the chart's empty frame (the browser starts Plotly while the server searches)."""
    started = []

    def show(fraction: float, text: str) -> None:
        if not started:
            started.append(True)
            slot.plotly_chart(searching_frame(res.model.name, hardware(cfg).name), theme=None,
                              width="stretch", config={"displayModeBar": False})
        bar.progress(fraction, text)
    return pst.cached_plan(model_key, gpu_key, items, load_model, pst.Progress(show))


def _number(col, key: str) -> None:
    col.number_input(pst.LABEL[key], *LIMITS[key], key=f"pg_{key}", help=pst.HELP.get(key))


res = resolve("planner", SPECS)
ui.issues(res)
cfg, page = res.cfg, res.page
share = ui.header(f"Planner: {safe_text.md(res.model.name)} on {pst.worlds_text(page['worlds'], cfg.world)} "
                  f"× {hardware(cfg).name}")
st.caption("Every parallel layout that fits, ranked by an estimated step time. Peaks are the "
           "ledger's, byte for byte; times come from the step-time model (GEMM efficiency, "
           "collectives, overlap per framework). Model, GPU, "
           "sequence length and precision come from the sidebar. "
           f"This server searches at most {budget.PLANNER_MAX_WORLDS} world sizes and "
           f"{budget.PLANNER_MAX_CONFIGURATIONS:,} configurations per request.")

c1, c2, c3, c4 = st.columns(4)
c1.text_input(pst.LABEL["worlds"], key="pg_worlds", placeholder=f"{cfg.world} (sidebar)",
              help=pst.HELP["worlds"])
for key, col in (("gb", c2), ("gpn", c3), ("headroom", c4)):
    _number(col, key)
with st.expander("Constraints and search bounds", icon=":material/filter_alt:"):
    cols = st.columns(5)
    for i, key in enumerate(("fix_zero", "fix_recompute", "fix_schedule", "framework")):
        cols[i].selectbox(pst.LABEL[key], next(s.choices for s in SPECS if s.key == key),
                          key=f"pg_{key}", help=pst.HELP.get(key))
    _number(cols[4], "top")
    for col, key in ui.grid(pst.NUMBER_CONSTRAINTS, 5):
        _number(col, key)


def _set(key: str, value: int) -> None:
    st.session_state[f"pg_{key}"] = value


def narrow(settings: dict) -> None:
    """One button per single change that brings the search within the budget (counted)."""
    options = pst.narrowings(res.model, cfg.gpu, settings, cfg)
    if not options:
        return
    st.caption("Narrow the search in one click (each counted within the budget):")
    for col, (key, value, n) in zip(st.columns(len(options)), options):
        col.button(f"{pst.LABEL[key].split(' (')[0]} = {value:,} ({n:,} configurations)",
                   key=f"narrow_{key}", on_click=_set, args=(key, value))


def body() -> None:
    bar, metrics, slot = st.empty(), st.container(), st.empty()
    try:
        settings = pst.plan_settings(cfg, page)
        st.caption(f"Global batch: {settings['gb']:,} sequences"
                   + (" (the sidebar's dp × micro-batches × micro-batch size)"
                      if not page["gb"] else ""))
        if (short := pst.batch_warning(cfg, page)) is not None:
            st.warning(short, icon=":material/warning:")
        result = _plan(cfg.model, cfg.gpu, tuple(sorted(settings.items())), bar, slot)
    except SpecError as e:
        bar.empty()
        slot.empty()
        st.error(ui.md_escape(str(e)), icon=":material/error:")
        if isinstance(e, budget.OverBudget) and e.field == "constraints":
            narrow(settings)
        return
    c = result.counts()
    m = metrics.columns(5)
    m[0].metric("layouts", f"{c['structural']:,}", f"{c['invalid']:,} invalid",
                delta_color="off", delta_arrow="off")
    m[1].metric("configurations", f"{c['evaluated']:,}")
    m[2].metric("over capacity", f"{c['over_capacity']:,}")
    m[3].metric("fit", f"{c['fits']:,}")
    m[4].metric("search time", f"{result.wall_s:.2f} s")
    if result.reason:
        bar.empty()
        slot.empty()
        st.warning(ui.md_escape(result.reason), icon=":material/warning:")
        return
    bar.progress(*pst.progress_state("ranking", 0, 1, 0))
    groups = top_groups(result, page["top"])
    rows = result.rows([g[0] for g in groups])
    table = top_table(result, page["top"], groups)
    if st.session_state.get("pg_row", 1) > len(table):
        st.session_state["pg_row"] = 1
    stem = export.file_stem("planner", cfg.model if not cfg.model.startswith("spec:")
                            else res.model.name, cfg.gpu, settings["worlds"].replace(",", "-"))
    left, right = metrics.columns([1, 4], vertical_alignment="bottom")
    row_no = left.number_input(pst.LABEL["row"], 1, len(table), key="pg_row", help=pst.HELP["row"])
    row = rows[row_no - 1]
    query = urlencode(ledger_query(result, row, cfg.model, cfg.gpu))
    right.markdown(f"**#{row_no}**: {describe_row(row)} · "
                   f"[open it on the Ledger page]({LEDGER_PAGE}?{query})")
    fig = plan_scatter(result, selected=row)
    bar.empty()
    with slot.container():
        ui.chart(fig, stem, key="plan_chart", setting=ui.setting(res))
    ui.chart(breakdown_chart(result, row), f"{stem}_step", key="step_chart", setting=ui.setting(res))
    st.dataframe(throughput_columns(result, table, rows), width="stretch", column_config={
        "peak GiB": st.column_config.NumberColumn(format="%.2f", help=peak_help("total")),
        "free GiB": st.column_config.NumberColumn(format="%.2f"),
        "similar": st.column_config.TextColumn(help=SIMILAR_HELP)})
    st.download_button("Top configurations (CSV)", lambda: top_csv(result, page["top"], groups),
                       f"{stem}_top{page['top']}.csv", "text/csv", key="dl_plan_csv",
                       on_click="ignore", icon=":material/table:",
                       help="The table's configurations with their peaks in exact bytes.")


def track_record() -> None:
    """How the step-time model does on published trainings: built only while open."""
    box = sidebar.lazy_expander("How this step-time model does on published trainings",
                                "track_open", icon=":material/fact_check:")
    if box is None:
        return
    with box:
        with st.spinner("Checking the model against published trainings (once per server)…"):
            rec = track.record()
        st.caption(track.CAPTION)
        st.dataframe(track.runs_table(rec), hide_index=True, width="stretch")
        st.dataframe(track.figures_table(rec), hide_index=True, width="stretch")


body()
track_record()
sidebar.draw(res, sections=("model", "workload", "finetune"))
ui.finish(res, SPECS, pst.clean(page), share=share)
