"""Pipeline staircase: every pipeline rank's ledger, early ranks full, late ranks empty (seed 1),
and the step timeline of one rank (memory after every event of the training step)."""
import streamlit as st

from memledger.specs.parallel import SCHEDULES
from memledger.timeline import describe as describe_peak
from memledger.views import charts, sidebar, tables, ui
from memledger.views.timeline_charts import timeline_chart
from memledger.views.compute import ledger_for, schedule_ledgers
from memledger.views.state import PageParam, hardware
from memledger.views.sync import resolve

DEFAULT_COMPARE = ("1f1b", "interleaved", "zb-v", "dualpipev")
MAX_PANELS = 4  # more panels are too narrow to read
SPECS = (PageParam("compare", False), PageParam("rank", -1, limits=(-1, 1023)),
         PageParam("schedules", DEFAULT_COMPARE, choices=tuple(SCHEDULES), multi=True,
                   max_items=MAX_PANELS))

res = resolve("staircase", SPECS)
ui.issues(res)
led, hw = ledger_for(res.model, res.cfg), hardware(res.cfg)

share = ui.header(f"Pipeline staircase: {res.model.name}, pp {res.cfg.pp}, {res.cfg.schedule}")
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
else:
    fig = charts.staircase(led, hw)
ui.chart(fig, ui.stem(res, "staircase"), key="staircase_chart", led=led)

st.subheader("Memory over one training step")
loop = led.loop.name if led.loop else "auto"
st.caption(f"Training loop **{loop}** (sidebar → Training loop; *auto* follows the activation "
           "profile: hf runs plain PyTorch, megatron/paper the Megatron loop). Each event is a "
           "layer's forward or backward for one micro-batch in the schedule's order, then the "
           "optimizer step and zero_grad; the rows are stacked as they are alive after it. "
           "The staircase above is what this timeline holds at each rank's first backward.")
ranks = list(range(len(led.ranks)))
rank = st.selectbox("Pipeline rank", ranks, key="pg_rank",
                    index=ranks.index(led.most_loaded_rank) if res.page["rank"] < 0
                    else min(res.page["rank"], len(ranks) - 1),
                    format_func=lambda r: f"rank {r}" + (" (most loaded)" if r == led.most_loaded_rank else ""))
pe = led.ranks[rank].peak_event
st.markdown(f"Peak allocated on rank {rank}: **{led.ranks[rank].peak_allocated_bytes / 2**30:.2f} GiB** "
            f"at the {describe_peak(pe)}.")
ui.chart(timeline_chart(led, rank), ui.stem(res, f"timeline_rank{rank}"), key="timeline_chart")

per_rank = st.expander("Per rank: layers, micro-batches in flight, activations",
                       icon=":material/table_rows:", key="ranks_open", on_change="rerun")
if per_rank.open:
    per_rank.dataframe(tables.staircase_frame(led), hide_index=True, width="stretch",
                       column_config={c: st.column_config.NumberColumn(format="%.2f")
                                      for c in ("activations (GiB)", "static rows (GiB)",
                                                "peak total (GiB)")})

sidebar.draw(res)
ui.finish(res, SPECS, {"compare": compare, "schedules": chosen,
                      "rank": -1 if rank == led.most_loaded_rank else rank}, share=share)
