"""Record every tensor a PyTorch forward saves for backward, deduplicated by storage.

How: the forward runs under `torch.autograd.graph.saved_tensors_hooks`. Each save hands back a
small handle holding the tensor; a weak reference to the handle tells, after the forward,
whether the autograd node that saved it is still reachable (nodes of discarded branches, e.g.
router logits nobody uses, die with their outputs and their saves are not counted). The tracer
holds every saved storage (not the tensor, whose grad_fn would keep its own saves alive) until
the forward ends, so no address is reused while it deduplicates on (device, address, bytes).
Excluded: parameters, buffers, and any view of them (same storage). Copies of parameters
(autocast's weight casts, `.float()` of a weight) are kept but classed `param_copy`.
Attribution: forward pre/post hooks on every module keep a stack of qualified names; a save is
charged to the innermost running module, and to the first alive save of its storage. A storage
saved inside several layers (RoPE cos/sin computed once by the model) is charged outside the
layers, class `shared`; in a one-layer model it cannot be told apart and stays in layer 0.
Ignores: tensors saved outside the traced forward, memory held by the caching allocator, and
storages a custom autograd.Function keeps on `ctx` without `save_for_backward`.
torch is imported here only; `import memledger` does not need it.
"""
from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

from memledger.trace.classify import classify
from memledger.trace.records import PARAM_COPY, SHARED, SavedTensor, Trace

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")
# grad_fn nodes that only cast or re-view their single input: a chain of them ending at a
# parameter's AccumulateGrad makes the saved tensor a parameter copy.
_PASS_THROUGH = ("ToCopyBackward", "TBackward", "TransposeBackward", "ViewBackward",
                 "UnsafeViewBackward", "ExpandBackward", "UnsqueezeBackward", "PermuteBackward",
                 "SelectBackward", "SliceBackward", "ReshapeAliasBackward", "AliasBackward",
                 "CloneBackward", "SqueezeBackward")


class TraceError(ValueError):
    """The model or its inputs cannot be traced; the message says what to change."""


def layer_of(module: str) -> int | None:
    m = _LAYER.search(module)
    return int(m.group(1)) if m else None


class _Handle:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


@dataclass
class _Save:
    key: tuple
    ref: weakref.ref
    # The storage, not the tensor: a tensor would hold its grad_fn, and so its own saves, alive.
    storage: object  # strong reference until the trace is built (keeps addresses unique)
    module: str
    kind: str  # class name of the running module
    shape: tuple[int, ...]
    dtype: str
    tensor_bytes: int
    producer: str
    param_copy: bool


class SavedTensorTracer:
    """Context manager: `with SavedTensorTracer(model, tokens=b*s) as tr: out = model(**batch)`;
    then `tr.trace`. Keep `out` alive until the block ends: reachability is judged at exit."""

    def __init__(self, model, tokens: int = 0, meta: dict | None = None):
        import torch
        if not isinstance(model, torch.nn.Module):
            raise TraceError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.model, self.tokens, self.meta = model, tokens, dict(meta or {})
        self.trace: Trace | None = None
        self._saves: list[_Save] = []
        self._stack: list[tuple[str, str]] = [("", type(model).__name__)]
        self._hooks: list = []
        self._ctx = None
        self._excluded: set[tuple] = set()
        self._params: set[int] = set()

    # -- hooks -----------------------------------------------------------------------------
    def _pack(self, t):
        # Hold a detached alias (same storage and version counter): a saved *output* carries
        # its grad_fn, which owns this handle, so holding it would make a cycle that never dies.
        h = _Handle(t.detach())
        try:
            st = t.untyped_storage()
            key = (str(t.device), st.data_ptr(), st.nbytes())
        except (RuntimeError, NotImplementedError):  # storage-less tensor subclasses
            st, key = None, ("nostorage", id(t), t.numel() * t.element_size())
        if key[:2] not in self._excluded:
            module, kind = self._stack[-1]
            fn = getattr(t, "grad_fn", None)
            self._saves.append(_Save(
                key, weakref.ref(h), st, module, kind, tuple(int(d) for d in t.shape),
                str(t.dtype).removeprefix("torch."), t.numel() * t.element_size(),
                type(fn).__name__ if fn is not None else "", self._is_param_copy(t)))
        return h

    @staticmethod
    def _unpack(h):
        return h.tensor

    def __enter__(self):
        import torch
        named = {}
        for name, mod in self.model.named_modules():
            named.setdefault(id(mod), name)
        for p in list(self.model.parameters()) + list(self.model.buffers()):
            self._excluded.add((str(p.device), p.untyped_storage().data_ptr()))
        self._params = {id(p) for p in self.model.parameters()}

        def pre(mod, args):
            self._stack.append((named.get(id(mod), "?"), type(mod).__name__))

        def post(mod, args, out):
            if len(self._stack) > 1:
                self._stack.pop()

        for mod in self.model.modules():
            self._hooks.append(mod.register_forward_pre_hook(pre))
            self._hooks.append(mod.register_forward_hook(post, always_call=True))
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._ctx.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._ctx.__exit__(exc_type, exc, tb)
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        try:
            if exc_type is None:
                self.trace = self._build()
        finally:
            self._saves.clear()  # release the strong references
        return False

    # -- result ----------------------------------------------------------------------------
    def _is_param_copy(self, t) -> bool:
        fn = getattr(t, "grad_fn", None)
        for _ in range(6):
            if fn is None:
                return False
            name = type(fn).__name__
            if name == "AccumulateGrad":
                return id(fn.variable) in self._params
            if not name.startswith(_PASS_THROUGH):
                return False
            nxt = [f for f, _ in fn.next_functions if f is not None]
            if len(nxt) != 1:
                return False
            fn = nxt[0]
        return False

    def _build(self) -> Trace:
        first: dict[tuple, _Save] = {}
        views: dict[tuple, int] = {}
        layers: dict[tuple, set] = {}
        for s in self._saves:
            if s.ref() is None:  # the node that saved it is gone: not kept for backward
                continue
            first.setdefault(s.key, s)
            views[s.key] = views.get(s.key, 0) + 1
            layers.setdefault(s.key, set()).add(layer_of(s.module))
        rows = []
        for key, s in first.items():
            layer = layer_of(s.module)
            if s.param_copy:
                cls = PARAM_COPY
            elif len(layers[key]) > 1:  # saved by several layers (RoPE cos/sin): not one layer's
                cls, layer = SHARED, None
            else:
                cls = classify(s.module, s.kind, s.shape, s.dtype, s.producer)
            rows.append(SavedTensor(module=s.module, layer=layer, shape=s.shape, dtype=s.dtype,
                                    storage_bytes=int(key[2]), tensor_bytes=s.tensor_bytes,
                                    cls=cls, producer=s.producer, views=views[key]))
        return Trace(tensors=tuple(rows), tokens=self.tokens, meta=self.meta)


def trace_call(model, run, *, tokens: int = 0, meta: dict | None = None) -> Trace:
    """Run `run()` under the tracer and return what it saved. `run` does one or more forwards
    of `model` and returns whatever keeps their graphs alive (the losses, the outputs)."""
    import torch
    with SavedTensorTracer(model, tokens=tokens, meta=meta) as tr, torch.enable_grad():
        try:
            out = run()
        except Exception as e:  # say which step failed; keep the original as the cause
            raise TraceError(f"the traced forward failed: {type(e).__name__}: {e}") from e
    trace = tr.trace
    del out
    if not trace.tensors:
        raise TraceError("the forward saved nothing for backward: no parameter requires grad, "
                         "or the model ran under torch.no_grad / inference_mode")
    return trace


def trace_saved(model, inputs, *, autocast_dtype=None, tokens: int | None = None,
                meta: dict | None = None) -> Trace:
    """Run `model(**inputs)` (mapping) or `model(*inputs)` (tuple/list) once, with grad, and
    return what it saved for backward. `autocast_dtype` (e.g. torch.bfloat16) runs it under
    torch.autocast on the model's device. `tokens` defaults to the size of `input_ids`."""
    import contextlib

    import torch
    if not isinstance(model, torch.nn.Module):
        raise TraceError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(inputs, dict):
        call = lambda: model(**inputs)  # noqa: E731
        ids = inputs.get("input_ids")
    elif isinstance(inputs, (tuple, list)):
        call = lambda: model(*inputs)  # noqa: E731
        ids = inputs[0] if inputs else None
    else:
        raise TraceError(f"inputs must be a dict of keyword arguments or a tuple of positional "
                         f"arguments, got {type(inputs).__name__}")
    if tokens is None:
        tokens = int(ids.numel()) if isinstance(ids, torch.Tensor) else 0
    dev = next((p.device for p in model.parameters()), torch.device("cpu"))

    def run():
        amp = (torch.autocast(dev.type, dtype=autocast_dtype) if autocast_dtype is not None
               else contextlib.nullcontext())
        with amp:
            return call()
    return trace_call(model, run, tokens=tokens, meta=meta)
