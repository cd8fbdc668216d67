"""Candidates for the largest transient of the forward/backward phase of one rank (one
micro-batch each), from the same `HeldActivations` the row reads.

  recompute working set   full: one layer's full inventory; every-k: k layers' (docs/design.md §5)
  policy recompute set    the largest layer's tensors a storage policy recomputes (selective
                          classes excluded: fused kernels re-create them op by op)
  forward working set     alive together at the end of the forward: the profile's forward-class
                          transients (logits + their fp32 upcast) and, under amp with full or
                          every-k recompute, torch.autocast's cast cache of the rank's layers
  backward transients     the profile's other last-stage transients (logits gradients)
  layer backward set      what a dense layer's backward allocates above its saved tensors
                          (profiles whose layers run under plain autograd: hf, hf-cpu); it
                          also rides on the recompute working sets, which meet it in the
                          same layer's backward
The runtime row adds the largest of them at the peak (memledger.ledger.runtime).
"""
from __future__ import annotations

from collections import Counter

from memledger.ledger.activations import get_profile
from memledger.ledger.activations.held import HeldActivations
from memledger.ledger.activations.inventory import tokens_on_rank
from memledger.ledger.activations.policy import TensorMove
from memledger.ledger.activations.row import (SRC, SRC_MODE, budget_kept_bytes, cast_params,
                                              is_autocast, op_saved_bytes)
from memledger.ledger.activations.titan_moe import combine_backward_item
from memledger.ledger.items import Item
from memledger.units import ceil_div, format_bytes

BACKWARD_SET = "layer backward working set"
SRC_BWD = ("torch autograd: mm's backward (derivatives.yaml mm: mat1 and mat2 gradients), "
           "AccumulateGrad adding into an existing .grad (accumulate_grad.h); transformers "
           "LlamaMLP down_proj(act_fn(gate_proj(x)) * up_proj(x)); measured by "
           "tests/test_layer_backward_torch.py and `memledger validate --engine torch` "
           "(docs/engine-validation.md)")


def activation_transients(a: HeldActivations, moves: list[TensorMove],
                          persistent_grads: bool = True, moe_freed: int = 0) -> list[Item]:
    """`moe_freed`: the communication row's bytes a MoE layer's backward holds only after its
    combine (titan_moe)."""
    out = []
    t = a.t
    bwd = layer_backward_set(a) if persistent_grads else None
    ws = bwd.bytes if bwd is not None else 0
    combine = combine_backward_item(a.m, t, a.p, _hf_expert_out(a), moe_freed) \
        if a.torchtitan and "moe" in a.kinds else None
    cb = combine.bytes if combine is not None else 0
    sp = sp_backward_bytes(a)
    # what a layer's own backward adds above its saved set
    rides = {"dense": ws + sp, "moe": cb}
    plus = f" + the {BACKWARD_SET} ({ws})" if ws else ""
    plus += (f" + 3·T·h of a TP layer's sequence-parallel backward ({sp}: the gathered output "
             "gradient, the input gradient, its reduce-scatter copy) on a dense layer") if sp else ""
    plus += f" + the {combine.name} ({cb}) on a MoE layer" if cb else ""
    if t.recompute in ("full", "every-k") and a.kinds:
        span = 1 if t.recompute == "full" else t.checkpoint_every(a.m.n_layers)
        # the re-created layer(s) and that layer's backward meet: its set rides on a dense one
        worst = max(a.tables[k].full_bytes * span + rides[k] for k in a.kinds)
        out.append(Item("runtime", f"recompute working set ({span} layer{'s' * (span > 1)})",
                        worst, f"{span} × one layer's full inventory, one micro-batch" + plus,
                        "docs/design.md §5 (full / every-k recompute)"))
    if t.recompute in ("op", "interval", "memory-budget") and a.kinds:
        worst = max(recompute_set(a, k) + rides[k] for k in a.kinds)
        out.append(Item("runtime", "recompute working set (1 layer)", worst,
                        f"one block's tensors re-made in its backward ({t.recompute})" + plus,
                        SRC_MODE[t.recompute]))
    policy_set = _policy_recompute_set(t, moves)
    if policy_set:
        out.append(Item("runtime", "recompute working set (policy, one layer)", policy_set + ws,
                        "one layer's tensors recomputed by the policy (selective classes excluded: "
                        "re-created op by op inside fused kernels)" + plus,
                        "memledger.ledger.activations.policy"))
    if bwd is not None:
        out.append(bwd)
    if combine is not None and t.recompute == "none":  # no re-created layer to ride on
        out.append(combine)
    forward = [autocast_cache(a)]
    for e in a.outer["transients"] if a.last and not a.chunked_loss else ():
        g = a.logits_gathered if e.tensor.cls == "logits" else 1  # loss parallel off
        item = Item("runtime", e.tensor.name, e.bytes * g, f"one micro-batch × {e.formula}" + (
            f" × {g} (gathered: no loss parallel)" if g > 1 else ""), SRC.get(t.profile, t.profile))
        (forward if e.tensor.cls == "forward" else out).append(item)
    forward = [i for i in forward if i is not None and i.bytes]
    if forward:  # alive together at the end of the forward pass: one working set
        out.append(Item("runtime", "forward working set: " + " + ".join(i.name for i in forward),
                        sum(i.bytes for i in forward), "; ".join(i.formula for i in forward),
                        forward[-1].source))
    return out


def sp_backward_bytes(a: HeldActivations) -> int:
    """torchtitan's eager TP layer with sequence parallelism: what its MLP's backward holds above
    the re-made inventory, 3 · T·h in the activation format (T = b·s/cp, the whole sequence):
    the output gradient all-gathered over the sequence (the backward of w2's reduce-scatter,
    RowwiseParallel output Shard(1)), the input gradient of w1 / w3, and that gradient's
    chunk-and-cat copy for its reduce-scatter along the sequence (functional collectives
    `reduce_scatter_tensor`, scatter_dim != 0: torch.cat of torch.chunk). Measured at the peak
    of torchtitan 0.3's step, every re-made tensor of the layer still alive there: Llama-3 70B
    TP 8 (b = 1: the all-gather output, its cat, the mm) and 405B TP 8 × PP 8 (b = 4: two cats
    and the mm), 3 × T·h each. Not under torch.compile (its backward graph keeps its own
    buffers) nor on MoE layers (their FFN is the experts')."""
    if not (a.torchtitan and a.p.tp > 1 and a.p.sp and not a.compiled):
        return 0
    return 3 * format_bytes(a.t.recipe.act_fmt, tokens_on_rank(a.t, a.p) * a.m.hidden)


def _hf_expert_out(a: HeldActivations) -> int:
    return sum(e.bytes for e in a.tables["moe"].entries if e.tensor.cls == "expert_out")


def recompute_set(a: HeldActivations, kind: str) -> int:
    """What one block's backward re-creates under torchtitan's modes: its inventory less what
    the mode kept (interval: the whole inventory of a checkpointed block)."""
    full = a.tables[kind].full_bytes
    if a.t.recompute == "op":
        return max(0, full - op_saved_bytes(a, kind))
    if a.t.recompute == "memory-budget":
        return max(0, full - budget_kept_bytes(a, kind))
    return full


def autocast_cache(a: HeldActivations) -> Item | None:
    """Under amp with full/every-k recompute the matmuls' bf16 weight casts are not saved, but
    torch.autocast's cast cache holds every one of them until the forward's autocast region
    ends: the rank's layer casts, once (found on the H200: forward peak 1.4 GiB over the
    backward one for a 0.8B Llama at 4k tokens)."""
    if not is_autocast(a) or a.t.recompute not in ("full", "every-k"):
        return None
    n = sum(a.per_mb[k] * cast_params(a, k) for k in a.kinds)
    fmt = a.t.recipe.act_fmt
    return Item("runtime", "autocast weight-cast cache", format_bytes(fmt, n),
                f"{n} matrix params of this rank's layers as {fmt} casts",
                "torch.autocast cast cache (cleared when the autocast region exits)")


def _policy_recompute_set(t, moves: list[TensorMove]) -> int:
    selective = get_profile(t.profile).selective
    per_layer = Counter()
    for mv in moves:
        if mv.policy == "recompute" and mv.cls not in selective and mv.section.endswith("layers"):
            per_layer[mv.section] += mv.native_bytes
    return max(per_layer.values(), default=0)


def layer_backward_set(a: HeldActivations) -> Item | None:
    """A dense layer's backward, above the tensors the layer saved (which it frees as it goes)
    and the incoming gradient: `dense_backward_bytes`. Only for profiles whose layers run
    under plain autograd (`autograd_layers`: hf, hf-cpu), on ranks holding dense layers only.
    The peak adds it on top of the staircase, true for a rank's top layer. Where a rank also
    holds MoE layers (not modelled) the dense ones sit below them (first_k_dense) and run
    their backward once those layers' saved tensors of the micro-batch are freed, more than
    the set in every model here (DeepSeek-V3-tiny's stored timeline: +0.85% with the set
    added, 0.0001% without); alternating layouts whose top layer is dense are short by it.
    Persistent gradients only (`activation_transients(persistent_grads=...)`): under on-demand
    gradients the walked timeline allocates a layer's whole gradient as its backward starts,
    which already holds the weight gradient autograd hands to .grad (added on top, the stored
    llama-tiny set_to_none timelines went from +1.2% to +4.4%)."""
    m, t, p = a.m, a.t, a.p
    if a.kinds != ("dense",) or not getattr(get_profile(t.profile), "autograd_layers", False):
        return None
    n = dense_backward_bytes(m, t, p)
    return Item("runtime", BACKWARD_SET, n, _backward_formula(m, t, p), SRC_BWD)


def _larger(x, y):
    """max() that numpy arrays (the planner's) pass through element-wise."""
    d = x - y
    return x - d * (d < 0)


def dense_backward_bytes(m, t, p) -> int:
    """The most a gated-MLP dense layer's backward holds at once above its saved tensors and
    the incoming gradient, T = b·s/cp tokens (the MLP sees the whole sequence under SP),
    f = ffn/tp, a / w the activation / weight format (measured on the CPU, torch 2.13,
    transformers 5.24, persistent gradients, every shape of tests/test_engine_torch.py):
      weights in the activation format: max(T·f·a + h·f·w, 2·T·f·a)
        down_proj's backward: its input gradient T·f and its weight gradient h·f, a new
        tensor that AccumulateGrad then adds into .grad; or the product's backward: the
        gradients of act and up (2·T·f) once down_proj's saved input is freed;
      amp (fp32 weights, autocast): max(a·(T·h + T·f + h·f), 4·h·f)
        down_proj's backward on the bf16 cast of the fp32 incoming gradient, its bf16 weight
        gradient and input gradient; or the fp32 weight gradient the weight cast's backward
        makes once the saved bf16 cast and input are freed.
    A frozen down_proj (fine-tuning) makes no weight gradient; under qlora its backward
    dequantises the weight instead (bitsandbytes MatMul4Bit.backward: dequantize_4bit(B) for
    the input gradient), h·f in the compute dtype, alive with the input gradient.
    Array-safe (the planner evaluates it over micro-batch sizes)."""
    tokens, f, h = tokens_on_rank(t, p), ceil_div(m.ffn_hidden, p.tp), m.hidden
    act, w = t.recipe.act_fmt, t.recipe.weight_fmt
    down = _down_weight_fmt(t)
    if w == "fp32" and act != "fp32":  # amp: the hf profile's own test (profiles.hf._mode)
        trains = down == w  # its bf16 weight gradient, then the fp32 one of the weight cast
        extra = format_bytes(act if trains else down, h * f) if down else 0
        return _larger(format_bytes(act, tokens * h) + format_bytes(act, tokens * f) + extra,
                       format_bytes(w, h * f) if trains else 0)
    return _larger(format_bytes(act, tokens * f) + (format_bytes(down, h * f) if down else 0),
                   2 * format_bytes(act, tokens * f))


def _down_weight_fmt(t) -> str | None:
    """The format of the h·f tensor down_proj's backward makes: its weight gradient (the
    weight format) when it trains, the dequantised weight under qlora, none when frozen."""
    ft = t.finetune
    if ft.mode == "qlora":
        return ft.compute_dtype
    if ft.adapters or (ft.mode == "freeze" and ("mlp.fc2" in ft.frozen_pieces or
                                                "layers" in ft.frozen_pieces)):
        return None
    return t.recipe.weight_fmt


def _backward_formula(m, t, p) -> str:
    tokens, f, h = tokens_on_rank(t, p), ceil_div(m.ffn_hidden, p.tp), m.hidden
    act, w = t.recipe.act_fmt, t.recipe.weight_fmt
    if w == "fp32" and act != "fp32":
        return (f"amp: max({act} × (T·h + T·f + h·f), fp32 × h·f), T = {tokens} tokens (b·s/cp), "
                f"h = {h}, f = {f} (ffn/tp): down_proj's bf16 gradients or its fp32 weight gradient")
    return (f"max(T·f × {act} + h·f × {w}, 2·T·f × {act}), T = {tokens} tokens (b·s/cp), h = {h}, "
            f"f = {f} (ffn/tp): down_proj's input and weight gradients, or the gated product's two")
