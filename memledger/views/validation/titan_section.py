"""The Validation page's torchtitan section: torchtitan 0.3.0's own code run for one step at
real scale (FakeTensorMode, fake process group, rank 0), against the ledger re-derived now
with the torchtitan loop (`fsdp2-mixed`, its AC modes). Reads validation/engine-torchtitan.json
(`memledger validate --engine torchtitan --out validation`); data from
`memledger.engine.titan_compare`, the chart from `engine_charts`.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from memledger.engine.titan_compare import rescore
from memledger.validation.report import worst_by_row
from memledger.views import ui
from memledger.views.validation import engine_charts as charts

FILE = "engine-torchtitan.json"
HOW = """
**Measured.** `memledger validate --engine torchtitan` runs torchtitan's own training code —
its config registry (`llama3_8b`, `llama3_70b`, `qwen3_32b`), model, `parallelize_fn` (FSDP2
with `MixedPrecisionPolicy(bf16, fp32)` over fp32 parameters, DTensor TP with sequence and loss
parallel, SelectiveAC's per-op save list or FullAC), optimizer container and chunked loss —
for one step under FakeTensorMode and the fake process group at 8-256 ranks, following every
storage op by op on rank 0. Weights, gradients and optimizer states are the local shards;
activations the bytes the forward leaves alive (FSDP units resharded); the peak the largest
live total over the step. Stand-ins: the compiled FlexAttention kernel is replaced by
`scaled_dot_product_attention` (the same saved tensors), RMSNorm by CUDA's fused
`_fused_rms_norm` autograd node (input and rstd saved, as on the GPU; the CPU build's composite
keeps fp32 copies), weight init values are skipped.

**Bars.** Static rows ±0.5 %, activations ±3 %, peak allocated ±5 % (issue 27).
"""


@st.cache_data(show_spinner="Re-predicting the torchtitan runs…", max_entries=4)
def _load(path: str, signature: tuple):
    del signature
    doc = json.loads(Path(path).read_text())
    return doc, rescore(doc)


def table(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"case": r["case"], "row": r["row"], "predicted": r["predicted_bytes"],
                          "measured": r["measured_bytes"], "error %": 100 * r["rel_error"],
                          "within": r["ok"]} for r in records])


def render(folder: Path) -> None:
    st.subheader("torchtitan's own code at real scale")
    path = folder / FILE
    if not path.exists():
        st.info("No torchtitan run stored: run `memledger validate --engine torchtitan "
                "--out validation` (needs `pip install -e '.[validation]'`).")
        return
    try:
        doc, records = _load(str(path), (path.stat().st_size, path.stat().st_mtime_ns))
    except (OSError, ValueError, KeyError, TypeError) as e:
        st.error(ui.md_escape(f"{FILE}: cannot be read as a torchtitan run ({e})"),
                 icon=":material/error:")
        return
    bad = [r for r in records if not r["ok"]]
    worst = worst_by_row(records)
    (st.success if not bad else st.warning)(
        f"{len(records) - len(bad)} of {len(records)} rank-0 predictions within the bar; worst "
        "|error|: " + ", ".join(f"{k} {100 * v:.2f}%" for k, v in worst.items()))
    env = doc["environment"]
    st.caption(f"{len(doc['measurements'])} cases: torchtitan {env['torchtitan']}, torch "
               f"{env['torch']}, {env['backend']}, spmd_backend {env['spmd_backend']}")
    cases = list(dict.fromkeys(r["case"] for r in records))
    case = st.selectbox("torchtitan case", cases, key="titan_case")
    shown = [{**r, "rank": 0, "pp_rank": 0} for r in records if r["case"] == case]
    ui.chart(charts.rows_figure(shown, case), "torchtitan-rows", key="titan_rows")
    st.dataframe(table(shown), hide_index=True, width="stretch", column_config={
        "error %": st.column_config.NumberColumn(format="%+.2f")})
    with st.expander("How the torchtitan runs were measured", icon=":material/hub:"):
        st.markdown(HOW)
