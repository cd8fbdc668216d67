"""What one rank holds, measured from the tensors themselves (torch, imported by workers).

- Static rows: local storage bytes of the rank's parameters, gradients and optimizer states
  (a DTensor counts its local shard; FSDP2's sharded parameters are DTensors; DDP's gradients
  are views of its buckets with gradient_as_bucket_view=True, counted by element).
- Activations: `SavedProbe`, a saved-tensor hook that keeps a weak reference to every storage
  autograd saves (parameters, their views and FSDP2's unsharded parameters excluded) and, at the
  first unpack — the first backward on this rank — sums the storages still alive, each once.
  At that moment it also reads how many forwards each model chunk has run: the micro-batches
  the rank holds at its first backward, the pipeline staircase as the schedule really ran it.
  Under full recompute a checkpointed layer's inputs are held by the checkpoint's frame, not
  packed as saved tensors (torch.utils.checkpoint, non-reentrant): the probe adds the tensor
  inputs of every `CheckpointWrapper` call (RoPE's cos/sin, which the layers share).
- Peak and timeline: `LiveBytes`, a TorchDispatchMode following storages (torch's MemTracker
  idea, without its one-call-per-module limit); a functional collective's `wait_tensor` output
  counts as its input's storage, as the real op returns it, also under FakeTensorMode. FSDP2 cases with one micro-batch also run
  PyTorch's FSDPMemTracker, which itemises all-gather and reduce-scatter buffers.
Source: torch 2.13 torch/autograd/graph.py (saved_tensors_hooks), torch/distributed/_tools.
"""
from __future__ import annotations

import weakref

import torch
from torch import nn


def local(t):
    return t._local_tensor if hasattr(t, "_local_tensor") else t


def nbytes(t) -> int:
    t = local(t)
    return t.numel() * t.element_size()


def static_rows(modules, states: list[dict]) -> dict[str, int]:
    params = {id(p): p for m in modules for p in m.parameters()}.values()
    opt = 0
    for st in states:
        for s in st.values():
            opt += sum(nbytes(v) for v in s.values() if isinstance(v, torch.Tensor))
    return {"weights": sum(nbytes(p) for p in params),
            "gradients": sum(nbytes(p.grad) for p in params if p.grad is not None),
            "optimizer": opt}


def unsharded_bytes(model) -> int:
    """Bytes of the FSDP2 units' unsharded parameters alive now (local storages, each once: the
    parameters of a unit may be views of one all-gather output, e.g. torchtitan's [norm,
    output] unit under TP)."""
    from torch.distributed.fsdp import FSDPModule

    seen: dict[int, int] = {}
    for m in model.modules():
        # experts on their own (efsdp) mesh make a second param group in the block's state
        groups = m._get_fsdp_state()._fsdp_param_groups if isinstance(m, FSDPModule) else ()
        for fp in (fp for g in groups if g is not None for fp in g.fsdp_params):
            u = getattr(fp, "_unsharded_param", None)
            if u is not None:
                st = local(u).untyped_storage()
                seen[id(st)] = st.nbytes()
    return sum(seen.values())


def _is_param(t) -> bool:
    while t is not None:
        if isinstance(t, nn.Parameter):
            return True
        t = t._base
    return False


class SavedProbe:
    """Saved-for-backward bytes alive at the first backward, and forwards run per chunk."""

    def __init__(self, chunks: dict[int, nn.Module]):
        self.live: list[tuple[weakref.ref, int, int]] = []
        self.forwards = {s: 0 for s in chunks}
        self.at_first_backward: dict | None = None
        self._hooks = [m.register_forward_pre_hook(self._counter(s)) for s, m in chunks.items()]
        self._hooks += [m.register_forward_pre_hook(self._frame, with_kwargs=True)
                        for c in chunks.values() for m in c.modules()
                        if type(m).__name__ == "CheckpointWrapper"]
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _counter(self, s):
        def hook(_mod, _args):
            self.forwards[s] += 1
        return hook

    def _frame(self, _mod, args, kwargs):
        from torch.utils._pytree import tree_flatten
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor):
                self._pack(t)

    def _pack(self, t):
        if not _is_param(t):
            st = local(t).untyped_storage()
            if st.nbytes():
                self.live.append((weakref.ref(st), id(st), st.nbytes()))
        return t

    def _unpack(self, t):
        if self.at_first_backward is None:
            alive = {ptr: n for ref, ptr, n in self.live if ref() is not None and ref().nbytes()}
            self.at_first_backward = {"activations": sum(alive.values()),
                                      "held": dict(self.forwards)}
        return t

    def __enter__(self):
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)
        for h in self._hooks:
            h.remove()
        self.live.clear()


class LiveBytes:
    """Live tensor bytes on this rank, op by op: a TorchDispatchMode that follows every storage
    an op returns (a DTensor's local shard, through __tensor_flatten__) until Python frees it,
    and storage resizes (FSDP2 frees and re-allocates unsharded parameters with
    UntypedStorage.resize_). Tensors alive before the step are registered with `track`.
    Keeps the peak and a timeline of (op index, live bytes), at most `points` samples, each the
    maximum over its stretch of ops. Same idea as torch's MemTracker, which refuses a module
    called more than once per step (micro-batches)."""

    def __init__(self, points: int = 240):
        self.sizes: dict[int, int] = {}
        self.current = self.peak = 0
        self.samples: list[int] = []
        self.points = points
        self.origin: dict[int, str] = {}  # storage -> the op that made it ("before" = tracked)
        self.peak_origin: dict[int, tuple[str, int]] = {}
        self._snap = 0
        self._op = "before"

    def _finalizer(self, key):
        def gone():
            self.current -= self.sizes.pop(key, 0)
            self.origin.pop(key, None)
        return gone

    def _storage(self, st) -> None:
        key = id(st)
        if key in self.sizes:
            return
        self.sizes[key] = st.nbytes()
        self.origin[key] = self._op
        self.current += st.nbytes()
        weakref.finalize(st, self._finalizer(key))

    def track(self, *tensors) -> None:
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                continue
            if hasattr(t, "__tensor_flatten__") and type(t) is not torch.Tensor \
                    and not isinstance(t, nn.Parameter):
                names, _ = t.__tensor_flatten__()
                self.track(*(getattr(t, n) for n in names))
                continue
            if isinstance(t, nn.Parameter) and hasattr(t.data, "__tensor_flatten__") \
                    and type(t.data) is not torch.Tensor:
                self.track(t.data)
                continue
            self._storage(t.untyped_storage())
        self._sample()

    def _sample(self) -> None:
        if self.current > self.peak:
            self.peak = self.current
            # the breakdown is re-taken when the peak has grown by 0.5% since the last one (a
            # copy per new peak would be quadratic in a forward, where almost every op is one)
            if self.current * 200 >= self._snap * 201:
                self.peak_origin = {k: (op, self.sizes[k]) for k, op in self.origin.items()}
                self._snap = self.current
        self.samples.append(self.current)

    def at_peak(self, top: int = 12) -> dict[str, int]:
        """Bytes alive at the peak (within 0.5%) by the op that allocated them (largest `top`)."""
        by: dict[str, int] = {}
        for op, n in self.peak_origin.values():
            by[op] = by.get(op, 0) + n
        return dict(sorted(by.items(), key=lambda kv: -kv[1])[:top])

    def _resized(self, st, size) -> None:
        key = id(st)
        if key not in self.sizes:
            self._storage(st)
        else:
            self.current += st.nbytes() - self.sizes[key]
            self.sizes[key] = st.nbytes()
        self._sample()

    def _waited(self, t, out) -> None:
        """`_c10d_functional.wait_tensor` returns its input (Functional.cpp); its Meta kernel,
        which FakeTensorMode runs, returns `empty_like(input)` (_functional_collectives.py
        `_wait_tensor_meta`), a second storage. Counted as the real op: the input's storage,
        alive while either tensor is."""
        st, new = t.untyped_storage(), out.untyped_storage()
        if new is not st and id(new) not in self.sizes:
            self.track(t)
            key = id(new)  # known, 0 bytes: views of the output count nothing more
            self.sizes[key] = 0
            weakref.finalize(new, lambda kept=st: self.sizes.pop(key, None))  # holds the input
        else:
            self.track(out)

    def timeline(self) -> list[int]:
        n = len(self.samples)
        step = max(1, -(-n // self.points))
        return [max(self.samples[i:i + step]) for i in range(0, n, step)]

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten
        probe = self
        orig = torch.UntypedStorage.resize_

        wait = torch.ops._c10d_functional.wait_tensor.default

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                probe._op = str(func.__name__)
                if func is wait:
                    probe._waited(args[0], out)
                    return out
                probe.track(*tree_flatten(out)[0])
                return out

        def resize_(st, size):
            r = orig(st, size)
            probe._op = "storage.resize_"
            probe._resized(st, size)
            return r
        self._orig, self._mode = orig, Mode()
        torch.UntypedStorage.resize_ = resize_
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        torch.UntypedStorage.resize_ = self._orig


def fsdp_tracker(model, optimizer, inputs):
    """PyTorch's FSDPMemTracker (what a torchtitan user runs to estimate memory)."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    mt = FSDPMemTracker(model, optimizer)
    mt.track_inputs(tuple(inputs))
    return mt


def peak_snapshot(mt) -> dict[str, int]:
    """A torch tracker's peak, by category, for the CPU (the only device here), in bytes."""
    snap = mt.get_tracker_snapshot("peak")
    dev = next((d for d in snap if str(d) == "cpu"), None)
    return {getattr(k, "value", str(k)): int(v)
            for k, v in (snap[dev] if dev is not None else {}).items()}
