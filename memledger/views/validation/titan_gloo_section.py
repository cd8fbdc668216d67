"""The Validation page's torchtitan-for-real section: torchtitan 0.3.0's own code at small sizes
on gloo CPU processes with real tensors (every rank measured), against the ledger, and against
the same case under fake mode at the same world size — the check of the fake-mode harness
itself. Reads validation/engine-torchtitan-gloo.json (`memledger validate --engine torchtitan
--backend gloo --out validation`); ledger rows from `titan_compare.rescore`, fake − real bytes
from `titan_compare.fake_vs_real`, the ledger part of the section from `engine_run`.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from memledger.engine.titan_compare import fake_vs_real, rescore
from memledger.views.validation import engine_run
from memledger.views.validation.engine_run import EngineRun

FILE = "engine-torchtitan-gloo.json"
HOW = """
**Measured.** `memledger validate --engine torchtitan --backend gloo` runs the same harness as
the real-scale section — torchtitan's config registry (`llama3_debugmodel`: dim 256, 6 layers,
vocab 2048), `parallelize_fn` (FSDP2 over fp32 parameters with `MixedPrecisionPolicy(bf16,
fp32)`, DTensor TP with sequence and loss parallel, CP's k, v all-gather, SelectiveAC /
FullAC; `pipeline_llm` with torch's 1F1B over gloo's real P2P), optimizer container and
chunked loss — with real tensors, one gloo CPU process per rank, every rank measured by the
same storage-following probe; then the same case under FakeTensorMode and the fake process group
at the same world size. Two stand-ins more than under fake mode, both for gloo: the CPU has no
`_fused_rms_norm_backward` kernel (torch's own decomposition is registered as one) and gloo
refuses FSDP2's `PREMUL_SUM(1.0)` reduce-scatter (the same sum as `SUM`); the ops gloo runs
inside `Work.wait` (a reduce-scatter's temporary copy of its input) are not counted, as NCCL
keeps those in its own buffers (docs/engine-validation.md).

**Fake vs real.** Real − fake bytes per rank and row (under PP against fake mode's run of
the same pp rank); the harness's claim is 0 everywhere.

**Bars.** Static rows ±0.5 %, activations ±3 %, peak allocated ±5 % (issue 27).
"""

RUN = EngineRun(
    engine="torchtitan (gloo)", file=FILE,
    subheader="torchtitan's own code at small sizes for real (gloo)",
    install=("No gloo run of torchtitan stored: run `memledger validate --engine torchtitan "
             "--backend gloo --out validation` (needs `pip install -e '.[validation]'`)."),
    rescore=rescore,
    scope="rank-0", key="titan_gloo", chart="torchtitan-gloo-rows", how=HOW, rank_column=False,
    caption=lambda doc: (f"{len(doc['measurements'])} cases on "
                         f"{sorted({len(e['ranks']) for e in doc['measurements']})} gloo "
                         f"processes: torchtitan {doc['environment']['torchtitan']}, torch "
                         f"{doc['environment']['torch']}"))


def fake_real_table(doc: dict) -> pd.DataFrame:
    return pd.DataFrame([{"case": d["case"], "rank": d["rank"], "row": d["row"],
                          "fake": d["fake_bytes"], "real": d["real_bytes"],
                          "real − fake": d["diff_bytes"]}
                         for e in doc["measurements"] for d in fake_vs_real(e)])


def render(folder: Path) -> None:
    engine_run.render(RUN, folder)
    path = folder / FILE
    if not path.exists():
        return
    try:
        doc, _ = engine_run.load_run(RUN, path)
        frame = fake_real_table(doc)
    except (OSError, ValueError, KeyError, TypeError):
        return  # engine_run.render has shown the error line
    off = frame[frame["real − fake"] != 0]
    (st.success if off.empty else st.warning)(
        f"Fake mode vs the real gloo run: {len(frame) - len(off)} of {len(frame)} rank rows "
        "equal to the byte" + ("" if off.empty else f"; differing: {len(off)}"))
    st.dataframe(frame, hide_index=True, width="stretch", key="titan_gloo_fake_real")
