"""torchtitan 0.2's optimizer in backward (`optimizer.early_step_in_backward`) for the harness
(torch; imported by engine/titan.py for a case with `early_step`).

torchtitan 0.2 `components/optimizer.py` OptimizersInBackwardContainer builds one optimizer per
parameter (`optimizer_cls([p], **optimizer_kwargs)`), registers on every parameter a
post-accumulate-grad hook that runs that optimizer's `step()` and `zero_grad()`, and makes the
container's own `step()` / `zero_grad()` no-ops. torchtitan 0.3 has no such container, so it is
built here the same way from the optimizers 0.3's registry config builds: the same class and
each parameter's own group hyper-parameters (fused / foreach included). Under FSDP2 the hooks
run on each sharded gradient right after its reduce-scatter (torch
`_fsdp_collectives.py` foreach_reduce). `made` sums the bytes of the gradients the hooks were
handed, the gradient row a ledger lists (none is left after the backward to measure).
"""
from __future__ import annotations

from memledger.engine import probe


class InBackward:
    """The container: `optimizers` (one per parameter, as 0.2 keeps them), no-op step."""

    def __init__(self, opt, model):
        per_param = {}
        for o in getattr(opt, "optimizers", [opt]):
            for group in o.param_groups:
                hyper = {k: v for k, v in group.items() if k not in ("params", "param_names")}
                for p in group["params"]:
                    per_param[p] = type(o)([{"params": [p], **hyper}])
        self.optimizers = list(per_param.values())
        self.made = 0

        def hook(p):
            self.made += probe.nbytes(p.grad)
            per_param[p].step()
            per_param[p].zero_grad()
        for p in per_param:
            p.register_post_accumulate_grad_hook(hook)
        unknown = [n for n, p in model.named_parameters() if p.requires_grad and p not in per_param]
        if unknown:
            raise RuntimeError(f"parameters no optimizer holds: {unknown[:3]}")

    def step(self) -> None:  # stepped in the backward
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None
