"""The Validation page's torchtitan section: torchtitan 0.3.0's own code run for one step at
real scale (FakeTensorMode, fake process group, one rank), against the ledger re-derived now
with the torchtitan loop (`fsdp2-mixed`, its AC modes). Reads validation/engine-torchtitan.json
(`memledger validate --engine torchtitan --out validation`); data from
`memledger.engine.titan_compare`, the section from `engine_run`.
"""
from __future__ import annotations

from pathlib import Path

from memledger.engine.titan_compare import rescore
from memledger.views.validation import engine_run
from memledger.views.validation.engine_run import EngineRun

FILE = "engine-torchtitan.json"
HOW = """
**Measured.** `memledger validate --engine torchtitan` runs torchtitan's own training code —
its config registry (`llama3_8b`, `llama3_70b`, `qwen3_32b`, `qwen3_30b_a3b`, `deepseek_v3_*`),
model, `parallelize_fn` (FSDP2 with `MixedPrecisionPolicy(bf16, fp32)` over fp32 parameters,
DTensor TP with sequence and loss parallel, CP's k, v all-gather, EP's token dispatcher,
SelectiveAC's per-op save list or FullAC) or `pipeline_llm` with torch's 1F1B / interleaved
schedule, the optimizer container and the chunked loss — for one step under FakeTensorMode and
the fake process group at 8-512 ranks, following every storage op by op on one rank (rank 0,
or the pp rank the case names). Weights, gradients and optimizer states are the local shards;
activations the bytes the forward leaves alive (FSDP units resharded); the peak the largest
live total over the step. Stand-ins: the compiled FlexAttention kernel is replaced by
`scaled_dot_product_attention` (the same saved tensors), RMSNorm by CUDA's fused
`_fused_rms_norm` autograd node (input and rstd saved, as on the GPU; the CPU build's composite
keeps fp32 copies), the MoE router gate makes the fp32 casts CUDA's autocast makes, weight init
values are skipped, EP's routed counts are balanced and PP's
P2P metadata is passed as rank 0 sends it (docs/torchtitan-accuracy.md says why each is needed).

**Bars.** Static rows ±0.5 %, activations ±3 %, peak allocated ±5 % (issue 27).
"""


RUN = EngineRun(
    engine="torchtitan", file=FILE, subheader="torchtitan's own code at real scale",
    install=("No torchtitan run stored: run `memledger validate --engine torchtitan --out "
             "validation` (needs `pip install -e '.[validation]'`)."),
    rescore=rescore,
    scope="rank-0", key="titan", chart="torchtitan-rows", how=HOW, rank_column=False,
    caption=lambda doc: (f"{len(doc['measurements'])} cases: torchtitan "
                         f"{doc['environment']['torchtitan']}, torch {doc['environment']['torch']}, "
                         f"{doc['environment']['backend']}, spmd_backend "
                         f"{doc['environment']['spmd_backend']}"))


def render(folder: Path) -> None:
    engine_run.render(RUN, folder)
