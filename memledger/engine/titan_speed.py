"""A speed-up of torch 2.13's DTensor sharding propagation for list ops, same results (torch;
imported inside the torchtitan harness).

Fused AdamW (`torch._fused_adamw_`) takes every parameter's tensors as lists, so DTensor
propagates it as a TupleStrategy of one child per parameter, and for each child
`_propagate_use_strided_shard_flag(child, op_schema)` (distributed/tensor/_sharding_prop.py)
first scans *all* of the op's argument specs for the flag their `_StridedShard` placements
agree on, then fixes the child's specs up to it: O(N²) in the parameters under FSDP × TP, a
quarter of a 70B FSDP 32 × TP 8 case's CPU time (two propagations: the warm state's
`init_optim_state` and the measured step).

The flag depends on `op_schema.args_spec` only, which is all torch's function reads of the
schema. Here the scan is done once per schema, and torch's own function then runs on a
one-spec view of it (`_OneSpec`: one argument spec carrying that flag), so its fix-up is
applied as written; a schema without `_StridedShard` arguments returns before any fix-up, as in
torch. Checked by re-measuring every stored case byte for byte (`benchmarks/bench_engine.py
--torchtitan`).
"""
from __future__ import annotations


class _OneSpec:
    """What `_propagate_use_strided_shard_flag` reads of an OpSchema: its argument specs."""

    def __init__(self, spec):
        self.args_spec = (spec,)


def one_scan_per_op(torch) -> None:
    from torch.distributed.tensor import _sharding_prop as sp
    if getattr(sp._propagate_use_strided_shard_flag, "_memledger", False):
        return
    orig = sp._propagate_use_strided_shard_flag
    last: list = [None, None]  # (op_schema, its view): the TupleStrategy loop's one schema

    def view(op_schema):
        if last[0] is op_schema:
            return last[1]
        flag, specs = None, []
        for spec in op_schema.args_spec:
            if any(isinstance(p, sp._StridedShard) for p in spec.placements):
                v = spec.use_strided_shard_as_shard_order
                flag = True if flag is not None and flag != v else v
                specs.append(spec)
        rep = next((s for s in specs if s.use_strided_shard_as_shard_order == flag), None)
        out = False if not specs else (_OneSpec(rep) if rep is not None else op_schema)
        last[0], last[1] = op_schema, out
        return out

    def propagate(op_strategy, op_schema):
        v = view(op_schema)
        if v is not False:
            orig(op_strategy, v)

    propagate._memledger = True
    sp._propagate_use_strided_shard_flag = propagate
