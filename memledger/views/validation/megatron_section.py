"""The Validation page's Megatron-Core section: megatron-core 0.16.1's own code (GPTModel from
the local layer spec, DistributedDataParallel, DistributedOptimizer) run for one step on gloo
CPU processes, every rank, against the ledger re-derived now with the megatron profile and
loop. Reads validation/engine-megatron-core.json (`memledger validate --engine megatron-core
--out validation`); data from `memledger.engine.megatron_compare`, the section from
`engine_run`.
"""
from __future__ import annotations

from pathlib import Path

from memledger.engine.megatron_compare import rescore
from memledger.views.validation import engine_run
from memledger.views.validation.engine_run import EngineRun

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


RUN = EngineRun(
    engine="Megatron-Core", file=FILE, subheader="Megatron-Core's own code on CPU processes",
    install=("No Megatron-Core run stored: run `memledger validate --engine megatron-core --out "
             "validation` (needs `pip install -e '.[megatron]'`)."),
    rescore=rescore,
    scope="per-rank", key="megatron", chart="megatron-rows", how=HOW, rank_column=True,
    chart_title="Megatron-Core on the CPU: {case}",
    caption=lambda doc: (f"{len(doc['measurements'])} cases: megatron-core "
                         f"{doc['environment']['megatron_core']}, torch "
                         f"{doc['environment']['torch']}, {doc['environment']['backend']}, one "
                         "process per rank"))


def render(folder: Path) -> None:
    engine_run.render(RUN, folder)
