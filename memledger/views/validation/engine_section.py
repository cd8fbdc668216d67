"""The Validation page's engine section: every rank of real torch.distributed steps (FSDP2,
DDP + ZeroRedundancyOptimizer, DTensor TP+SP, pipelining) and fake-mode runs at 64-1024 ranks,
against the ledger re-derived now. Reads validation/engine-*.json (`memledger validate
--engine torch --out validation`); charts from `engine_charts`, data from `memledger.engine.compare`.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from memledger.engine.compare import load_runs, rescore, tracker_rows
from memledger.validation.report import worst_by_row
from memledger.views import export, ui
from memledger.views.validation import engine_charts as charts

HOW = """
**Measured.** `memledger validate --engine torch` turns a ledger configuration into a real
PyTorch distributed step: FSDP2 `fully_shard` with reshard after forward on (ZeRO-3) and off
(ZeRO-2), DDP + `ZeroRedundancyOptimizer` (ZeRO-1), DTensor tensor + sequence parallelism
(torchtitan's plan, loss parallel), `torch.distributed.pipelining` GPipe, 1F1B and interleaved
1F1B, and combinations. *CPU* cases run 2-4 gloo processes with real tensors; *fake* cases run
the same code under FakeTensorMode and the fake process group at 64-1024 ranks with real
Llama-3 / Mixtral / Qwen3-MoE shapes (fewer layers). Per rank: parameters, gradients and
optimizer states summed from their storages, activations = saved-for-backward storages alive
at the rank's first backward, peak = a storage-following dispatch mode over the step, and the
micro-batches each chunk has run by its first backward (the staircase).

**FSDPMemTracker** is PyTorch's own estimator (`torch.distributed._tools`), run on the same
step where it can (FSDP2, one micro-batch). It equals the measured peak on 1-D FSDP meshes;
on the fake-scale TP × FSDP cases (3.3×) it also counts DTensor's sharding propagation, which
re-runs every op on global-shape fake tensors inside the same FakeTensorMode the tracker
entered with, so its skip test lets them through: given a fake mode of its own, the
tracker's activations equal the measured ones and its total falls to 1.21× (docs/engine-validation.md).

**Bars.** Static rows ±0.5%, activations ±3%, peak ±10%; held micro-batches exactly.
"""


@st.cache_data(show_spinner="Re-predicting the engine runs…", max_entries=4)
def _load(folder: str, signature: tuple):
    del signature
    docs, problems = load_runs(Path(folder))
    records = [{**r, "scale": d["scale"]} for d in docs for r in rescore(d)]
    return docs, problems, records, tracker_rows(docs)


def _signature(folder: Path) -> tuple:
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                 for p in sorted(folder.glob("engine-*.json")))


def table(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"scale": r["scale"], "case": r["case"], "rank": r["rank"],
                          "pp rank": r["pp_rank"], "row": r["row"],
                          "predicted": r["predicted_bytes"], "measured": r["measured_bytes"],
                          "error %": 100 * r["rel_error"], "within": r["ok"]} for r in records])


def render(folder: Path) -> None:
    st.subheader("Per rank: PyTorch's distributed engine")
    docs, problems, records, trackers = _load(str(folder), _signature(folder))
    for p in problems:
        st.error(ui.md_escape(p), icon=":material/error:")
    if not records:
        st.info("No engine runs stored: run `memledger validate --engine torch --scale all "
                "--out validation`.")
        return
    bad = [r for r in records if not r["ok"]]
    worst = worst_by_row(records)
    sentence = (f"{len(records) - len(bad)} of {len(records)} per-rank predictions within the bar; "
                "worst: " + ", ".join(f"{k} {100 * v:.2f}%" for k, v in worst.items()
                                      if k != "held"))
    (st.success if not bad else st.warning)(sentence)
    for d in docs:
        env = d["environment"]
        st.caption(f"**{d['scale']}** ({len(d['measurements'])} cases): torch {env['torch']}, "
                   f"transformers {env['transformers']}, {env['backend']}")
    cases = list(dict.fromkeys(r["case"] for r in records))
    case = st.selectbox("Engine case", cases, key="engine_case")
    ui.chart(charts.rank_parity_figure(records, case), export.file_stem("validation-engine-per-rank", case), key="engine_parity")
    if any(r["case"] == case and r["row"] == "held" for r in records):
        ui.chart(charts.staircase_figure(records, case), export.file_stem("validation-engine-staircase", case), key="engine_stairs")
    if trackers:
        ui.chart(charts.trackers_figure(trackers), export.file_stem("validation-engine-trackers"), key="engine_trackers")
    shown = [r for r in records if r["case"] == case]
    st.dataframe(table(shown), hide_index=True, width="stretch", column_config={
        "error %": st.column_config.NumberColumn(format="%+.3f")})
    with st.expander("How the engine runs were measured", icon=":material/hub:"):
        st.markdown(HOW)
