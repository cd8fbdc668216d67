"""Which ledger row each allocation alive at the peak belongs to: stack-frame rules, then the
phase of the step it was allocated in, and an explicit "unattributed" for the rest.

1. Frames, innermost first: the first frame a rule matches decides (an all-gather inside a
   module's forward is communication, not an activation). Each rule names the functions of
   torch / torchtitan / Megatron-Core / transformers it matches (RULES below).
2. No rule matched (on CUDA the autograd engine runs backward on its own thread, so with
   `stacks="python"` backward allocations carry no frames, and with `stacks="all"` only C++
   ones): the step's phases from the frames that are there — forward ends at the last
   allocation made under a module forward, the optimizer starts at the first one made under
   an optimizer step. An allocation between the two still alive when the optimizer starts
   is a gradient; one freed before is an activation gradient (runtime & transients); a
   frameless one during the forward is an activation.
3. Anything else — allocated before the trace began, or outside every phase — is
   "unattributed", never forced into a row.
"""
from __future__ import annotations

from memledger.snapshot.measure import Alloc, Measured, alive_at

UNATTRIBUTED = "unattributed"

# (row, what a frame must contain: ("file", text) or ("name", text), whose function it is)
RULES: tuple[tuple[str, str, str, str], ...] = (
    ("communication", "file", "fsdp/_fully_shard/_fsdp_collectives", "torch FSDP2 foreach_all_gather / foreach_reduce"),
    ("communication", "file", "torch/distributed/distributed_c10d", "torch.distributed collectives"),
    ("communication", "file", "_functional_collectives", "torch funcol all_gather_tensor / reduce_scatter"),
    ("communication", "name", "ProcessGroupNCCL", "c10d NCCL process group (C++ frames)"),
    ("communication", "file", "megatron/core/distributed/param_and_grad_buffer", "Megatron-Core DDP buckets"),
    ("communication", "file", "megatron/core/tensor_parallel/mappings", "Megatron-Core TP collectives"),
    ("communication", "file", "moe/token_dispatcher", "Megatron-Core MoE all-to-all dispatcher"),
    ("optimizer", "file", "torch/optim/", "torch.optim (Adam/AdamW step, _init_group, foreach/fused)"),
    ("optimizer", "file", "megatron/core/optimizer", "Megatron-Core DistributedOptimizer"),
    ("optimizer", "file", "torchtitan/components/optimizer", "torchtitan OptimizersContainer.step"),
    ("gradients", "name", "accumulate_grad", "autograd AccumulateGrad (C++: torch::autograd::AccumulateGrad)"),
    ("communication", "file", "fsdp/_fully_shard/_fsdp_param", "FSDP2 FSDPParam.alloc_all_gather_outputs (the unsharded unit)"),
    ("weights", "name", "to_empty", "nn.Module.to_empty (parameters materialised)"),
    ("weights", "name", "reset_parameters", "nn.Module.reset_parameters"),
    ("weights", "name", "init_weights", "torchtitan init_weights"),
    ("weights", "name", "_apply", "nn.Module.to / cuda / half (parameters moved)"),
    ("weights", "name", "from_pretrained", "transformers PreTrainedModel.from_pretrained"),
    ("weights", "name", "fully_shard", "FSDP2 fully_shard (sharded parameters)"),
    ("activations", "name", "forward", "nn.Module.forward (any module: torch, torchtitan, transformers, Megatron)"),
    ("activations", "name", "checkpoint", "torch.utils.checkpoint (recompute)"),
    ("runtime", "name", "backward", "autograd backward functions (activation gradients)"),
    ("runtime", "name", "torch::autograd::Engine", "autograd engine worker thread (C++ frames)"),
)
PHASE_FORWARD = ("forward",)
PHASE_OPTIMIZER = ("torch/optim/", "megatron/core/optimizer", "torchtitan/components/optimizer")


def rule_row(frames: tuple) -> str | None:
    for filename, name in frames:  # innermost first, as torch records them
        for row, where, text, _source in RULES:
            if text in (filename if where == "file" else name):
                return row
    return None


def phases(m: Measured) -> tuple[int, int]:
    """(last forward allocation, first optimizer allocation) trace positions."""
    last_fwd, first_opt = -1, m.entries
    for a in m.allocs:
        if a.index < 0:
            continue
        names = {n for _, n in a.frames}
        files = " ".join(f for f, _ in a.frames)
        if any(t in files for t in PHASE_OPTIMIZER):
            first_opt = min(first_opt, a.index)
        elif names & set(PHASE_FORWARD):
            last_fwd = max(last_fwd, a.index)
    return last_fwd, first_opt


def row_of(a: Alloc, last_fwd: int, first_opt: int) -> str:
    row = rule_row(a.frames)
    if row in ("communication", "runtime") and last_fwd < a.index < first_opt <= a.freed:
        return "gradients"  # made in backward, kept to the step: a (reduce-scattered) gradient
    if row is not None:
        return row
    if a.index < 0:
        return UNATTRIBUTED
    if last_fwd < a.index < first_opt:
        return "gradients" if a.freed >= first_opt else "runtime"
    if 0 <= a.index <= last_fwd:
        return "activations"
    return UNATTRIBUTED


def at_peak(m: Measured) -> dict[str, int]:
    """Bytes alive at the allocated peak per ledger row, plus "unattributed"."""
    last_fwd, first_opt = phases(m)
    out: dict[str, int] = {}
    for a in alive_at(m, m.peak_index):
        r = row_of(a, last_fwd, first_opt)
        out[r] = out.get(r, 0) + a.size
    traced = sum(out.values())
    if m.peak_allocated_bytes > traced:  # pre-trace bytes no block or free names
        out[UNATTRIBUTED] = out.get(UNATTRIBUTED, 0) + m.peak_allocated_bytes - traced
    return out
