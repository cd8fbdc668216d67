"""Live bytes after every operator, on any device (CPU included): an allocation tracker.

`LiveBytes` is a TorchDispatchMode: every tensor an operator returns is followed through its
storage (deduplicated by the StorageImpl pointer, so views count once); a storage is freed when
the tracker's own reference is the last one (`torch._C._storage_Use_Count` = 1), checked after
every operator and at every mark. `current_bytes` is what the step allocated and still holds;
`peak_bytes` its maximum over operators; `mark(label)` records (label, current) — the hooks of
`measure_timeline` put one after each layer's forward and backward, the loss, the optimizer
step and zero_grad, the events of `memledger.ledger.timeline`. Tensors that existed before the mode was
entered (weights, optimizer states, persistent gradients) are not followed: the caller adds them.
Ignores: an operator's internal workspaces (freed before it returns) and allocator rounding —
on CPU there is no caching allocator; on CUDA use torch.cuda.memory_allocated instead.
Sources: torch.utils._python_dispatch.TorchDispatchMode (torch 2.13); PyTorch's own
torch.distributed._tools.mem_tracker.MemTracker follows storages the same way.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    def __init__(self, existing=()):
        """existing: tensors alive before the mode (weights, states, inputs): their storages,
        and every view of them an operator returns (aten.t of a weight), are not counted."""
        super().__init__()
        self.known = {t.untyped_storage()._cdata for t in existing}
        self.live: dict[int, tuple[object, int]] = {}
        self.current_bytes = 0
        self.peak_bytes = 0
        self.peak_label = ""
        self.marks: list[tuple[str, int]] = []
        self._last_label = "start"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.sweep()
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self.follow(t)
        if self.current_bytes > self.peak_bytes:
            self.peak_bytes, self.peak_label = self.current_bytes, f"{self._last_label} → {func}"
        return out

    def follow(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key = st._cdata
        if key not in self.live and key not in self.known:
            n = st.nbytes()
            self.live[key] = (st, n)
            self.current_bytes += n

    def sweep(self) -> None:
        dead = [k for k in self.live if torch._C._storage_Use_Count(k) <= 1]
        for k in dead:
            self.current_bytes -= self.live.pop(k)[1]

    def mark(self, label: str) -> int:
        self.sweep()
        self.marks.append((label, self.current_bytes))
        self._last_label = label
        return self.current_bytes
