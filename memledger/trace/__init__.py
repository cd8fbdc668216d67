"""Saved-tensor tracing: measure what any PyTorch forward keeps for backward.

    from memledger.trace import trace_saved, trace_causal_lm, SavedTensorTracer
    tr = trace_causal_lm(model, batch=1, seq=256)          # HF causal LM, loss included
    tr.layer_bytes(), tr.outside_bytes, tr.by_class(0), tr.to_json()
    trace_call(model, lambda: [model(**b).loss for b in batches])  # any forward(s)
    memledger.trace.saved.saved_tensor_bytes(run, model)         # one number
    memledger.trace.profile.register_traced("x.json")            # -> "traced:x" profile

torch is imported lazily inside the tracing functions: `import memledger.trace` works without it,
and `Trace.from_json` reads a saved trace anywhere.
"""
from memledger.trace.classify import classify
from memledger.trace.hf import trace_causal_lm
from memledger.trace.records import PARAM_COPY, SHARED, SavedTensor, Trace
from memledger.trace.tracer import SavedTensorTracer, TraceError, layer_of, trace_call, trace_saved

__all__ = ["PARAM_COPY", "SHARED", "SavedTensor", "SavedTensorTracer", "Trace", "TraceError",
           "classify", "layer_of", "trace_call", "trace_causal_lm", "trace_saved"]
