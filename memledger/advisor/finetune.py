"""Fine-tuning as a currency: what freezing parameters and training adapters buys.

Each option re-runs the ledger with a FinetuneSpec (specs/finetune.py) on top of the current
configuration and reports the trainable fraction (trainable parameters of the most loaded rank
÷ its parameters) against the bytes saved at the peak. The price is not memory but what is
trained: a LoRA of rank r trains r·(in + out) values per target matrix (Hu et al. 2021 §4.1);
QLoRA also pays NF4's quantisation error on the base (4 bits per value, Dettmers et al. 2023
§3). Options already in force, or refused by the core, are listed with their reason.
Ignores: the quality of the fine-tuned model (that is the trainer's question).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from memledger.advisor.moves import evaluate
from memledger.ledger import Ledger
from memledger.specs.finetune import FinetuneSpec

OPTIONS = (
    ("freeze embeddings and head", FinetuneSpec(mode="freeze", freeze=("embeddings", "head"))),
    ("freeze the first half of the layers", None),  # the layer range depends on the model
    ("LoRA r=16 on q_proj, v_proj (peft default targets)",
     FinetuneSpec(mode="lora", lora_rank=16, lora_alpha=32)),
    ("LoRA r=16 on all-linear", FinetuneSpec(mode="lora", lora_rank=16, lora_alpha=32,
                                             lora_targets=("all-linear",))),
    ("QLoRA NF4 r=16 on all-linear (bf16 adapters)",
     FinetuneSpec(mode="qlora", lora_rank=16, lora_alpha=32, lora_targets=("all-linear",),
                  lora_dtype="bf16", base_weights="nf4")),
)


@dataclass(frozen=True)
class FinetuneOption:
    label: str
    trainable_pct: float  # trainable parameters of the most loaded rank, % of its parameters
    saved_bytes: int  # peak_total saved on the most loaded rank (-1 when invalid)
    peak_bytes: int
    fits: bool
    error: str = ""


@dataclass(frozen=True)
class FinetuneAnswer:
    mode: str  # the current fine-tuning mode
    trainable_pct: float
    options: tuple[FinetuneOption, ...]


def trainable_pct(led: Ledger) -> float:
    """Trainable share of the most loaded rank's parameters (from its static items)."""
    from memledger.ledger.pipeline.placement import stage_placement
    from memledger.ledger.static.held import held_groups
    from memledger.ledger.static.rows import local_params
    from memledger.specs.loop import built_model
    built = built_model(led.model, led.loop)
    held = held_groups(built, led.parallel, led.train,
                       stage_placement(built, led.parallel, led.most_loaded_rank), led.loop)
    total = sum(local_params(h, led.parallel) for h in held)
    live = sum(local_params(h, led.parallel) for h in held if not h.group.frozen)
    return 100.0 * live / total if total else 0.0


def finetune_answer(led: Ledger, target: int) -> FinetuneAnswer:
    peak, t, out = led.peak.peak_total_bytes, led.train, []
    for label, spec in OPTIONS:
        if spec is None:
            spec = FinetuneSpec(mode="freeze", freeze=(f"layers:0-{led.model.n_layers // 2 - 1}",))
        if spec == t.finetune:
            continue
        c = evaluate(label, led, train=replace(t, finetune=spec))
        if c.ledger is None:
            out.append(FinetuneOption(label, 0.0, -1, -1, False, c.error))
            continue
        out.append(FinetuneOption(label, trainable_pct(c.ledger), peak - c.peak_bytes,
                                  c.peak_bytes, c.fits(target)))
    return FinetuneAnswer(mode=t.finetune.mode, trainable_pct=trainable_pct(led),
                          options=tuple(out))
