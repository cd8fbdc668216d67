"""torchtitan's FSDP2 buffer lifetimes in the step's walk (torchtitan as it runs, eager layers):
when the head unit and a layer unit's reduce-scatter input are alive, which the communication
row (a constant over the step) cannot say. Each rule was found by following every storage of
torchtitan 0.3's own step under fake tensors (`memledger validate --engine torchtitan`).

  head unit after the loss   [norm, lm_head] is resharded once the loss's backward is done
                             (components/loss.py ChunkedLossWrapper: `lm_head.reshard()` after
                             its chunk loop; FSDP2 reshard_after_backward) — alive from its
                             forward through the loss backward, not in the decoder's backward.
                             Without PP and with [norm, lm_head] its own unit only (torchtitan
                             0.2 / 0.3 units; the 2024-12 root unit and tied weights keep it to
                             the embedding's backward).
  PP reduce-scatter input    under PP a stage syncs gradients only in its last micro-batch's
                             backward (pipelining/stage.py backward_maybe_with_nosync), so a
                             layer unit's reduce-scatter input exists only there
                             (_fsdp_collectives.py foreach_reduce), not in the steady state.
                             Eager layers only: the 2024-12 published PP runs (compiled blocks)
                             hold about that much more than itemised in their steady state
                             (T5 / T6: -9 ... -12 % without it; not identified).
  loss under PP              the layer units stay unsharded (reshard_after_forward=False), so the
                             loss-side transients are not discounted by their buffers
                             (runtime.walk_discounted does it where the units are resharded).
Ignores: the reduce-scatter of the head's gradient in every micro-batch under PP (the chunked
loss syncs it: within the loss transient's own reduce-scatter term).
"""
from __future__ import annotations

from dataclasses import replace

from memledger.ledger.fsdp2 import reshard_after_forward, torchtitan_runs, torchtitan_units

RS_ITEM = "zero-3 reduce-scatter input"
ROOT_ITEM = "zero-3 root unit unsharded (embedding, final norm, head)"
SRC = ("torchtitan 0.3 components/loss.py (ChunkedLossWrapper); torch 2.13 pipelining/stage.py "
       "(backward_maybe_with_nosync), fsdp/_fully_shard/_fsdp_collectives.py (foreach_reduce)")


def _bytes(items, name: str) -> int:
    return sum(i.bytes for i in items if i.name == name)


def titan_lifetimes(shape, parts, m, p, t, rt, loop):
    """The walked shape with the head unit released after the loss and the PP reduce-scatter
    input held only in each stage's last micro-batch backward (module docstring)."""
    if not torchtitan_runs(t, loop) or parts.acts is None or parts.acts.compiled:
        return shape
    head = _bytes(parts.items, ROOT_ITEM) if (
        p.pp == 1 and not m.tied_embeddings
        and torchtitan_units(p, t, rt, loop, m.tied_embeddings) == ("head",)) else 0
    rs = _bytes(parts.items, RS_ITEM) if p.pp > 1 and t.micro_batches > 1 else 0
    if not head and not rs:
        return shape
    return replace(shape, comm=shape.comm - rs, loss_release_comm=head, pp_rs_comm=rs)


def units_kept_at_loss(p, t, rt, loop) -> bool:
    """The layer units are not resharded after forward (torchtitan under PP): their buffers are
    alive at the loss."""
    return torchtitan_runs(t, loop) and not reshard_after_forward(p, t, rt, loop)
