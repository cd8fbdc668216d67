"""The Validation page's fine-tuning section: peft LoRA and frozen-module steps on the CPU
(validation/finetune-*.json, `memledger validate --finetune --out validation`), re-predicted by
the ledger as it is now (`memledger.validation.report.rescore`), row by row.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from memledger import safe_json
from memledger.validation.report import rescore, worst_by_row
from memledger.views import ui

MAX_FILE_BYTES = 5_000_000
HOW = """
**Measured.** Tiny Llama (4 and 8 layers), Qwen3-MoE and Mixtral models from configs, in bf16,
one training step on the CPU: LoRA through peft 0.21 (`get_peft_model`, fp32 adapters as peft
casts them), or `requires_grad_(False)` on the frozen modules; weights, gradients and AdamW
states summed from their tensors, activations = the storages autograd saved (the tracer).

**Known over-count.** With a frozen embedding nothing before layer 0 needs a gradient, so the
dropout of layer 0's q/k/v adapters keeps no mask; the ledger counts every layer's masks
(docs/finetune.md, limits): that is the whole miss of the dropout cases, exactly.
"""


@st.cache_data(show_spinner="Re-predicting the fine-tuning runs…", max_entries=4)
def _load(folder: str, signature: tuple):
    del signature
    records, problems = [], []
    for path in sorted(Path(folder).glob("finetune-*.json")):
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise ValueError(f"larger than {MAX_FILE_BYTES:,} bytes")
            records += rescore(safe_json.loads(path.read_bytes(), "file", MAX_FILE_BYTES))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            problems.append(f"{path.name} could not be used: {type(e).__name__}: {e}"[:300])
    return records, problems


def _signature(folder: Path) -> tuple:
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                 for p in sorted(folder.glob("finetune-*.json")))


def table(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"case": r["case"], "fine-tuning": r.get("finetune", ""),
                          "row": r["row"], "predicted": r["predicted_bytes"],
                          "measured": r["measured_bytes"], "error %": 100 * r["rel_error"],
                          "within": r["ok"]} for r in records])


def render(folder: Path) -> None:
    st.subheader("Fine-tuning: LoRA and frozen modules (CPU)")
    if not folder.is_dir():
        return
    records, problems = _load(str(folder), _signature(folder))
    for p in problems:
        st.error(ui.md_escape(p), icon=":material/error:")
    if not records:
        st.info("No fine-tuning runs stored: run `memledger validate --finetune --out validation`.")
        return
    bad = [r for r in records if not r["ok"]]
    worst = worst_by_row(records)
    sentence = (f"{len(records) - len(bad)} of {len(records)} predictions within the bar; worst: "
                + ", ".join(f"{k} {100 * v:.2f}%" for k, v in worst.items()))
    (st.success if not bad else st.warning)(sentence)
    st.dataframe(table(records), hide_index=True, width="stretch", column_config={
        "error %": st.column_config.NumberColumn(format="%+.3f")})
    with st.expander("How the fine-tuning runs were measured", icon=":material/tune:"):
        st.markdown(HOW)
