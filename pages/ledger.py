"""Ledger: the six rows of the most loaded GPU for the sidebar's configuration."""
import streamlit as st

from memledger.views import compare, guard, preview_panel, safe_text, sidebar, tables, ui
from memledger.views.compute import ledger_for
from memledger.views.frame import fill_menu, page_frame
from memledger.views.ledger import charts, summary
from memledger.views.ledger.verdict import verdict
from memledger.errors import SpecError
from memledger.views.state import PageParam, hardware, load_model
from memledger.views.sync import resolve

menu = page_frame("ledger", menu_later=True)
SPECS = (PageParam("rank", -1, limits=(-1, 1023)),
         PageParam("pin", "", parse=compare.parse_pin))  # A/B: the pinned configuration

res = resolve("ledger", SPECS)
# link problems, title, verdict and metrics: one container above the chart, so the chart keeps
# its place (and the browser its Plotly plot) whatever appears above it; most of it is filled
# once the chart is on its way
above = st.container()
with above:
    ui.issues(res)
    guard.admit(res, "ledger", 1 if res.page["pin"] else 0, specs=SPECS, values=res.page,
                menu=menu)
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

def _pin(text: str) -> None:
    st.session_state["pg_pin"] = text


def ab_section() -> None:
    """A/B: pin this configuration, change the sidebar, see both row by row."""
    st.subheader("Compare two layouts (A/B)")
    pin = res.page["pin"]
    left, right = st.columns(2)
    left.button("Pin this configuration as A", key="ab_pin", on_click=_pin,
                args=(compare.pin_text(res.cfg),), icon=":material/push_pin:")
    if not pin:
        st.caption("Pin the configuration, change the sidebar, and both ledgers show here with "
                   "the difference per row; the share link carries both.")
        return
    right.button("Unpin A", key="ab_unpin", on_click=_pin, args=("",))
    cfg_a = compare.pinned(pin)
    try:
        led_a = ledger_for(load_model(cfg_a.model), cfg_a)
    except SpecError as e:
        st.error(f"A: {ui.md_escape(str(e))}", icon=":material/error:")
        return
    a, b = compare.describe(cfg_a), compare.describe(res.cfg)
    st.markdown(f"**A** {safe_text.md(led_a.model.name)}: {a}  \n**B** "
                f"{safe_text.md(res.model.name)}: {b}")
    st.dataframe(compare.diff_table(led_a, led), hide_index=True, width="stretch",
                 column_config={c: st.column_config.NumberColumn(format="%.2f")
                                for c in ("A (GiB)", "B (GiB)", "B − A (GiB)")}
                 | {"B − A (bytes)": st.column_config.NumberColumn(format="localized")})
    ui.chart(compare.staircases(led_a, led, a, b), stem + "_ab", key="ab_chart",
             setting=ui.setting(res))


ab_section()
sidebar.draw(res)
ui.finish(res, SPECS, {"rank": chosen, "pin": st.session_state.get("pg_pin", "")},
          share=share)
