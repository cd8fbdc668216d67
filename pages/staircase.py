"""Pipeline staircase: every pipeline rank's ledger, early ranks full, late ranks empty (seed 1),
and the step timeline of one rank (memory after every event of the training step)."""
import streamlit as st

from memledger.specs.parallel import SCHEDULES
from memledger.views import guard, preview_panel, safe_text, sidebar, tables, ui
from memledger.views.compute import ledger_for, schedule_ledgers
from memledger.views.frame import page_frame
from memledger.views.staircase import charts
from memledger.views.staircase import stages as staircase_stages
from memledger.views.staircase import tables as stair_tables
from memledger.views.budget import OverBudget, admit_timeline
from memledger.views.staircase.timeline_charts import drawn_note, peak_sentence, timeline_chart
from memledger.views.state import PageParam, hardware
from memledger.views.sync import resolve

page_frame("staircase")
DEFAULT_COMPARE = ("1f1b", "interleaved", "zb-v", "dualpipev")
MAX_PANELS = 4  # more panels are too narrow to read
SPECS = (PageParam("compare", False), PageParam("rank", -1, limits=(-1, 1023)),
         PageParam("schedules", DEFAULT_COMPARE, choices=tuple(SCHEDULES), multi=True,
                   max_items=MAX_PANELS))

res = resolve("staircase", SPECS)
ui.issues(res)
guard.admit(res, "staircase", len(res.page["schedules"]) if res.page["compare"] else 0,
            specs=SPECS, values=res.page)
led, hw = ledger_for(res.model, res.cfg), hardware(res.cfg)

share = ui.header(f"Pipeline staircase: {safe_text.md(res.model.name)}, pp {res.cfg.pp}, {res.cfg.schedule}")
st.caption("Under 1F1B, pipeline rank r holds min(pp − r, m) micro-batches of activations at the "
           "start of its first backward, so early ranks are full and late ranks have room: the "
           "staircase. Interleaving raises it; zero-bubble V and DualPipe flatten it.")
if res.cfg.pp == 1:
    st.info("pp = 1: a single pipeline rank, so there is no staircase. Raise PP in the sidebar.",
            icon=":material/info:")

compare = st.toggle("Compare schedules side by side", key="pg_compare",
                    help="Same configuration, one panel per schedule (vpp = 2 for interleaved).")
chosen = tuple(res.page["schedules"])
if compare:
    chosen = tuple(st.multiselect("Schedules", list(SCHEDULES), key="pg_schedules",
                                  max_selections=MAX_PANELS, help=ui.SCHEDULE_HELP))
    chosen = chosen or DEFAULT_COMPARE
    ledgers, skipped = schedule_ledgers(res.model, res.cfg, chosen)
    for s, why in skipped.items():
        st.warning(f"{s} is not valid for this configuration: {why}", icon=":material/block:")
    fig = charts.staircase_compare(ledgers, hw, skipped)
elif res.cfg.pp > 1 and res.cfg.schedule in staircase_stages.SPLIT_SCHEDULES:
    st.caption("Each rank's activations are split by the stages it holds (hatched: its second "
               "chunk), as the schedule's own order holds them; "
               + staircase_stages.loss_note(led) + ".")
    fig = staircase_stages.staircase_stages(led, hw)
else:
    fig = charts.staircase(led, hw)
ui.fit_banner(led, hw)
if (engine := staircase_stages.engine_sentence(led)) is not None:
    st.info(engine, icon=":material/info:")
ui.chart(fig, ui.stem(res, "staircase"), key="staircase_chart", led=led, setting=ui.setting(res))
preview_panel.panel(res, "staircase", key="preview")

st.subheader("Memory over one training step")
loop = led.loop.name if led.loop else "auto"
st.caption(f"Training loop **{loop}** (sidebar → Training loop; *auto* follows the activation "
           "profile: hf runs plain PyTorch, megatron/paper the Megatron loop). Each event is a "
           "layer's forward or backward for one micro-batch in the schedule's order, then the "
           "optimizer step and zero_grad; the rows are stacked as they are alive after it. "
           "The staircase above is what this timeline holds at each rank's first backward.")
ranks = list(range(len(led.ranks)))
# the widget's value through Session State only (an index= as well makes Streamlit warn in
# the server log): -1 in the link means the most loaded rank
st.session_state["pg_rank"] = (led.most_loaded_rank if res.page["rank"] < 0
                               else min(res.page["rank"], len(ranks) - 1))
rank = st.selectbox("Pipeline rank", ranks, key="pg_rank",
                    format_func=lambda r: f"rank {r}" + (" (most loaded)" if r == led.most_loaded_rank else ""))
st.markdown(peak_sentence(led, rank))
try:
    admit_timeline(led.ranks[rank], f"The timeline of rank {rank}")
except OverBudget as e:
    st.warning(ui.md_escape(str(e)), icon=":material/hourglass_disabled:")
else:
    events = led.ranks[rank].timeline
    if (note := drawn_note(len(events))) is not None:
        st.caption(note)
    ui.chart(timeline_chart(led, rank, events=events), ui.stem(res, f"timeline_rank{rank}"),
             key="timeline_chart", setting=ui.setting(res))

per_rank = st.expander("Per rank: layers, micro-batches in flight, activations",
                       icon=":material/table_rows:", key="ranks_open", on_change="rerun")
if per_rank.open:
    per_rank.dataframe(stair_tables.staircase_frame(led), hide_index=True, width="stretch",
                       column_config={c: st.column_config.NumberColumn(format="%.2f")
                                      for c in ("activations (GiB)", "static rows (GiB)",
                                                "peak total (GiB)")})

sidebar.draw(res)
ui.finish(res, SPECS, {"compare": compare, "schedules": chosen,
                      "rank": -1 if rank == led.most_loaded_rank else rank}, share=share)
