"""What the training loop's optimizer step allocates beyond the static rows, and which optimizer
owns which parameter group — by loop (memledger.specs.loop).

- for-loop AdamW (torch 2.13 torch/optim/adam.py `_single_tensor_adam`): per tensor,
  `denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)` holds the square root and the
  quotient of one tensor at once: two state-format copies of the largest tensor.
  (foreach: one copy of the whole group, `_multi_tensor_adam`'s `torch._foreach_sqrt`; fused:
  none — both in ledger.step_temporaries.)
- cast-per-tensor master gradients: `master.grad = p.grad.float()` one parameter at a time: one
  master-format copy of the largest gradient during the step.
- Muon coverage: torch.optim.Muon takes 2-D parameters only; transformers 5.24 stores a layer's
  experts as fused 3-D tensors, so under a loop that keeps them (`muon_experts="adamw"`) the
  expert groups are AdamW's (not Muon matrices: two states, no Newton-Schulz, no gather).
The largest tensor is one matrix of a group (transformers keeps q/k/v and gate/up apart) but
all experts of a layer at once (the fused 3-D tensor). Measured on CPU: the for-loop step peak
of the tiny validation models within 2.1 % (tests/test_timeline_validation.py).
"""
from __future__ import annotations

from dataclasses import replace

from memledger.ledger.items import Item
from memledger.ledger.static.rows import Held
from memledger.ledger.static.sharding import shard_divisor
from memledger.units import ceil_div, format_bytes


def largest_local(held: list[Held], p) -> int:
    """Parameters of the largest single tensor on the rank."""
    def size(g):
        n = g.rows * g.cols if g.matrix and not g.expert else g.count
        return ceil_div(n, shard_divisor(g, p))
    return max((size(h.group) for h in held), default=0)


def for_loop_temporaries(held: list[Held], p, t) -> Item:
    fmt = t.opt.fixed_fmt or t.recipe.state_fmt
    n = largest_local(held, p)
    return Item("runtime", "optimizer-step temporaries", 2 * format_bytes(fmt, n),
                f"for-loop step: sqrt and quotient ({fmt}) of the largest tensor, {n} params",
                "torch 2.13 torch/optim/adam.py _single_tensor_adam")


def with_master_cast(base: Item, held: list[Held], p, t, loop) -> Item:
    r = t.recipe
    if loop.master_grads != "cast-per-tensor" or not r.master_fmt or r.grad_fmt == r.master_fmt:
        return base
    n = largest_local(held, p)
    return base._replace(name=base.name + " + master-grad cast",
                         bytes=base.bytes + format_bytes(r.master_fmt, n),
                         formula=f"{base.formula}; + {r.master_fmt} cast of the largest grad ({n})")


def muon_coverage(held: list[Held], t, loop) -> list[Held]:
    """The held groups as the loop's optimizers see them."""
    if loop is None or loop.muon_experts != "adamw" or t.optimizer != "muon":
        return held
    return [replace(h, group=replace(h.group, matrix=False)) if h.group.expert and h.group.matrix
            else h for h in held]
