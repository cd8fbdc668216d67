"""Ledger: the six rows of the most loaded GPU for the sidebar's configuration."""
import streamlit as st

from memledger.views import guard, preview_panel, safe_text, sidebar, tables, ui
from memledger.views.compute import ledger_for
from memledger.views.frame import fill_menu, page_frame
from memledger.views.ledger import charts, summary
from memledger.views.ledger.verdict import verdict
from memledger.views.state import PageParam, hardware
from memledger.views.sync import resolve

menu = page_frame("ledger", menu_later=True)
SPECS = (PageParam("rank", -1, limits=(-1, 1023)),)

res = resolve("ledger", SPECS)
# link problems, title, verdict and metrics: one container above the chart, so the chart keeps
# its place (and the browser its Plotly plot) whatever appears above it; most of it is filled
# once the chart is on its way
above = st.container()
with above:
    ui.issues(res)
    guard.admit(res, "ledger", specs=SPECS, values={"rank": res.page["rank"]}, menu=menu)
led, hw = ledger_for(res.model, res.cfg), hardware(res.cfg)
stem = ui.stem(res, "ledger")

ui.chart(charts.ledger_bar(led, hw), stem, key="ledger_chart", led=led, setting=ui.setting(res))
fill_menu(menu, "ledger")
with above:
    share = ui.header(f"Memory ledger: {safe_text.md(res.model.name)} on {res.cfg.world:,} × "
                      f"{hw.name}")
    verdict(res, led, hw)
    with st.container(horizontal=True, gap="medium"):
        for m in summary.metrics(led, hw):
            st.metric(m.label, m.value, m.delta, delta_color=m.delta_color, help=m.help,
                      delta_arrow="off", width=160)  # two per row on a phone

preview_panel.panel(res, "ledger", key="preview")

chosen = res.page["rank"]
items = st.expander("Every item, with its formula and source", icon=":material/receipt_long:",
                    key="items_open", on_change="rerun", expanded=chosen >= 0)
if items.open:  # built only when open: ~150 rows are not worth sending on every slider move
    with items:
        ranks = [-1] + [r.pp_rank for r in led.ranks]
        if st.session_state.get("pg_rank", -1) not in ranks:
            st.session_state["pg_rank"] = -1
        chosen = st.selectbox("Pipeline rank", ranks, key="pg_rank",
                              format_func=lambda r: f"most loaded (rank {led.most_loaded_rank})"
                              if r < 0 else f"rank {r}",
                              help="Ranks differ in layers, embedding/head and micro-batches in "
                                   "flight.")
        rank = led.ranks[summary.table_rank(led, chosen)]
        st.dataframe(tables.items_frame(rank), hide_index=True, width="stretch",
                     column_config={"GiB": st.column_config.NumberColumn(format="%.3f"),
                                    "bytes": st.column_config.NumberColumn(format="localized"),
                                    "formula": st.column_config.TextColumn(width="large")})

sidebar.draw(res)
ui.finish(res, SPECS, {"rank": chosen}, share=share)
