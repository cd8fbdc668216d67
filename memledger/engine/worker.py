"""One rank of an engine case: build, parallelize, train two steps, measure the second (torch).

Ranks are laid out pp-major, then dp, then tp (torch `init_device_mesh` order), so tp ranks are
neighbours as on a node. Each pipeline rank builds the whole tiny model with the same seed and
keeps its stages (`pp.rank_stages`: chunk c of rank r is stage c·pp + r, Megatron's and
torch's interleaved placement). Inputs: m micro-batches of b × s random ids, different per dp
rank, identical across tp ranks.
The measured step runs inside `probe.SavedProbe` and `probe.LiveBytes`; FSDP2 cases with one
micro-batch run one more step under PyTorch's FSDPMemTracker (its own estimate). Results go to
`<out>/rank<r>.json`; a failure raises in the worker, which torch.multiprocessing reports with
the rank (see `workers`). `measure_step` is shared with the fake-scale runner (`fake`).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from memledger.engine.cases import EngineCase


def _mesh(case: EngineCase):
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", (case.pp, case.dp, case.tp), mesh_dim_names=("pp", "dp", "tp"))


def _stages(case: EngineCase, coords: dict):
    from memledger.engine.cases import model_spec
    from memledger.engine.stage import Stage, build_hf
    from memledger.ledger.pipeline.schedules import stage_layers
    p = case.parallel()
    layers = stage_layers(model_spec(case), p)
    hf = build_hf(case.config)
    ids = p.rank_stages(coords["pp"])
    stages = {s: Stage(hf, layers[s], s == 0, s == p.n_stages - 1, case.seq) for s in ids}
    return hf, stages


def _batches(case: EngineCase, vocab: int, dp_rank: int, fake: bool = False):
    import torch
    shape = (case.micro_batches * case.micro_batch, case.seq)
    if fake:  # a generator is a real object; fake mode only needs the shape
        return torch.randint(0, vocab, shape)
    g = torch.Generator().manual_seed(1 + dp_rank)
    return torch.randint(0, vocab, shape, generator=g)


def build(case: EngineCase, mesh=None):
    mesh = mesh if mesh is not None else _mesh(case)
    coords = {n: mesh.get_local_rank(n) for n in ("pp", "dp", "tp")}
    hf, stages = _stages(case, coords)
    from memledger.engine import parallelize as par
    if case.tp > 1:
        for s in stages.values():
            par.apply_tp(s, mesh["tp"], case.sp)
    if case.recompute == "full":  # after TP, before FSDP (torchtitan's order)
        for s in stages.values():
            par.apply_ac(s)
    dp_group = mesh["dp"].get_group()
    mods = dict(stages)
    experts = []
    if case.ep > 1:  # experts over the dp ranks (engine.ep): each expert lives on one rank
        from memledger.engine.ep import apply_ep
        for s in stages.values():
            experts += [p for m in apply_ep(s, dp_group, case.ep) for p in m.parameters()]
    if case.zero >= 2:  # FSDP2 shards the rest over dp; EP's experts are whole on their rank
        for s in stages.values():
            par.apply_fsdp(s, mesh["dp"], case.zero, ignored=set(experts))
    elif case.dp > 1 and case.ep == 1:  # (EP without FSDP: dense gradients not all-reduced;
        mods = {k: par.apply_ddp(s, dp_group) for k, s in stages.items()}  # DDP's bucket views
        # would add no memory, and EP parameters differ by rank)
    opt = par.optimizer(list(stages.values()), case.zero, dp_group)
    return mesh, coords, hf, stages, mods, opt


def _loss_parallel(loss_fn):
    """The loss on vocab-sharded logits; its backward runs under loss_parallel too."""
    from torch.distributed.tensor.parallel import loss_parallel

    def loss(logits, labels):
        with loss_parallel():
            out = loss_fn(logits, labels)
        return _LossParallelBackward(out)
    return loss


class _LossParallelBackward:
    """A loss whose backward() enters loss_parallel (its gradient rules live there)."""

    def __init__(self, t):
        self.t = t

    def __truediv__(self, k):
        return _LossParallelBackward(self.t / k)

    def backward(self):
        from torch.distributed.tensor.parallel import loss_parallel
        with loss_parallel():
            self.t.backward()


def _step_flat(case, mods, loss_fn, batch, opt):
    """pp = 1: all m forwards, then the m backwards (GPipe order, the ledger's pp=1 schedule)."""
    (mod,) = mods.values()
    losses = [loss_fn(mod(x), x) / case.micro_batches
              for x in batch.split(case.micro_batch)]
    for loss in losses:
        loss.backward()
    del losses
    opt.step()
    opt.zero_grad(set_to_none=False)


def _schedule(case, mods, mesh, loss_fn):
    import torch
    from torch.distributed import pipelining as pl
    group = mesh["pp"].get_group()
    p = case.parallel()
    stages = [pl.PipelineStage(m, s, p.n_stages, torch.device("cpu"), group=group)
              for s, m in mods.items()]
    if case.schedule == "interleaved":
        return pl.ScheduleInterleaved1F1B(stages, n_microbatches=case.micro_batches, loss_fn=loss_fn)
    cls = pl.ScheduleGPipe if case.schedule == "gpipe" else pl.Schedule1F1B
    return cls(stages[0], n_microbatches=case.micro_batches, loss_fn=loss_fn)


def _step_pp(case, sched, stages, batch, opt):
    p = case.parallel()
    first = 0 in stages
    last = p.n_stages - 1 in stages
    args = (batch,) if first else ()
    kw = {"target": batch} if last else {}
    # return_outputs=False: a training step needs no merged outputs (torch's default True keeps
    # every micro-batch's logits on the last stage until the step ends)
    sched.step(*args, return_outputs=False, **kw)
    opt.step()
    opt.zero_grad(set_to_none=False)


def run_rank(rank: int, case: EngineCase, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=case.world)
    try:
        t0 = time.perf_counter()
        mesh, coords, hf, stages, mods, opt = build(case)
        res = {"rank": rank, **measure_step(case, mesh, coords, hf, stages, mods, opt),
               "seconds": time.perf_counter() - t0}
        Path(out, f"rank{rank}.json").write_text(json.dumps(res))
    finally:
        dist.destroy_process_group()


def measure_step(case: EngineCase, mesh, coords, hf, stages, mods, opt, fake: bool = False) -> dict:
    """Step 1 brings gradients and optimizer states to life (DDP: steps 1-2, its buckets
    rebuilt); the next is measured (live bytes, saved tensors, held micro-batches); FSDP2 with
    m = 1 runs one more under FSDPMemTracker."""
    from memledger.engine import probe
    from memledger.engine.parallelize import optimizer_states
    from memledger.engine.stage import make_loss
    loss_fn = make_loss(hf)
    if case.tp > 1:
        loss_fn = _loss_parallel(loss_fn)
    batch = _batches(case, hf.config.vocab_size, coords["dp"], fake)
    if case.pp > 1:
        sched = _schedule(case, mods, mesh, loss_fn)

        def step():
            _step_pp(case, sched, stages, batch, opt)
    else:
        def step():
            _step_flat(case, mods, loss_fn, batch, opt)
    step()  # step 1: gradients and optimizer states come to life
    if case.dp > 1 and case.zero < 2 and case.ep == 1:
        # DDP rebuilds its gradient buckets in the order step 1 produced them, at step 2's
        # first forward (DistributedDataParallel._pre_forward -> reducer._rebuild_buckets):
        # old and new buckets live together once. Measure a steady step.
        step()
    # FSDPMemTracker follows one forward per module and step: m = 1 only
    fsdp = case.zero >= 2 and case.pp == 1 and case.micro_batches == 1
    root = next(iter(stages.values()))
    opt_states = optimizer_states(opt)
    live = probe.LiveBytes()
    for m in stages.values():
        live.track(*m.parameters(), *(p.grad for p in m.parameters() if p.grad is not None),
                   *m.buffers())
    for st in opt_states:
        for s in st.values():
            live.track(*s.values())
    live.track(batch)
    pp_recv = {}
    if case.pp > 1:  # pipelining's receive buffers: allocated at step 1, no op returns them
        from memledger.engine.pp_buffers import recv_buffers, recv_bytes
        bufs = recv_buffers(sched)
        live.track(*bufs["activation"], *bufs["gradient"])
        kept = {b.untyped_storage().data_ptr() for v in bufs.values() for b in v}
        pp_recv = recv_bytes(sched)
    base = live.current
    live.samples.clear()  # the timeline starts with the measured step
    ep_mods = [m for s in stages.values() for m in s.modules() if hasattr(m, "received_rows")]
    for m in ep_mods:
        m.received_rows.clear()
    with probe.SavedProbe(stages) as sp, live:
        step()
    res_fsdp = {}
    if fsdp:
        mt = probe.fsdp_tracker(root, opt, [batch])
        with mt:
            step()
        res_fsdp = probe.peak_snapshot(mt)
    if case.pp > 1:  # the same storages after the measured step: kept across steps
        after = recv_buffers(sched)
        pp_recv["kept_across_steps"] = kept == {b.untyped_storage().data_ptr()
                                                for v in after.values() for b in v}
    rows = probe.static_rows(list(stages.values()), opt_states)
    first = sp.at_first_backward or {"activations": 0, "held": {}}
    return {"coords": coords, **rows, "activations": first["activations"],
            "held": {str(k): v for k, v in first["held"].items()},
            "inputs": probe.nbytes(batch), "base_live": base, "peak_live": live.peak,
            "timeline": live.timeline(), "at_peak": live.at_peak(),
            "ep_received_rows": [n for m in ep_mods for n in m.received_rows],
            "fsdp_tracker_peak": res_fsdp, **({"pp_recv_buffers": pp_recv} if pp_recv else {})}
