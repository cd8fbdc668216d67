"""torchtitan's FSDP2 buffer lifetimes in the step's walk (torchtitan as it runs, eager layers):
what the communication row, a constant over the step, holds at each event. Each rule was found by
following every storage of torchtitan 0.3's own step under fake tensors (`memledger validate
--engine torchtitan`, validation/engine-torchtitan.json and -gloo.json).

  head unit after the loss   [norm, lm_head] is resharded once the loss's backward is done
                             (components/loss.py ChunkedLossWrapper: `lm_head.reshard()` after
                             its chunk loop; FSDP2 reshard_after_backward): alive from its forward
                             through the loss backward, not in the decoder's backward. Without PP
                             and with [norm, lm_head] its own unit only (0.2 / 0.3 units; the
                             2024-12 root unit and a tied unit stay to the embedding's backward).
  PP reduce-scatter input    under PP a unit's gradients are accumulated unsharded in fp32 until
                             its stage's last micro-batch (pipelining/stage.py
                             backward_maybe_with_nosync; _fsdp_param.py
                             to_accumulated_grad_if_needed, the gradient row's walk), and there
                             `foreach_reduce` copies that accumulator into the fp32 reduce-scatter
                             input and frees it (`unsharded_grads.clear()`): the input takes its
                             accumulator's place, adding nothing. What a layer unit's post-backward
                             adds in every micro-batch is its bf16 gradient, before it is
                             accumulated (nothing with reduce dtype = param dtype: the gradient
                             is its own accumulator). So the row's reduce-scatter input is out of
                             the walk.
  loss under PP              the layer units stay unsharded (reshard_after_forward=False), so the
                             loss-side transients are not discounted by their buffers
                             (runtime.walk_discounted does it where the units are resharded).
  root units' reduce-scatter without PP, `foreach_reduce` of the head unit (after the
                             materialised loss's backward; the chunked loss's own is in its
                             transient, ledger.chunked_loss) and of the embedding unit (the
                             stage's last post-backward; the tied unit there too) allocates that
                             unit's param-dtype gradient and reduce-dtype input, sized as the unit,
                             not as the largest layer the reduce-scatter item is sized by. The
                             previous unit's reduce-scatter input is reclaimed first and the
                             unit resharded before its reduce (_fsdp_param_group.py
                             post_backward): at the head only the prefetched layer unit is
                             gathered, at the embedding none.
  tied head gradient         a tied unit under the materialised loss: the output projection's
                             weight gradient waits in autograd's input buffer from the loss
                             backward to the embedding's, where the two are summed out of place
                             (three copies at once, the unit still unsharded, the last layer's
                             fp32 reduce-scatter input in flight).
  tied unit under TP         two FSDPParams of the weight (fsdp2.tied_weight_copies): the head's
                             gradient waits as above, the embedding's joins it unsummed, and the
                             unit's input holds both; `foreach_reduce` frees the three bf16
                             gradients before it allocates the sharded output, so the embedding's
                             sharded gradient comes after that input's peak (`end_grads_after_rs`).
                             A one-parameter root unit (the untied embedding) keeps its bf16
                             gradient to the end of the backward's final callback (measured: no
                             Python referrer; held by the autograd engine), so there the sharded
                             output is beside it.
Measured (peak allocated, before -> after): Llama 3.2 3B TP 2 at 512 tokens, tied, -6.82 -> -0.00 %,
Llama-3 8B PP 4 interleaved pp rank 1 +5.66 -> +2.80 %,
8B FSDP 8 at 512 tokens, materialised loss (peak at the embedding's reduce-scatter) -5.95 -> -0.00 %,
Qwen3-14B TP 2 at 1,024 tokens -4.19 -> -0.00 %,
8B PP 4 first / last stage +2.66 / -4.37 -> -0.05 / -0.28 %, DeepSeek-V3 16B EP 16 full AC
+5.03 -> -0.65 %, debug pp 2 on gloo +3.59 -> -1.12 %.
Not for compiled layers: the published 2024-12 PP runs (compiled blocks) hold about a reduce-scatter
input more than itemised in their steady state (T5 / T6: -8 ... -11 % without it; not identified).
"""
from __future__ import annotations

from dataclasses import replace

from memledger.ledger.allocator import FSDP_UNIT_ITEMS
from memledger.ledger.communication import ROOT_UNIT_ITEM, unit_rs_bytes
from memledger.ledger.fsdp2 import fsdp2, tied_weight_copies, torchtitan_units
from memledger.units import format_bytes

GATHER_ITEM, RS_ITEM = FSDP_UNIT_ITEMS  # "zero-3 gather + prefetch", "... reduce-scatter input"


def _bytes(items, name: str) -> int:
    return sum(i.bytes for i in items if i.name == name)


def pp_input_bytes(rs_bytes: int, t) -> int:
    """Of the reduce-scatter item (a unit's param-dtype gradient + its reduce-dtype input, same
    element count: communication.zero3_items), what PP's accumulation makes part of the
    accumulators (module docstring): the reduce-dtype input; all of it when the two dtypes are
    one (`fsdp2-bf16-reduce`: the param-dtype gradient is its own accumulator, accumulated in
    place, _fsdp_param.py to_accumulated_grad_if_needed returns early)."""
    w, red = t.recipe.param_fmt, t.recipe.reduce_fmt
    if not red or red == w:
        return rs_bytes
    one, both = format_bytes(red, 1 << 20), format_bytes(w, 1 << 20) + format_bytes(red, 1 << 20)
    return rs_bytes * one // both


def titan_lifetimes(shape, parts, m, p, t, rt, loop):
    """torchtitan's walked shape (runtime.finalize) with the head unit released after the loss
    and, under PP, no fp32 reduce-scatter input on top of the accumulators (module docstring).
    A tied unit is ("embedding", "head"): kept."""
    if parts.acts is None or parts.acts.compiled:
        return shape
    head = _bytes(parts.items, ROOT_UNIT_ITEM) if (
        p.pp == 1 and torchtitan_units(p, t, rt, loop, m.tied_embeddings) == ("head",)) else 0
    gone = head if not head_at_loss(rt, loop) else 0  # out of the walk: not even at the loss
    pp = p.pp > 1 and t.micro_batches > 1
    rs = pp_input_bytes(_bytes(parts.items, RS_ITEM), t) if pp else 0
    root = p.pp == 1 and fsdp2(p, rt)  # the root units' rules: one stage, FSDP2
    head_rs, end_rs = root_rs_deltas(parts, m, p, t, rt, loop) if root else (0, 0)
    tied, acc = tied_head_grad(parts, m, p, t, rt, loop) if root else (0, 0)
    if not head and not rs and not head_rs and not end_rs and not tied:
        return shape
    return replace(shape, comm=shape.comm - rs - gone, loss_release_comm=head - gone,
                   head_rs_delta=head_rs,
                   end_rs_delta=end_rs, tied_head_grad=tied, end_acc_delta=acc,
                   end_grads_after_rs=root and tied_weight_copies(m, p, t, loop) > 1)


def head_at_loss(rt, loop) -> bool:
    """Whether the [norm, lm_head] unit is gathered at the loss's events: not under
    reshard="always" with the materialised loss (resharded after its forward; its backward
    gathers it only once the cross-entropy's working set is freed). Measured: Llama 3 8B, full AC,
    4,096 tokens, +5.37 % with it counted, −0.0 % without."""
    return not (rt.fsdp_reshard_after_forward == "always" and loop.loss == "materialized")


def tied_head_grad(parts, m, p, t, rt, loop) -> tuple[int, int]:
    """A tied unit under the materialised loss (module docstring): the head's unsharded gradient
    held to the embedding's backward, and the communication column's change when the
    embedding's gradient and their sum join it (the layer units resharded, the last layer's fp32
    reduce-scatter input still in flight). (held, change)."""
    if loop.loss != "materialized" or not m.tied_embeddings \
            or torchtitan_units(p, t, rt, loop, True) == ("head",):
        return 0, 0  # (2024-12's untied root unit holds two gradients, not a sum: not here)
    w = t.recipe.param_fmt or t.recipe.weight_fmt
    g = format_bytes(w, dict(parts.root_params).get("embedding", 0))
    rs_item = _bytes(parts.items, RS_ITEM)
    bf16_part = rs_item - pp_input_bytes(rs_item, t)  # freed once copied into the fp32 input
    # the embedding's gradient and their sum; under TP's two parameters (fsdp2.
    # tied_weight_copies) each module's gradient is its own: no sum
    joined = g if tied_weight_copies(m, p, t, loop) > 1 else 2 * g
    return g, joined - _bytes(parts.items, GATHER_ITEM) - bf16_part


def root_rs_deltas(parts, m, p, t, rt, loop) -> tuple[int, int]:
    """The communication column's change at the head unit's and the embedding unit's
    reduce-scatter (module docstring): (head, end)."""
    units = torchtitan_units(p, t, rt, loop, m.tied_embeddings)
    sizes = dict(parts.root_params)
    rs = lambda n: unit_rs_bytes(n, t)  # noqa: E731
    gather, rs_item = _bytes(parts.items, GATHER_ITEM), _bytes(parts.items, RS_ITEM)
    one_unit = gather // (1 + rt.zero3_prefetch_layers)
    untied = units == ("head",)
    head = (rs(sizes.get("head", 0)) - rs_item - (gather - one_unit)
            if untied and loop.loss == "materialized" and sizes.get("head") else 0)
    end_params = sizes.get("embedding", 0) if untied else sizes.get("embedding head", 0)
    kept = 0 if untied else _bytes(parts.items, ROOT_UNIT_ITEM)  # a tied unit, resharded first
    end = rs(end_params) - rs_item - gather - kept if end_params else 0
    return head, end


def stage_end(sh, st, first_time: bool, grads: int, comm: int):
    """A stage's end under torchtitan's root-unit rules (this module): the tied
    head's held gradient summed with the embedding's, then the embedding unit's reduce-scatter.
    ([(gradients, communication) of each event], gradients and communication after)."""
    out = []
    if sh.tied_head_grad:
        out.append((grads, comm + sh.end_acc_delta))
        comm -= sh.tied_head_grad
    end = st.end_grads if first_time else 0
    if sh.end_rs_delta and st.end_grads:
        out.append((grads + (0 if sh.end_grads_after_rs else end), comm + sh.end_rs_delta))
    return out, grads + end, comm
