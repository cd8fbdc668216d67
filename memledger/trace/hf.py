"""Trace a Hugging Face causal LM the way it trains: `labels=` included, so the loss (and the
fp32 log-probabilities cross-entropy keeps) is part of the traced forward.

The model is put in train mode; nothing is downloaded (build models from configs). torch and
transformers are imported by the caller, never here at import time.
"""
from __future__ import annotations

from memledger.trace.records import Trace
from memledger.trace.tracer import TraceError, trace_saved


def trace_causal_lm(model, batch: int = 1, seq: int = 128, *, autocast_dtype=None,
                    seed: int = 0, meta: dict | None = None) -> Trace:
    """Random token ids of shape (batch, seq) as inputs and labels; one traced forward."""
    import torch
    if not isinstance(model, torch.nn.Module):
        raise TraceError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if batch < 1 or seq < 1:
        raise TraceError(f"batch and seq must be >= 1, got batch={batch}, seq={seq}")
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if not vocab:
        raise TraceError("model has no config.vocab_size: pass inputs to trace_saved instead")
    dev = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=g).to(dev)
    model.train()
    info = {"model": type(model).__name__, "batch": batch, "seq": seq,
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
            "experts_implementation": getattr(model.config, "_experts_implementation", None),
            "autocast": str(autocast_dtype) if autocast_dtype is not None else None, **(meta or {})}
    return trace_saved(model, {"input_ids": ids, "labels": ids}, autocast_dtype=autocast_dtype,
                       meta=info)
