"""The sidebar's GPU choice: a preset, or a custom GPU from four numbers (Streamlit glue).

A custom GPU is one value of the shared `gpu` setting, `custom:<GiB>,<NVLink GB/s>,<network
GB/s>,<bf16 TFLOP/s>` (memledger.presets.gpus.custom_gpu: bounded, validated), so the share
link carries it like any preset. Its four inputs write that value back on change.
"""
from __future__ import annotations

import streamlit as st

from memledger.presets import GPUS, gpu
from memledger.presets.gpus import CUSTOM, CUSTOM_LIMITS
from memledger.units import gib
from memledger.views.sync import W

DEFAULT_CUSTOM = "custom:80,450,50,989"  # an H100's numbers, to edit from
KEY = W + "custom_"  # widget keys under the sidebar's prefix: a new link clears them


def _name(key: str) -> str:
    if key.startswith(CUSTOM):
        return f"Custom GPU… ({gib(gpu(key).hbm_bytes):,.0f} GiB)"
    return f"{GPUS[key].name} ({gib(GPUS[key].hbm_bytes):,.1f} GiB)"


def _write() -> None:
    ss = st.session_state
    ss[W + "gpu"] = CUSTOM + ",".join(str(int(ss[KEY + f])) for f, *_ in CUSTOM_LIMITS)


def gpu_choice(current: str, help_text: str) -> None:
    """The GPU selectbox, and the custom GPU's inputs while one is chosen."""
    custom = current.startswith(CUSTOM)
    options = list(GPUS) + [current if custom else DEFAULT_CUSTOM]
    st.selectbox("GPU", options, key=W + "gpu", help=help_text, format_func=_name)
    if not custom:
        return
    values = current[len(CUSTOM):].split(",")
    ss = st.session_state
    cols = st.columns(2)
    for i, ((field, label, lo, hi), raw) in enumerate(zip(CUSTOM_LIMITS, values)):
        if ss.get(KEY + field) != int(raw):
            ss[KEY + field] = int(raw)
        cols[i % 2].number_input(label, lo, hi, key=KEY + field, on_change=_write,
                                 help="Carried by the share link as gpu=" + current)
    st.caption(gpu(current).source)
