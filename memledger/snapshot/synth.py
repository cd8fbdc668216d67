"""Memory snapshots written exactly in torch's format, for tests and benchmarks (pure).

`training_step` lays out one training step the way a real one allocates — weights created at
start-up, per layer a forward's saved tensors and a backward's transient activation gradients
and the gradients it leaves, optimizer states at the first step and its temporaries — with the
frames torch records for each (module forwards, AccumulateGrad, torch.optim) or none, as on
CUDA's backward worker thread with `stacks="python"`. Every block lives in its own segment
(sizes rounded up to 2 MiB, as the caching allocator's large pool does for one block), segments
are never freed (no empty_cache), and the dump's segments list every block with its state.
`cut(doc, k)` drops the first k trace entries, as `max_entries` does to a long run.
torch records snapshots only on CUDA: these files are synthetic; tests load them with
torch.cuda._memory_viz so a file torch cannot read fails the suite.
"""
from __future__ import annotations

import gzip
import pickle

ROUND = 2 * 2 ** 20
FWD = [{"filename": "torch/nn/modules/module.py", "line": 1784, "name": "_call_impl"},
       {"filename": "model.py", "line": 48, "name": "forward"}]
INIT = [{"filename": "torch/nn/modules/module.py", "line": 1349, "name": "to_empty"}]
OPT = [{"filename": "torch/optim/adamw.py", "line": 170, "name": "_init_group"},
       {"filename": "torch/optim/optimizer.py", "line": 520, "name": "step"}]
OPT_TMP = [{"filename": "torch/optim/adam.py", "line": 600, "name": "_multi_tensor_adam"}]


class _Writer:
    def __init__(self, pending_spelling: str):
        self.trace, self.blocks, self.addr, self.t = [], {}, 1 << 32, 0
        self.pending = pending_spelling
        self.live, self.peak, self.rows_at_peak, self.row = 0, 0, {}, {}

    def _entry(self, action, addr, size, frames):
        self.t += 1
        self.trace.append({"action": action, "addr": addr, "size": size, "stream": 0,
                           "time_us": self.t, "frames": list(frames)})

    def alloc(self, size: int, frames=(), row: str = "") -> int:
        seg = -(-size // ROUND) * ROUND
        self.addr += seg
        self._entry("segment_alloc", self.addr, seg, frames)
        self._entry("alloc", self.addr, size, frames)
        self.blocks[self.addr] = {"size": size, "seg": seg, "frames": list(frames),
                                  "state": "active_allocated"}
        self.row[self.addr] = row
        self.live += size
        if self.live > self.peak:
            self.peak = self.live
            self.rows_at_peak = {}
            for a, blk in self.blocks.items():
                if blk["state"] != "inactive":
                    r = self.row[a]
                    self.rows_at_peak[r] = self.rows_at_peak.get(r, 0) + blk["size"]
        return self.addr

    def free(self, addr: int) -> None:
        b = self.blocks[addr]
        self._entry("free_requested", addr, b["size"], ())
        self._entry("free_completed", addr, b["size"], ())
        b["state"] = "inactive"
        self.live -= b["size"]

    def doc(self, pending: tuple = ()) -> dict:
        segs = []
        for addr, b in self.blocks.items():
            state = self.pending if addr in pending else b["state"]
            blocks = [{"address": addr, "size": b["size"], "requested_size": b["size"],
                       "state": state, "frames": b["frames"] if state != "inactive" else []}]
            if b["seg"] > b["size"]:
                blocks.append({"address": addr + b["size"], "size": b["seg"] - b["size"],
                               "requested_size": 0, "state": "inactive", "frames": []})
            active = b["size"] if state != "inactive" else 0
            segs.append({"device": 0, "address": addr, "total_size": b["seg"], "stream": 0,
                         "segment_type": "large", "segment_pool_id": (0, 0),
                         "allocated_size": active, "active_size": active,
                         "requested_size": active, "blocks": blocks})
        return {"segments": segs, "device_traces": [self.trace],
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}


def training_step(*, layers: int = 4, weight_bytes: int = 64 * 2 ** 20,
                  act_bytes: int = 48 * 2 ** 20, act_grad_bytes: int = 32 * 2 ** 20,
                  frames_in_backward: bool = False, pending_at_dump: int = 0,
                  pending_spelling: str = "active_pending_free") -> tuple[dict, dict]:
    """A snapshot dict and its truth: {"peak_allocated_bytes", "peak_reserved_bytes", rows}."""
    w = _Writer(pending_spelling)
    for _ in range(layers):
        w.alloc(weight_bytes, INIT, "weights")
    acts = [w.alloc(act_bytes, FWD, "activations") for _ in range(layers)]
    grads = []
    bwd = [{"filename": "torch/autograd/graph.py", "line": 829, "name": "_engine_run_backward"}] \
        if frames_in_backward else []
    for i in reversed(range(layers)):
        tmp = w.alloc(act_grad_bytes, bwd, "runtime")
        grads.append(w.alloc(weight_bytes, bwd, "gradients"))
        w.free(tmp)
        w.free(acts[i])
    for _ in range(layers):
        w.alloc(2 * weight_bytes, OPT, "optimizer")
    w.free(w.alloc(weight_bytes, OPT_TMP, "optimizer"))
    doc = w.doc(tuple(grads[:pending_at_dump]))
    truth = {"peak_allocated_bytes": w.peak,
             "peak_reserved_bytes": sum(s["total_size"] for s in doc["segments"]),
             "rows": w.rows_at_peak}
    return doc, truth


def cut(doc: dict, k: int) -> dict:
    """The same dump as a run whose trace kept only the entries after the first k."""
    return {**doc, "device_traces": [t[k:] for t in doc["device_traces"]]}


def dump(doc: dict, path, compress: bool = True) -> None:
    raw = pickle.dumps(doc, protocol=4)
    with open(path, "wb") as f:
        f.write(gzip.compress(raw, mtime=0) if compress else raw)
