"""Two speed-ups of torch 2.13 inside the torchtitan harness, same results (torch; imported by
engine/titan.py): DTensor's sharding propagation of list ops (`one_scan_per_op`, below) and
FakeTensorMode's dispatch-cache keys (`fast_cache_keys`).

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


# torch 2.13 `TensorMetadata`, the fields `tensor_into` writes, in this order
METADATA_FIELDS = ("dtype", "shape", "stride", "device", "layout", "memory_format",
                   "storage_offset", "storage_bytes", "requires_grad", "is_quantized", "is_conj",
                   "is_neg", "is_inference", "is_sparse", "is_coalesced", "dense_dim", "sparse_dim")


def fast_cache_keys(torch) -> None:
    """FakeTensorMode's dispatch-cache key, the same list built with fewer Python calls.

    torch 2.13 `_subclasses/fake_tensor.py` keys every cached op on its arguments, a FakeTensor
    flattened field by field (`extract_tensor_metadata(t)._flatten_into`, one recursive
    `_prep_args_for_hash` per shape and stride): a quarter of a fake-scale case's CPU time.
    For the arguments this harness passes — this mode's dense, strided, non-symbolic
    FakeTensors and plain scalars — the same entries in the same order are appended directly;
    every other argument (a SymInt, a Parameter, a sparse or another mode's tensor, a graph
    module) goes through torch's own function, which raises its own bypasses. A torch whose
    TensorMetadata has other fields keeps its own function (METADATA_FIELDS). Checked: the key
    equals torch's on every call of a case (tests/test_titan_speed.py), and every stored case
    re-measures byte for byte (`benchmarks/bench_engine.py --torchtitan`)."""
    import dataclasses

    from torch._prims_common import suggest_memory_format
    from torch._subclasses import fake_tensor as ft
    mode_cls = ft.FakeTensorMode
    if getattr(mode_cls._prep_args_for_hash, "_memledger", False):
        return
    if tuple(f.name for f in dataclasses.fields(ft.TensorMetadata)) != METADATA_FIELDS:
        return  # another torch: its key has other entries than the ones written below
    orig = mode_cls._prep_args_for_hash
    fake, strided, contiguous, size = ft.FakeTensor, torch.strided, torch.contiguous_format, \
        torch.Size
    scalars = frozenset((int, float, bool, str, type(None), torch.dtype, torch.device,
                         torch.layout, torch.memory_format))

    def tensor_into(out: list, t) -> None:  # TensorMetadata's fields, flattened, in order
        shape, stride = t.shape, t.stride()
        mf = suggest_memory_format(t) if len(shape) in (4, 5) else contiguous
        out.append(t.dtype)
        out.append(size)
        out.append(f"length_{len(shape)}")
        for d in shape:
            out.append(int)
            out.append(d)
        out.append(tuple)
        out.append(f"length_{len(stride)}")
        for d in stride:
            out.append(int)
            out.append(d)
        out.extend((t.device, strided, mf if t.is_contiguous(memory_format=mf) else None,
                    t.storage_offset(), t.untyped_storage().nbytes(), t.requires_grad,
                    t.is_quantized, t.is_conj(), t.is_neg(), t.is_inference(), False, None,
                    None, None))

    def prep(self, result, args, state, id_hashed_objects):
        if isinstance(args, (list, tuple, dict)):
            result.append(type(args))
            result.append(f"length_{len(args)}")
        if isinstance(args, dict):
            prep(self, result, args.keys(), state, id_hashed_objects)
            prep(self, result, args.values(), state, id_hashed_objects)
            return
        for arg in args:
            tp = type(arg)
            if tp in scalars:
                result.append(tp)
                result.append(arg)
            elif tp is fake and arg.fake_mode is self and arg.constant is None \
                    and arg.layout is strided and not arg._has_symbolic_sizes_strides:
                tensor_into(result, arg)
            elif tp is list or tp is tuple or tp is dict:
                prep(self, result, arg, state, id_hashed_objects)
            else:  # torch's own branch for it (an iterator: no length prefix)
                orig(self, result, iter((arg,)), state, id_hashed_objects)

    prep._memledger = True
    prep._torch = orig
    mode_cls._prep_args_for_hash = prep
