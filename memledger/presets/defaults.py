"""The one starting configuration: what the dashboard opens with and what every CLI flag left out
means. A 70B dense model on 64 H100s with tensor parallelism inside the node (tp 8), four pipeline
stages with the first and last one lighter (balanced layout), ZeRO-1 over the remaining data
parallelism (dp 2), 8 micro-batches of one 4,096-token sequence — a layout that fits an 80 GB GPU
with room, and a staircase worth looking at. Each model preset may start elsewhere when chosen in
the sidebar (memledger.presets.layouts); links and the CLI start here.
"""
from __future__ import annotations

from types import MappingProxyType

DEFAULTS = MappingProxyType(dict(
    model="llama3-70b", gpu="h100", world=64, tp=8, pp=4, vpp=1, ep=1, etp=1, cp=1, zero=1,
    sp=True, schedule="1f1b", layout="balanced", micro_batch=1, seq=4096, micro_batches=8,
    precision="megatron", optimizer="adamw", profile="megatron", attention="flash",
    recompute="none"))
