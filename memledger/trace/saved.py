"""One number from a trace: the saved-for-backward bytes of whatever `run` does (the CPU
stand-in for "activations" in memledger.validation, where no allocator can be asked).

Counts every storage autograd keeps once (parameters, buffers and their views excluded), the
input ids an embedding keeps included (8 bytes per token). Parameter copies (autocast's bf16
weight casts, alive from forward to backward) are left out unless asked for: they are sized
by the weights, not the tokens.
"""
from __future__ import annotations

from memledger.trace.tracer import trace_call


def saved_tensor_bytes(run, model, *, include_param_copies: bool = False) -> int:
    """`run()` does the forward(s) of `model` and returns what keeps their graphs alive."""
    tr = trace_call(model, run)
    return tr.total_bytes + (tr.param_copy_bytes if include_param_copies else 0)
