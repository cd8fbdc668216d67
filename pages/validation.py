"""Validation ("Truth"): the ledger's predictions against memory measured in real training steps.

Measurements come from the stored runs of `memledger validate` (validation/validation-*.json);
predictions are re-derived with the current ledger on every load, never read from the files.
Needs no model sidebar, except while "Your run" is open: an uploaded PyTorch memory snapshot is
compared with the sidebar's configuration (memledger.views.validation.snapshot_section).
"""
from pathlib import Path

import streamlit as st

from memledger.views import export, sidebar, ui
from memledger.views.frame import page_frame
from memledger.views.state import BadValue, PageParam
from memledger.views.sync import resolve
from memledger.views.validation import (charts, data, engine_section, finetune_section,
                                        megatron_section, snapshot_section, titan_gloo_section,
                                        titan_section)
from memledger.views.validation import timeline as timeline_validation

page_frame("validation")
ENV_NAMES = {"all": "All", **data.ENVIRONMENTS}
HOW = """
**Measured.** Each case is a Hugging Face model (scaled-down Llama, Mixtral, Qwen3-MoE and
DeepSeek-V3 configurations) trained for two steps on one device; the second step is measured.
Gradients persist between steps (`zero_grad(set_to_none=False)`), as Megatron's gradient buffer
does. With `m` micro-batches, all `m` forward passes run before the first backward (GPipe order,
what the ledger's `pp = 1` schedule assumes).

- **GPU (CUDA).** Weights, gradients and optimizer states are summed from the tensors
  themselves. Activations are the growth of `torch.cuda.memory_allocated()` across the forward
  passes. Peak allocated is `torch.cuda.max_memory_allocated()` over the measured step
  (forward, backward, optimizer step), minus nothing.
- **CPU.** There is no allocator to ask. Activations are the bytes of the tensors autograd saved
  for backward, counted once per storage (parameters excluded, autocast's weight casts
  included), and no peak is reported.

**Predicted.** The ledger with the `hf` activation profile (`hf-cpu` on the CPU), `pp = 1`, no
parallelism. The peak-allocated prediction adds what the environment holds outside the model:
the cuBLAS workspace measured on that GPU and the input ids and labels. Nothing is fitted to the
measurements.

**Re-predicted on every load.** The files keep the measurements; the predictions shown here come
from the code as it is now (`memledger validate --rescore`), so a change to the ledger that
breaks agreement with real memory shows here and fails the test suite, without a GPU.

**Accuracy bar.** Weights, gradients and optimizer states within ±0.5%, activations within ±3%,
peak allocated within ±10%. Run it yourself: `memledger validate --device cuda --out validation`
(or `--device cpu` for the tiny cases).
"""


@st.cache_data(show_spinner="Re-predicting every measurement…", max_entries=4)
def scored(folder: str, signature: tuple) -> data.Scored:
    """Cached per folder and file signature (names, sizes, mtimes): a new run is picked up."""
    del signature  # only part of the cache key
    return data.score(data.load_results(Path(folder)))


folder = data.results_dir()
result = scored(str(folder), data.signature(folder))
df = result.frame
CASES = ("all",) + data.case_names(df)


def parse_case(raw: str) -> str:
    if raw not in CASES:
        raise BadValue(f"no such case in the stored results; {len(CASES) - 1} cases, listed in "
                       "the Case menu")
    return raw


# What the numbers are, said once above them (a reader took "Weights 0.04 %" for a typical
# error and the GPU cases for multi-GPU training)
WHAT_IT_SHOWS = ("Each figure above is the worst |predicted − measured| / measured of its row "
                 "over every case, not a typical one. The GPU cases are single-GPU training steps "
                 "of Hugging Face models shrunk to a few layers, predicted with the `hf` "
                 "activation profile; the multi-rank cases (Per rank, below) run "
                 "torch.distributed on CPU with gloo, or on fake tensors — no multi-GPU run is "
                 "stored here.")
SPECS = (PageParam("rows", data.ROW_ORDER, choices=data.ROW_ORDER, multi=True),
         PageParam("env", "all", choices=tuple(ENV_NAMES)),
         PageParam("case", "all", parse=parse_case))

res = resolve("validation", SPECS)
ui.issues(res)
share = ui.header("Validation: the ledger against measured memory")
for problem in result.problems:
    st.error(ui.md_escape(problem), icon=":material/error:")

if not df.empty:
    good, sentence = data.verdict(df)
    (st.success if good else st.error)(f"**{sentence}**", icon=":material/check_circle:" if good
                                       else ":material/error:")
    with st.container(horizontal=True, gap="medium"):
        for s in data.summary(df):
            st.metric(f"{s.label}: worst", "—" if s.worst_pct is None else f"{s.worst_pct:.2f}%",
                      f"bar ±{s.bar_pct:g}%", delta_color="normal" if s.ok else "inverse",
                      delta_arrow="off", width=170,
                      help=f"Worst |predicted − measured| / measured over {s.count} cases"
                           + (f": {s.worst_case}" if s.worst_case else ""))
    for name, label, n in result.environments:
        st.caption(f"**{name}** ({n} cases): {ui.md_escape(label)}")
    st.caption(WHAT_IT_SHOWS)

st.subheader("Predicted vs measured")
rows = st.pills("Rows", data.ROW_ORDER, selection_mode="multi", key="pg_rows",
                format_func=data.LABELS.get, help="None selected: all rows.")
c1, c2 = st.columns([2, 3])
env = c1.radio("Measured on", tuple(ENV_NAMES), key="pg_env", format_func=ENV_NAMES.get,
               horizontal=True)
case = c2.selectbox("Case", CASES, key="pg_case",
                    format_func=lambda c: "all cases" if c == "all" else c)
shown = data.select(df, tuple(rows), env, case)
stem = export.file_stem("validation", "" if env == "all" else env,
                        "" if case == "all" else case)

if shown.empty:
    st.info("No measurement matches these filters." if not df.empty else
            "Nothing to plot: no validation results could be read.")
else:
    subtitle = (f"{len(shown)} predictions, {shown['case'].nunique()} cases · predictions "
                "re-derived by the current ledger · filled: GPU, open: CPU")
    ui.chart(charts.parity_figure(shown, "Predicted vs measured, one marker per case and row",
                                  subtitle), stem, key="parity_chart")

st.dataframe(data.table(shown), hide_index=True, width="stretch", column_config={
    "predicted GiB": st.column_config.NumberColumn(format="%.4f"),
    "measured GiB": st.column_config.NumberColumn(format="%.4f"),
    "error %": st.column_config.NumberColumn(format="%+.3f"),
    "bar ±%": st.column_config.NumberColumn(format="%g"),
    "within": st.column_config.CheckboxColumn(help="|error| within the row's accuracy bar")})
with st.container(horizontal=True, gap="small"):
    st.download_button("Table (CSV)", lambda: data.to_csv(shown), f"{stem}.csv", "text/csv",
                       key="dl_val_csv", on_click="ignore", icon=":material/table:",
                       help="The rows shown, in exact bytes, with each case's settings.")
    st.download_button("Table (JSON)", lambda: data.to_json(shown, result.environments),
                       f"{stem}.json", "application/json", key="dl_val_json", on_click="ignore",
                       icon=":material/data_object:",
                       help="The rows shown and the environments they were measured in.")

timeline_doc = timeline_validation.load_timeline(folder)
if timeline_doc is not None:
    tl = st.expander("Step timeline: predicted vs measured, event by event (CPU)",
                     icon=":material/timeline:", key="timeline_open", on_change="rerun")
    if tl.open:
        tl.caption("An allocation tracker (a TorchDispatchMode following storages) measured the "
                   "bytes alive after every decoder layer's forward and backward, the loss, the "
                   "optimizer step and zero_grad; the line is that measurement, the stacked rows "
                   "the ledger's timeline for the same loop. " + timeline_validation.summary(timeline_doc))
        names = timeline_validation.run_names(timeline_doc)
        pick = tl.selectbox("Run", range(len(names)), format_func=names.__getitem__, key="pg_tl_run")
        with tl:
            ui.chart(timeline_validation.overlay(timeline_doc, pick), f"{stem}_timeline",
                     key="timeline_overlay")

with st.expander("How it was measured", icon=":material/science:"):
    st.markdown(HOW)

engine_section.render(folder)
finetune_section.render(folder)
titan_section.render(folder)
titan_gloo_section.render(folder)
megatron_section.render(folder)

if snapshot_section.render(res, stem):  # the snapshot is compared with the sidebar's configuration
    sidebar.draw(res)

ui.finish(res, SPECS, {"rows": tuple(rows) or data.ROW_ORDER, "env": env, "case": case},
          share=share)
