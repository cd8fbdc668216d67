"""Time to build the ledger of a LoRA / QLoRA fine-tuning run of Llama-3 70B at tp 8 pp 4 (the
issue's target: <= 5 ms), cold (every cache cleared: a new configuration) and warm.

Run: python benchmarks/bench_finetune.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_ledger import bench  # noqa: E402

from memledger import ParallelSpec, TrainSpec, model  # noqa: E402
from memledger.specs.finetune import FinetuneSpec  # noqa: E402

P = ParallelSpec(tp=8, pp=4, dp=1, sp=True)
CASES = {
    "Llama-3 70B LoRA r16 all-linear tp8 pp4": (
        model("llama3-70b"), P,
        TrainSpec(seq=4096, micro_batches=8, finetune=FinetuneSpec(
            mode="lora", lora_rank=16, lora_alpha=32, lora_targets=("all-linear",),
            lora_dropout_pct=5))),
    "Llama-3 70B QLoRA nf4 r64 all-linear tp8 pp4 (hf profile)": (
        model("llama3-70b"), P,
        TrainSpec(seq=4096, micro_batches=8, profile="hf", finetune=FinetuneSpec(
            mode="qlora", lora_rank=64, lora_targets=("all-linear",), base_weights="nf4"))),
    "Llama-3 70B freeze layers 0-39 tp8 pp4": (
        model("llama3-70b"), P,
        TrainSpec(seq=4096, micro_batches=8, finetune=FinetuneSpec(
            mode="freeze", freeze=("embeddings", "layers:0-39")))),
}

if __name__ == "__main__":
    for name, case in CASES.items():
        print(f"{name}: cold {bench(case):.2f} ms wall / {bench(case, clock=time.process_time):.2f}"
              f" ms CPU, warm {bench(case, cold=False):.2f} ms wall (median of 50; target 5 ms)")
