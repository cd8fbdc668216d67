"""Where memory goes (seed 2): the 16N static ledger, what each technique cuts, and the
checkpoint curve."""
import streamlit as st

from memledger.costs.textbook import SEED_EXAMPLES, technique_columns
from memledger.views import export, safe_text, sidebar, tables, ui
from memledger.views.compute import sizing
from memledger.views.frame import page_frame
from memledger.views.state import PageParam, hardware
from memledger.views.sync import resolve
from memledger.views.where import charts as seed_charts
from memledger.views.where import tables as where_tables

page_frame("where")
SIZES = ("model",) + tuple(SEED_EXAMPLES)
SPECS = (PageParam("size", "model", choices=SIZES),)

res = resolve("where", SPECS)
ui.issues(res)
hw = hardware(res.cfg)

share = ui.header("Where memory goes: weights, gradients, optimizer states, activations — and what cuts each")
size = st.radio("Size", SIZES, key="pg_size", horizontal=True,
                format_func=lambda s: f"Sidebar model ({safe_text.md(res.model.name)})" if s == "model"
                else SEED_EXAMPLES[s][0],
                help="The two textbook examples (7B and 70B parameters) give only a parameter count: no layer shapes, so no activation estimate.")
z = sizing(res.model, res.cfg, size)
# named by what it shows: one GPU's textbook ledger, ZeRO over the world (no tp / pp here)
stem = export.file_stem(f"where-{size}", ui.model_key(res), f"world{res.cfg.world}",
                        f"mb{res.cfg.mb}x{res.cfg.seq}")
st.caption(f"One GPU's ledger, the textbook way: the sidebar's tp, pp, ep and cp do not apply "
           f"here (the Ledger page splits the model); ZeRO shards over the {res.cfg.world:,} "
           "GPUs of the world size.")
act_note = f"micro-batch {res.cfg.mb} × {res.cfg.seq:,} tokens"

ui.chart(seed_charts.static_strip(z.n_params, z.act_mixed, z.name, act_note), stem + "_16n",
         key="strip_chart", setting=ui.setting(res))
cols = technique_columns(z.n_params, res.cfg.world, z.act_mixed or 0, z.act_fp32 or 0,
                         z.n_layers)
ui.chart(seed_charts.techniques(cols, hw.hbm_bytes, hw.name, z.name), stem + "_techniques",
         key="techniques_chart", setting=ui.setting(res))
st.caption(f"ZeRO shards over d = world size = {res.cfg.world} data-parallel GPUs (sidebar). "
           "Activations are the ledger's activation row for one micro-batch through all layers "
           f"({res.cfg.profile} profile)" + ("" if z.act_mixed is not None else
                                             "; the textbook examples have no layer shapes"))

ui.chart(seed_charts.checkpoint_curve(z.n_layers, z.name), stem + "_checkpoints",
         key="checkpoint_chart", setting=ui.setting(res))
st.caption("Chen et al. 2016 (arXiv 1604.06174): keep k checkpoints, re-run one segment of "
           "⌈L/k⌉ layers in backward; k + ⌈L/k⌉ is smallest near k = √L. The textbook count keeps only the "
           "kept checkpoints, ⌈√L⌉ + 1 of them.")

st.subheader("The textbook numbers: 16 bytes per parameter, ⌈√L⌉ + 1 checkpoints")
examples = [SEED_EXAMPLES[k] for k in SEED_EXAMPLES]
if size == "model":
    examples.append((z.name, z.n_params, z.n_layers))
st.dataframe(where_tables.seed_numbers_frame(examples), hide_index=True, width="stretch",
             column_config={"static 16N (GiB)": st.column_config.NumberColumn(format="%.1f"),
                            "parameters N": st.column_config.NumberColumn(format="%,d")})

sidebar.draw(res, sections=("model", "train"))
ui.finish(res, SPECS, {"size": size}, share=share)
