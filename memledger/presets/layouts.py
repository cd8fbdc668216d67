"""Where each model preset starts in the dashboard: the layout its authors published, or — when
they published none, or when the published recipe relies on settings the sidebar does not have —
a layout that fits an 80 GB GPU, chosen by us and labelled so.

Each entry overrides the dashboard's defaults (world 64, tp 8, pp 4, ZeRO-1, 8 micro-batches of
1 × 4,096 tokens, no recompute, 1F1B); `published` says whether the parallel layout is the
authors' own. A test checks that every start is valid and fits an H100 (79.6 GiB).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class StartLayout:
    settings: dict = field(default_factory=dict)  # dashboard keys (world, tp, pp, ...) -> value
    published: bool = False
    source: str = "memledger: a layout that fits an 80 GB GPU"
    gpu: str = ""  # the GPU preset the authors trained on, when the source names one


START: dict[str, StartLayout] = {
    "deepseek-v3": StartLayout(
        settings=dict(world=2048, tp=1, pp=16, ep=64, zero=1, schedule="dualpipe", m=32,
                      recompute="full"),
        published=True,
        source="DeepSeek-V3 technical report (arXiv 2412.19437) §3.2: 2,048 H800, 16-way PP "
               "(DualPipe), 64-way EP, ZeRO-1. Its FP8 activation storage and partial recompute "
               "are Strategies-page policies; the start uses full recompute instead",
        gpu="h800"),
    "kimi-k2": StartLayout(
        settings=dict(world=2048, tp=1, pp=16, ep=16, zero=1, m=16, recompute="full"),
        published=True,
        source="Kimi K2 technical report (arXiv 2507.20534) §2.4: 16-way PP, 16-way EP, ZeRO-1 "
               "on H800; world size and full recompute are memledger's choice",
        gpu="h800"),
    "llama3.1-405b": StartLayout(
        settings=dict(world=16384, tp=8, pp=16, zero=1, m=16, seq=8192, recompute="full"),
        published=True,
        source="The Llama 3 Herd of Models (arXiv 2407.21783) Table 4: 16,384 H100, TP 8, CP 1, "
               "PP 16, DP 128 at 8K tokens; full recompute is memledger's choice (Megatron's "
               "default selective, core_attn only, needs 82.4 GiB here)",
        gpu="h100"),
    "llama3-70b": StartLayout(),  # the dashboard's own defaults
    "llama3-8b": StartLayout(settings=dict(world=8, tp=2, pp=1, m=8)),
    "llama3.2-1b": StartLayout(settings=dict(world=8, tp=1, pp=1, m=8)),
    "mixtral-8x7b": StartLayout(settings=dict(world=64, tp=2, pp=4, ep=8, m=8)),
    "qwen3-30b-a3b": StartLayout(settings=dict(world=16, tp=2, pp=1, ep=8, m=8)),
    "qwen3-235b-a22b": StartLayout(settings=dict(world=256, tp=4, pp=8, ep=16, m=16)),
    "gpt3-175b": StartLayout(settings=dict(world=1024, tp=8, pp=16, m=16, seq=2048)),
    "korthikanti-22b": StartLayout(
        settings=dict(world=8, tp=8, pp=1, zero=0, mb=4, m=1, seq=2048, recompute="selective"),
        published=True, source="Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"),
    "korthikanti-175b": StartLayout(
        settings=dict(world=64, tp=8, pp=8, vpp=3, schedule="interleaved", zero=0, m=8,
                      seq=2048, recompute="selective"),
        published=True, source="Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"),
    "korthikanti-530b": StartLayout(
        settings=dict(world=280, tp=8, pp=35, vpp=3, schedule="interleaved", zero=0, m=35,
                      seq=2048, recompute="selective", layout="even"),
        published=True, source="Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"),
    "korthikanti-1t": StartLayout(
        settings=dict(world=512, tp=8, pp=64, zero=0, m=64, seq=2048, recompute="selective",
                      layout="even"),
        published=True, source="Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"),
}

# The settings a start layout replaces when a preset is chosen (everything but model and GPU).
LAYOUT_KEYS = ("world", "tp", "pp", "vpp", "ep", "etp", "cp", "zero", "sp", "schedule", "layout",
               "mb", "seq", "m", "recompute")


def start_layout(model: str) -> StartLayout | None:
    return START.get(model)
