"""Candidates for the largest transient of the forward/backward phase of one rank (one
micro-batch each), from the same `HeldActivations` the row reads.

  recompute working set   full: one layer's full inventory; every-k: k layers' (docs/design.md §5)
  policy recompute set    the largest layer's tensors a storage policy recomputes (selective
                          classes excluded: fused kernels re-create them op by op)
  forward working set     alive together at the end of the forward: the profile's forward-class
                          transients (logits + their fp32 upcast) and, under amp with full or
                          every-k recompute, torch.autocast's cast cache of the rank's layers
  backward transients     the profile's other last-stage transients (logits gradients)
The runtime row adds the largest of them at the peak (memledger.ledger.runtime).
"""
from __future__ import annotations

from collections import Counter

from memledger.ledger.activations import get_profile
from memledger.ledger.activations.held import HeldActivations
from memledger.ledger.activations.policy import TensorMove
from memledger.ledger.activations.row import SRC, cast_params, is_autocast
from memledger.ledger.items import Item
from memledger.units import format_bytes


def activation_transients(a: HeldActivations, moves: list[TensorMove]) -> list[Item]:
    out = []
    t = a.t
    if t.recompute in ("full", "every-k") and a.kinds:
        span = 1 if t.recompute == "full" else t.checkpoint_every(a.m.n_layers)
        worst = max(a.tables[k].full_bytes for k in a.kinds)
        out.append(Item("runtime", f"recompute working set ({span} layer{'s' * (span > 1)})",
                        worst * span, f"{span} × one layer's full inventory, one micro-batch",
                        "docs/design.md §5 (full / every-k recompute)"))
    policy_set = _policy_recompute_set(t, moves)
    if policy_set:
        out.append(Item("runtime", "recompute working set (policy, one layer)", policy_set,
                        "one layer's tensors recomputed by the policy (selective classes excluded: "
                        "re-created op by op inside fused kernels)",
                        "memledger.ledger.activations.policy"))
    forward = [autocast_cache(a)]
    for e in a.outer["transients"] if a.last and not a.chunked_loss else ():
        item = Item("runtime", e.tensor.name, e.bytes, f"one micro-batch × {e.formula}",
                    SRC.get(t.profile, t.profile))
        (forward if e.tensor.cls == "forward" else out).append(item)
    forward = [i for i in forward if i is not None and i.bytes]
    if forward:  # alive together at the end of the forward pass: one working set
        out.append(Item("runtime", "forward working set: " + " + ".join(i.name for i in forward),
                        sum(i.bytes for i in forward), "; ".join(i.formula for i in forward),
                        forward[-1].source))
    return out


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
