"""A memory snapshot written exactly as torch writes one, from a simulated training step.

For fixtures and the benchmark: torch records snapshots only on CUDA, so a CPU-only test suite
cannot record one. This simulates a decoder-only model of `layers` blocks trained for `steps`
steps with Adam — weights created by nn.Linear.__init__, activations in each module's forward,
the loss, backward on the autograd engine's thread (frames: none for stacks="python", the
engine's C++ frames for stacks="all"), gradients by AccumulateGrad, Adam's states in
_init_group, its foreach temporaries, zero_grad(set_to_none=True) — through a small model of
the caching allocator (blocks rounded to 512 B, the trace and requested_size keeping the size
asked for, as torch does; small requests in 2 MiB segments, large ones
in segments of their size rounded to 2 MiB, first fit with splitting and coalescing). The
result has torch's keys and types (torch/cuda/memory.py `_snapshot`), shares one frames list
per distinct stack as torch does, and optionally keeps only the last `max_entries` entries
(torch's ring buffer). `truth` is what the generator intended at its peak, row by row.
Ignores: streams other than 0, expandable segments, the allocator's size classes above 10 MiB.
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.ledger.items import ROWS

_SMALL, _SEG_SMALL, _ROUND = 1 << 20, 2 << 20, 512


def _fr(*frames):
    return [{"filename": f, "line": ln, "name": n} for f, ln, n in frames]


_TRAIN = ("/work/train.py", 88, "train_step")
_MAIN = ("/work/train.py", 120, "main")
_CALL = [("/torch/nn/modules/module.py", 1786, "_call_impl"),
         ("/torch/nn/modules/module.py", 1775, "_wrapped_call_impl")]
STACKS = {
    "weight": _fr(("/torch/nn/modules/linear.py", 106, "__init__"),
                  ("/work/model.py", 40, "__init__"), _MAIN),
    "embed": _fr(("/torch/nn/modules/sparse.py", 167, "__init__"), ("/work/model.py", 38, "__init__"), _MAIN),
    "linear": _fr(("/torch/nn/modules/linear.py", 134, "forward"), *_CALL,
                  ("/work/model.py", 61, "forward"), *_CALL, _TRAIN, _MAIN),
    "attention": _fr(("/transformers/integrations/sdpa_attention.py", 96, "sdpa_attention_forward"),
                     ("/transformers/models/llama/modeling_llama.py", 281, "forward"), *_CALL,
                     _TRAIN, _MAIN),
    "norm": _fr(("/transformers/models/llama/modeling_llama.py", 66, "forward"), *_CALL, _TRAIN, _MAIN),
    "mlp": _fr(("/torch/nn/functional.py", 2376, "silu"),
               ("/transformers/models/llama/modeling_llama.py", 159, "forward"), *_CALL, _TRAIN, _MAIN),
    "loss": _fr(("/torch/nn/functional.py", 3494, "cross_entropy"),
                ("/transformers/loss/loss_utils.py", 36, "fixed_cross_entropy"), _TRAIN, _MAIN),
    "states": _fr(("/torch/optim/adam.py", 180, "_init_group"), ("/torch/optim/adam.py", 247, "step"),
                  ("/torch/optim/optimizer.py", 517, "wrapper"), _TRAIN, _MAIN),
    "step_tmp": _fr(("/torch/optim/adam.py", 598, "_multi_tensor_adam"),
                    ("/torch/optim/adam.py", 952, "adam"), ("/torch/optim/adam.py", 260, "step"),
                    ("/torch/optim/optimizer.py", 517, "wrapper"), _TRAIN, _MAIN),
    "zero_grad": _fr(("/torch/optim/optimizer.py", 1010, "zero_grad"), _TRAIN, _MAIN),
    "free_fwd": _fr(("/work/model.py", 70, "forward"), *_CALL, _TRAIN, _MAIN),
}
_CPP = {"grad": _fr(("??", 0, "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)"),
                    ("??", 0, "torch::autograd::Engine::evaluate_function(...)"),
                    ("??", 0, "torch::autograd::Engine::thread_main(...)")),
        "act_grad": _fr(("??", 0, "at::native::mm(at::Tensor const&, at::Tensor const&)"),
                        ("??", 0, "torch::autograd::generated::MmBackward0::apply(...)"),
                        ("??", 0, "torch::autograd::Engine::evaluate_function(...)"),
                        ("??", 0, "torch::autograd::Engine::thread_main(...)"))}


@dataclass(frozen=True, kw_only=True)
class StepModel:
    layers: int = 2
    hidden: int = 512
    ffn: int = 1408
    vocab: int = 4096
    tokens: int = 512  # micro-batch x sequence
    steps: int = 2
    micro_batches: int = 1  # forward + backward per step; gradients allocated in the first
    act_bytes: int = 2  # bf16 activations
    stacks: str = "python"  # "python" | "all": what backward's frames look like
    max_entries: int = 0  # 0 = keep every entry
    depth: int = 0  # extra outer frames on every Python stack (launchers, trainers' loops)


class _Allocator:
    def __init__(self):
        self.segments, self.trace, self.t = [], [], 1_700_000_000_000_000
        self.next_addr, self.live, self.rows = 0x7F0000000000, {}, dict.fromkeys(ROWS, 0)
        self.best, self.best_rows = 0, dict(self.rows)

    def _emit(self, action, addr, size, frames):
        self.t += 7
        # torch shares each distinct frame's dict, not the list (combined_traceback.cpp)
        self.trace.append({"action": action, "addr": addr, "frames": list(frames), "size": size,
                           "stream": 0, "time_us": self.t})

    def alloc(self, asked: int, row: str, frames) -> int:
        size = max(_ROUND, -(-asked // _ROUND) * _ROUND)
        small = size <= _SMALL
        for seg in self.segments:
            if (seg["segment_type"] == "small") != small:
                continue
            for i, b in enumerate(seg["blocks"]):
                if b["state"] == "inactive" and b["size"] >= size:
                    return self._take(seg, i, size, asked, row, frames)
        total = _SEG_SMALL if small else -(-size // _SEG_SMALL) * _SEG_SMALL
        seg = {"device": 0, "address": self.next_addr, "total_size": total, "allocated_size": 0,
               "active_size": 0, "requested_size": 0, "stream": 0,
               "segment_type": "small" if small else "large", "segment_pool_id": (0, 0),
               "is_expandable": False, "frames": frames,
               "blocks": [{"address": self.next_addr, "size": total, "requested_size": 0,
                           "state": "inactive", "frames": []}]}
        self.next_addr += total + (1 << 21)
        self.segments.append(seg)
        self._emit("segment_alloc", seg["address"], total, frames)
        return self._take(seg, 0, size, asked, row, frames)

    def _take(self, seg, i, size, asked, row, frames) -> int:
        b = seg["blocks"][i]
        if b["size"] > size:
            rest = {"address": b["address"] + size, "size": b["size"] - size, "requested_size": 0,
                    "state": "inactive", "frames": []}
            seg["blocks"].insert(i + 1, rest)
        b.update(size=size, requested_size=asked, state="active_allocated", frames=frames)
        self.live[b["address"]] = (seg, row)
        self._emit("alloc", b["address"], asked, frames)  # torch traces the size asked for
        self.rows[row] += asked
        if sum(self.rows.values()) > self.best:
            self.best, self.best_rows = sum(self.rows.values()), dict(self.rows)
        return b["address"]

    def free(self, addr: int, frames=()) -> None:
        seg, row = self.live.pop(addr)
        i = next(k for k, b in enumerate(seg["blocks"]) if b["address"] == addr)
        b = seg["blocks"][i]
        self._emit("free_requested", addr, b["requested_size"], list(frames))
        self._emit("free_completed", addr, b["requested_size"], list(frames))
        self.rows[row] -= b["requested_size"]
        b.update(state="inactive", requested_size=0, frames=[])
        blocks = seg["blocks"]
        for k in (i, i - 1):  # coalesce with the neighbours
            if 0 <= k < len(blocks) - 1 and blocks[k]["state"] == blocks[k + 1]["state"] == "inactive":
                blocks[k]["size"] += blocks.pop(k + 1)["size"]

    def snapshot(self, max_entries: int) -> dict:
        for seg in self.segments:
            act = [b for b in seg["blocks"] if b["state"] != "inactive"]
            seg["allocated_size"] = seg["active_size"] = sum(b["size"] for b in act)
            seg["requested_size"] = sum(b["requested_size"] for b in act)
        trace = self.trace[-max_entries:] if max_entries else self.trace
        return {"segments": self.segments, "device_traces": [trace],
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                       "garbage_collection_threshold": 0.0,
                                       "expandable_segments": False, "pinned_num_register_threads": 1,
                                       "release_lock_on_cudamalloc": False,
                                       "pinned_use_cuda_host_register": False,
                                       "roundup_power2_divisions": {}},
                "external_annotations": []}


def generate(spec: StepModel = StepModel()) -> tuple[dict, dict]:
    """(snapshot dict in torch's format, {row: bytes at the generator's peak, "peak": bytes})."""
    a = _Allocator()
    outer = _fr(*((f"/site-packages/launcher/run{i}.py", 10 + i, f"run_{i}") for i in range(spec.depth)))
    S = {k: v + outer for k, v in STACKS.items()}
    h, f, v, tok, ab = spec.hidden, spec.ffn, spec.vocab, spec.tokens, spec.act_bytes
    shapes = [v * h] + [4 * h * h, 3 * h * f] * spec.layers + [v * h]
    params = [a.alloc(4 * n, "weights", S["embed"] if i == 0 else S["weight"])
              for i, n in enumerate(shapes)]
    states, grads = [], {}
    bwd_frames = (lambda k: _CPP[k]) if spec.stacks == "all" else (lambda k: [])
    for _ in range(spec.steps):
        for _mb in range(spec.micro_batches):  # gradient accumulation: forward, backward
            saved = [a.alloc(tok * h * ab, "activations", S["linear"])]
            for _layer in range(spec.layers):
                saved.append(a.alloc(tok * h * ab, "activations", S["norm"]))
                saved += [a.alloc(3 * tok * h * ab, "activations", S["linear"]),
                          a.alloc(tok * h * ab, "activations", S["attention"])]
                tmp = a.alloc(tok * h * 4, "runtime", S["norm"])
                a.free(tmp, S["free_fwd"])
                saved += [a.alloc(2 * tok * f * ab, "activations", S["linear"]),
                          a.alloc(tok * f * ab, "activations", S["mlp"]),
                          a.alloc(3 * tok + 2, "activations", S["mlp"])]  # a mask: not a 512 multiple
            saved.append(a.alloc(tok * v * 4, "activations", S["loss"]))
            for i in range(len(shapes) - 1, -1, -1):  # backward, last parameter first
                g = a.alloc(tok * h * ab * 2, "runtime", bwd_frames("act_grad"))
                if i not in grads:
                    grads[i] = a.alloc(4 * shapes[i], "gradients", bwd_frames("grad"))
                k = max(1, len(saved) // (len(shapes) - i)) if saved else 0
                for _ in range(min(k, len(saved))):
                    a.free(saved.pop())
                a.free(g)
            while saved:
                a.free(saved.pop())
        if not states:
            states = [a.alloc(4 * n, "optimizer", S["states"]) for n in shapes for _ in (0, 1)]
        tmps = [a.alloc(4 * n, "runtime", S["step_tmp"]) for n in shapes[:2]]
        for t in tmps:
            a.free(t, S["step_tmp"])
        for i in sorted(grads):
            a.free(grads.pop(i), S["zero_grad"])
    truth = {**a.best_rows, "peak": a.best}
    del params, states
    return a.snapshot(spec.max_entries), truth
