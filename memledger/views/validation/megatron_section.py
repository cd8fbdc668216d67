"""The Validation page's Megatron-Core section: megatron-core 0.16.1's own code (GPTModel from
the local layer spec, DistributedDataParallel, DistributedOptimizer) run for one step on gloo
CPU processes, every rank, against the ledger re-derived now with the megatron profile and
loop. Reads validation/engine-megatron-core.json (`memledger validate --engine megatron-core
--out validation`); data from `memledger.engine.megatron_compare`, the chart from
`engine_charts`.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from memledger.engine.megatron_compare import rescore
from memledger.validation.report import worst_by_row
from memledger.views import ui
from memledger.views.validation import engine_charts as charts

FILE = "engine-megatron-core.json"
HOW = """
**Measured.** `memledger validate --engine megatron-core` runs Megatron-Core's own training
code — `GPTModel` from `get_gpt_layer_local_spec(normalization="RMSNorm")` (no Transformer
Engine, no Apex) in `Float16Module`, `DistributedDataParallel` (bf16 parameter and fp32 gradient
buffers), `get_megatron_optimizer` (DistributedOptimizer over torch's AdamW) and
`get_forward_backward_func()` — for one step on one gloo process per rank, following every
storage op by op. Weights and gradients are DDP's buffers, optimizer states the main-parameter
shards and AdamW's moments, activations the bytes the forward (loss included) leaves alive,
per layer the saved tensors each decoder layer's forward packed.
Stand-ins where the CPU cannot run Megatron's CUDA calls: `torch.cuda.current_device()` and
`device="cuda"` answer the CPU, the CUDA RNG tracker's fork is a null context (dropout 0),
core attention is `scaled_dot_product_attention` (flash attention's saved set; one case runs
Megatron's DotProductAttention) and RMSNorm keeps what the CUDA kernels keep (one case runs
torch's CPU dispatch). Sequence parallel is refused by the local spec's torch norm.

**Bars.** Static rows ±0.5 %, activations ±3 %, peak allocated ±5 % (issue 27).
"""


@st.cache_data(show_spinner="Re-predicting the Megatron-Core runs…", max_entries=4)
def _load(path: str, signature: tuple):
    del signature
    doc = json.loads(Path(path).read_text())
    return doc, rescore(doc)


def table(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"rank": r["rank"], "row": r["row"], "predicted": r["predicted_bytes"],
                          "measured": r["measured_bytes"], "error %": 100 * r["rel_error"],
                          "within": r["ok"]} for r in records])


def render(folder: Path) -> None:
    st.subheader("Megatron-Core's own code on CPU processes")
    path = folder / FILE
    if not path.exists():
        st.info("No Megatron-Core run stored: run `memledger validate --engine megatron-core "
                "--out validation` (needs `pip install -e '.[megatron]'`).")
        return
    try:
        doc, records = _load(str(path), (path.stat().st_size, path.stat().st_mtime_ns))
    except (OSError, ValueError, KeyError, TypeError) as e:
        st.error(ui.md_escape(f"{FILE}: cannot be read as a Megatron-Core run ({e})"),
                 icon=":material/error:")
        return
    bad = [r for r in records if not r["ok"]]
    worst = worst_by_row(records)
    (st.success if not bad else st.warning)(
        f"{len(records) - len(bad)} of {len(records)} per-rank predictions within the bar; worst "
        "|error|: " + ", ".join(f"{k} {100 * v:.2f}%" for k, v in worst.items()))
    env = doc["environment"]
    st.caption(f"{len(doc['measurements'])} cases: megatron-core {env['megatron_core']}, torch "
               f"{env['torch']}, {env['backend']}, one process per rank")
    cases = list(dict.fromkeys(r["case"] for r in records))
    case = st.selectbox("Megatron-Core case", cases, key="megatron_case")
    shown = [r for r in records if r["case"] == case]
    first = [{**r, "pp_rank": 0} for r in shown if r["rank"] == 0]
    ui.chart(charts.rows_figure(first, case, engine="Megatron-Core",
                                title=f"Megatron-Core on the CPU: {case}"),
             "megatron-rows", key="megatron_rows")
    st.dataframe(table(shown), hide_index=True, width="stretch", column_config={
        "error %": st.column_config.NumberColumn(format="%+.2f")})
    with st.expander("How the Megatron-Core runs were measured", icon=":material/hub:"):
        st.markdown(HOW)
