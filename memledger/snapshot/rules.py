"""Which ledger row an allocation belongs to, from the function names on its stack.

One table (RULES): each rule matches a frame's function name (and, when the name alone is
ambiguous, a piece of its file name) and names a ledger row (memledger.ledger.items.ROWS), or
"backward" — allocated by the autograd engine, decided by lifetime (memledger.snapshot.attribute:
alive past the end of backward → gradients, freed inside it → runtime transients). The
innermost frame that matches any rule decides, so an all-gather inside a module's forward is
communication, and a forward inside activation checkpointing's recompute is a transient.
Each rule cites the file the function lives in. Module kinds (for the activations' detail) come
from KINDS, the innermost functional call that names one.
Ignores: frames of user code that match no rule; such allocations stay "unattributed" unless
their phase decides them (attribute.py), never guessed from size alone.
"""
from __future__ import annotations

from typing import NamedTuple


class Rule(NamedTuple):
    name: str  # function name (frame['name']); C++ frames match on a prefix, see cpp
    file: str  # substring of frame['filename'] ("" = any file)
    row: str  # a ledger row, or "backward"
    detail: str
    source: str
    cpp: bool = False  # name is a prefix of a demangled C++ frame (stacks="all")
    anywhere: bool = False  # decides from any depth of the stack (a context, not a callee)


RULES: tuple[Rule, ...] = (
    # optimizer: states are created on the first step, the step's temporaries each step
    Rule("_init_group", "torch/optim/", "optimizer", "optimizer states (first step)",
         "torch/optim/adam.py, adamw.py, sgd.py: Optimizer._init_group (torch.zeros_like)",
         anywhere=True),
    Rule("_multi_tensor_adam", "torch/optim/", "runtime", "optimizer-step temporaries (foreach)",
         "torch/optim/adam.py: _multi_tensor_adam"),
    Rule("_single_tensor_adam", "torch/optim/", "runtime", "optimizer-step temporaries (for-loop)",
         "torch/optim/adam.py: _single_tensor_adam"),
    Rule("_fused_adam", "torch/optim/", "runtime", "optimizer-step temporaries (fused)",
         "torch/optim/adam.py: _fused_adam"),
    Rule("clip_grad_norm_", "", "runtime", "gradient-norm temporaries",
         "torch/nn/utils/clip_grad.py: clip_grad_norm_; torchtitan/distributed/utils.py"),
    Rule("step", "torch/optim/", "optimizer", "optimizer step",
         "torch/optim/optimizer.py: Optimizer.step wrappers"),
    Rule("step", "megatron/core/optimizer", "optimizer", "optimizer step (Megatron)",
         "megatron/core/optimizer/optimizer.py: MegatronOptimizer.step"),
    # communication: FSDP2's unsharded parameters and reduce-scatter inputs, c10d collectives
    Rule("foreach_all_gather", "fsdp", "communication", "FSDP2 all-gather (unsharded params)",
         "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_all_gather"),
    Rule("foreach_all_gather_copy_out", "fsdp", "communication", "FSDP2 all-gather copy-out",
         "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py"),
    Rule("foreach_reduce", "fsdp", "communication", "FSDP2 reduce-scatter",
         "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_reduce"),
    Rule("all_gather_into_tensor", "", "communication", "all-gather",
         "torch/distributed/distributed_c10d.py"),
    Rule("reduce_scatter_tensor", "", "communication", "reduce-scatter",
         "torch/distributed/distributed_c10d.py"),
    Rule("all_reduce", "", "communication", "all-reduce", "torch/distributed/distributed_c10d.py"),
    Rule("all_to_all_single", "", "communication", "all-to-all (MoE dispatch)",
         "torch/distributed/distributed_c10d.py"),
    Rule("c10d::Reducer::", "", "communication", "DDP gradient buckets",
         "torch/csrc/distributed/c10d/reducer.cpp", cpp=True),
    Rule("c10d::ProcessGroupNCCL::", "", "communication", "NCCL work buffers",
         "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", cpp=True),
    Rule("__init__", "megatron/core/distributed/param_and_grad_buffer", "gradients",
         "Megatron gradient buffer", "megatron/core/distributed/param_and_grad_buffer.py: "
         "_ParamAndGradBuffer.__init__"),
    # activation checkpointing: what a recompute allocates lives inside backward
    Rule("recompute_fn", "torch/utils/checkpoint", "runtime", "recompute working set",
         "torch/utils/checkpoint.py: _checkpoint_without_reentrant_generator.recompute_fn",
         anywhere=True),
    Rule("unpack_hook", "torch/utils/checkpoint", "runtime", "recompute working set",
         "torch/utils/checkpoint.py: _checkpoint_hook.unpack_hook", anywhere=True),
    # backward: the autograd engine (on CUDA its own thread: C++ frames only, or none)
    Rule("torch::autograd::AccumulateGrad::", "", "gradients", "AccumulateGrad",
         "torch/csrc/autograd/functions/accumulate_grad.h", cpp=True),
    Rule("torch::autograd::Engine::", "", "backward", "autograd engine",
         "torch/csrc/autograd/engine.cpp: Engine::thread_main / evaluate_function", cpp=True),
    Rule("_engine_run_backward", "torch/autograd/graph", "backward", "autograd engine",
         "torch/autograd/graph.py: _engine_run_backward"),
    # weights: creation, moving and initialising parameters
    Rule("reset_parameters", "", "weights", "parameter init",
         "torch/nn/modules/linear.py, sparse.py: reset_parameters"),
    Rule("_apply", "torch/nn/modules/module", "weights", "Module.to / .cuda",
         "torch/nn/modules/module.py: Module._apply"),
    Rule("to_empty", "torch/nn/modules/module", "weights", "Module.to_empty (meta init)",
         "torch/nn/modules/module.py: Module.to_empty"),
    Rule("init_weights", "torchtitan", "weights", "torchtitan init_weights",
         "torchtitan/models/llama3/model/model.py: Transformer.init_weights"),
    Rule("_init_weights", "transformers", "weights", "transformers _init_weights",
         "transformers/modeling_utils.py: PreTrainedModel._init_weights"),
    Rule("from_pretrained", "transformers", "weights", "transformers from_pretrained",
         "transformers/modeling_utils.py: PreTrainedModel.from_pretrained"),
    Rule("load_state_dict", "", "weights", "load_state_dict", "torch/nn/modules/module.py"),
    Rule("_init_sharded_param", "fsdp", "weights", "FSDP2 sharded parameters",
         "torch/distributed/fsdp/_fully_shard/_fsdp_param.py: FSDPParam._init_sharded_param"),
    Rule("__init__", "torch/nn/modules/", "weights", "module construction",
         "torch/nn/modules/*.py: __init__ (torch.empty parameters)"),
    # forward: module forwards and the functional calls they make
    Rule("cross_entropy", "", "activations", "loss (logits)", "torch/nn/functional.py: cross_entropy"),
    Rule("forward", "", "activations", "module forward", "torch/nn/modules/*.py, "
         "transformers/models/*/modeling_*.py, torchtitan/models/*: Module.forward"),
    Rule("_call_impl", "torch/nn/modules/module", "activations", "module forward",
         "torch/nn/modules/module.py: Module._call_impl"),
)

# The activations' detail: the innermost functional call (or module file) that names a kind.
KINDS: tuple[tuple[str, str, str], ...] = (
    ("scaled_dot_product_attention", "", "attention"),
    ("sdpa_attention_forward", "", "attention"),
    ("eager_attention_forward", "", "attention"),
    ("flash_attn_func", "", "attention"),
    ("apply_rotary_pos_emb", "", "attention"),
    ("apply_rotary_emb", "", "attention"),
    ("silu", "", "mlp"), ("gelu", "", "mlp"), ("swiglu", "", "mlp"),
    ("rms_norm", "", "norm"), ("layer_norm", "", "norm"), ("_norm", "", "norm"),
    ("embedding", "", "embedding"),
    ("cross_entropy", "", "loss"), ("log_softmax", "", "loss"),
    ("linear", "torch/nn/functional", "linear"), ("forward", "torch/nn/modules/linear", "linear"),
    ("forward", "torch/nn/modules/sparse", "embedding"),
    ("forward", "torch/nn/modules/normalization", "norm"),
    ("forward", "torch/nn/modules/activation", "mlp"),
    ("forward", "moe", "moe"), ("forward", "mixtral", "moe"),
)


def _index(rules):
    by_name: dict[str, list] = {}
    for i, r in enumerate(rules):
        if not r.cpp:
            by_name.setdefault(r.name, []).append((i, r))
    return by_name, [(i, r) for i, r in enumerate(rules) if r.cpp]


_BY_NAME, _CPP = _index(RULES)


def match_frame(frame: dict) -> Rule | None:
    name = frame.get("name", "")
    for _, r in _BY_NAME.get(name, ()):
        if r.file in frame.get("filename", ""):
            return r
    if "::" in name:
        for _, r in _CPP:
            if r.name in name:
                return r
    return None


def match(frames) -> Rule | None:
    """A context rule (anywhere=True) anywhere on the stack, else the rule of the innermost
    frame that matches one (torch lists frames innermost first)."""
    first = None
    for f in frames:
        r = match_frame(f)
        if r is not None:
            if r.anywhere:
                return r
            first = first or r
    return first


def kind(frames) -> str:
    """The module kind of a forward allocation: the innermost frame naming one, else 'other'."""
    for f in frames:
        name, filename = f.get("name", ""), f.get("filename", "")
        for n, file, k in KINDS:
            if name == n and file in filename:
                return k
    return "other"
