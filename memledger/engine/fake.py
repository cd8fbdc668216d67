"""Real scale without a GPU: the same engine code under FakeTensorMode and the fake process
group, one process standing in for rank 0 of a world of hundreds (torch).

Following PyTorch's recipe (torch/testing/_internal/distributed/fake_pg.py; torchtitan's
scripts/estimate/estimation.py): the device mesh is created before fake mode is entered, the
default dtype is set to bf16 instead of calling .to(dtype) on a fake model, and the model,
its FSDP2/TP sharding, optimizer and inputs are all created inside fake mode. Collectives
return without moving data, so every rank would measure the same as rank 0 (FSDP2 shards evenly
up to the padding of dim 0; tp ranks hold equal shards).
Measured: the static rows from the (fake) shards, saved-for-backward bytes (`SavedProbe`) and
the live-bytes peak (`LiveBytes`); FSDPMemTracker's own peak is recorded next to them as the
estimate a torchtitan user would get.
"""
from __future__ import annotations

import time

from memledger.engine.cases import EngineCase


def _real_mesh_concatenate() -> None:
    """FSDP2 over a TP mesh concatenates the dp and tp meshes (real rank tensors) while the
    model is sharded inside fake mode; run that bookkeeping outside fake mode."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh
    orig = DeviceMesh.__dict__["_concatenate"]
    if getattr(orig, "_memledger_real", False):
        return
    fn = orig.__func__ if isinstance(orig, staticmethod) else orig

    def concatenate(*args, **kwargs):
        with unset_fake_temporarily():
            return fn(*args, **kwargs)
    concatenate._memledger_real = True
    DeviceMesh._concatenate = staticmethod(concatenate)


def run_fake(case: EngineCase) -> dict:
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from memledger.engine.worker import _mesh, build, measure_step
    t0 = time.perf_counter()
    _real_mesh_concatenate()
    dist.init_process_group("fake", rank=0, world_size=case.world, store=FakeStore())
    dtype = torch.get_default_dtype()
    try:
        mesh = _mesh(case)
        torch.set_default_dtype(torch.bfloat16)
        # the 2-D (dp, tp) mesh FSDP2 builds from real rank tensors inside fake mode
        with FakeTensorMode(allow_non_fake_inputs=True):
            mesh_, coords, hf, stages, mods, opt = build(case, mesh)
            res = measure_step(case, mesh, coords, hf, stages, mods, opt, fake=True)
    finally:
        torch.set_default_dtype(dtype)
        dist.destroy_process_group()
    return {"rank": 0, **res, "seconds": time.perf_counter() - t0}
