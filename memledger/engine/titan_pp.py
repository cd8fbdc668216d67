"""torchtitan's pipeline parallelism for one rank of a real world: FakeTensorMode + the fake
process group, torchtitan's own `pipeline_llm` and torch.distributed.pipelining's schedule (torch).

What runs is torchtitan's, in its Trainer's order (torchtitan/trainer.py, 0.3.0): the whole model
built on the meta device, the model spec's `pipelining_fn` (`pipeline_llm`,
distributed/pipeline_parallel.py: the stage split `_generate_llm_fqn_per_model_part` with the
first / last stage counted one layer lighter for tok_embeddings and [norm, lm_head], the stages
this pp rank owns — rank r holds stages r, r + pp, ... — `_split_module`, one `PipelineStage`
each, `parallelize_fn` per model part: TP, AC, FSDP2 with reshard_after_forward = not pp_enabled,
and `_build_pipeline_schedule`: local_batch / pipeline_parallel_microbatch_size micro-batches,
scale_grads=False), `to_empty` + `init_weights` per part, the optimizer over the parts, the
state a first `schedule.step` leaves (titan_warm.warm_pipeline: the stages' metadata inference
and receive buffers, FSDP2 initialised, the optimizer states), then the measured
`schedule.step` with `optimizers.step()` / `zero_grad()` after it.
The rank measured is the first of pp rank `case.pp_rank` (torchtitan's meshes are pp-major):
pp rank 0 holds the most micro-batches in flight under 1F1B, a middle rank the most layers.
Stand-ins, each because the fake process group moves no data, none changing what is held:
  - the warm-up vote (`PipelineStage._warmup_forward_vote` / `_warmup_backward_result`, torch 2.13
    pipelining/stage.py) multiplies every stage's STATIC/DYNAMIC vote over send/recv and reads
    the product with `.item()`, which a fake tensor cannot answer; torchtitan passes no example
    inputs to any stage, so every stage votes DYNAMIC: the rank's own product is the answer;
  - the metadata exchange (`_send_meta` / `_recv_meta`, pickled objects over P2P): a stage on
    another rank would send the hidden state's metadata forward (the same tensor every stage
    but the last outputs: what this rank's own earlier stage sent, or, on a rank without
    stage 0, `hidden_state_meta`, as pp rank 0 sends it) and its input gradient's metadata
    backward (the stage's own output's shape and placement, without requires_grad); the
    stand-in hands over exactly those;
  - `schedule.step`: torchtitan 0.3.0 passes pre-split micro-batches (`arg_mbs=`, `target_mbs=`,
    an API of a later torch); torch 2.13's `step` takes the local batch and splits it into the
    same micro-batches (views of the batch, the bytes torchtitan's separate tensors hold);
  - compile is off (`compile.enable`) and float8 not applied: fake mode on the CPU can build
    neither (`llama3_405b()` itself refuses to build its Float8 converter off an SM89 GPU, so
    the 405B flavor runs under `llama3_70b()`'s trainer config: TP 8, FullAC, ChunkedLossWrapper,
    AdamW, the same vocabulary — titan_cases.py); measured is the eager bf16 step. Plus titan.py's stand-ins
    (attention kernel, weight init, device).
"""
from __future__ import annotations

import dataclasses
import time


class _Vote:
    """The warm-up vote's product, a plain number the schedule reads with `.item()`."""

    def __init__(self, v: int):
        self.v = v

    def item(self) -> int:
        return self.v


SENT: dict[str, object] = {}  # the metadata this rank's stages would send, by direction


def hidden_state_meta(case, dims):
    """What stage 0 sends forward when no stage of this rank has run yet: the hidden state of
    one micro-batch, (microbatch_size, seq/cp, dim) in FSDP2's bf16 param dtype, a DTensor
    Shard(1) over the tp mesh under TP (torchtitan llama3/parallelize.py: sequence parallel
    between blocks). Read off pp rank 0's own send (tp = 2: local (1, 512, 4096) of global
    (1, 1024, 4096), Shard(1), mesh ('tp',))."""
    import torch
    from torch.distributed.pipelining._utils import extract_tensor_meta
    from torch.distributed.pipelining.stage import _StageForwardMeta
    from torch.distributed.tensor import DTensor, Shard
    dim = dims_model_dim(case)
    shape = (case.microbatch_size, case.seq // case.cp, dim)
    h = torch.empty(shape, dtype=torch.bfloat16, device="meta")
    if case.tp > 1:
        h = DTensor.from_local(h.tensor_split(case.tp, dim=1)[0].contiguous(),
                               dims.get_mesh("tp"), [Shard(1)], run_check=False)
    return _StageForwardMeta(forward_metas=(extract_tensor_meta(h.requires_grad_()),))


def dims_model_dim(case) -> int:
    from memledger.model.presets import model
    return model(case.preset).hidden


def _p2p_stand_ins() -> None:
    from torch.distributed.pipelining.stage import (InferenceMode, PipelineStage,
                                                    _StageBackwardMeta, _StageForwardMeta)
    if getattr(PipelineStage._recv_meta, "_memledger", False):
        return
    sent = SENT

    def forward_vote(self, has_backward, received_acc=None):
        mine = 0 if InferenceMode.needs_dynamic(self._user_meta, has_backward) else 1
        return _Vote(mine * (received_acc.v if received_acc is not None else 1))

    def backward_result(self, received_result=None):
        return received_result if received_result is not None else _Vote(0)

    def send_meta(self, meta, dst_stage):
        sent["forward" if isinstance(meta, _StageForwardMeta) else "backward"] = meta

    def recv_meta(self, src_stage):
        if src_stage < self.stage_index:  # the previous stage's output: the hidden state
            return sent["forward"]
        outs = self._stage_meta.outputs  # the next stage's input gradient: this stage's output
        return _StageBackwardMeta(backward_metas=tuple(
            dataclasses.replace(o, requires_grad=False) for o in outs))
    recv_meta._memledger = True
    PipelineStage._warmup_forward_vote = forward_vote
    PipelineStage._warmup_backward_result = backward_result
    PipelineStage._send_meta = send_meta
    PipelineStage._recv_meta = recv_meta


def pp_config(cfg, case) -> None:
    """The pipeline settings of the case on torchtitan's Trainer.Config (in place)."""
    p = cfg.parallelism
    p.pipeline_parallel_degree = case.pp
    p.pipeline_parallel_schedule = case.schedule
    p.pipeline_parallel_microbatch_size = case.microbatch_size
    cfg.compile.enable = False


def run_titan_pp(case, cfg) -> dict:
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.components.loss import ChunkedLossWrapper
    from torchtitan.distributed import ParallelDims

    from memledger.engine import probe
    t0 = time.perf_counter()
    _p2p_stand_ins()
    SENT.clear()
    # torchtitan's meshes are pp-major (distributed/parallel_dims.py): pp rank k starts at k·w/pp
    rank = case.pp_rank * (case.world // case.pp)
    dist.init_process_group("fake", rank=rank, world_size=case.world, store=FakeStore())
    init = torch.nn.init._no_grad_trunc_normal_
    try:
        dims = ParallelDims.from_config(cfg.parallelism, case.world)
        dims.build_mesh()
        if case.pp_rank:  # no stage of this rank has sent the hidden state's metadata
            SENT["forward"] = hidden_state_meta(case, dims)
        spec = cfg.model_spec
        spec.model.update_from_config(config=cfg)
        with torch.device("meta"):
            model = spec.model.build()
        loss_fn = cfg.loss.build(compile_config=cfg.compile)
        sched, parts, first, last = spec.pipelining_fn(
            model, parallel_dims=dims, training=cfg.training, parallelism=cfg.parallelism,
            compile_config=cfg.compile, ac_config=cfg.activation_checkpoint, dump_folder="",
            device=torch.device("cpu"), model_config=spec.model,
            parallelize_fn=spec.parallelize_fn, loss_fn=loss_fn)
        del model
        torch.nn.init._no_grad_trunc_normal_ = lambda t, *a, **k: t
        with FakeTensorMode(allow_non_fake_inputs=True):
            for m in parts:
                m.to_empty(device="cpu")
                with torch.no_grad():
                    m.init_weights(buffer_device=None)
                m.train()
            opt = cfg.optimizer.build(model_parts=parts)
            if last and isinstance(loss_fn, ChunkedLossWrapper):
                loss_fn.set_lm_head(parts[-1].lm_head)
                parts[-1]._skip_lm_head = True
            res = _measure(case, sched, parts, opt, first, last, probe, torch)
    finally:
        torch.nn.init._no_grad_trunc_normal_ = init
        dist.destroy_process_group()
    stages = [s.stage_index for s in _stages(sched)]
    return {**res, "stages": stages, "layers_per_stage": [len(m.layers) for m in parts],
            "n_microbatches": sched._n_microbatches, "schedule_class": type(sched).__name__,
            "seconds": round(time.perf_counter() - t0, 2)}


def _stages(sched):
    from memledger.engine.pp_buffers import stages_of
    return stages_of(sched)


def _recv_bytes(bufs: dict) -> dict[str, int]:
    """Receive-buffer bytes by kind, each storage once (by storage object: every fake storage's
    data_ptr is 0, which pp_buffers.recv_bytes keys on)."""
    from memledger.engine.probe import local
    out = {}
    for kind, tensors in bufs.items():
        storages = {}
        for b in tensors:
            st = local(b).untyped_storage()
            storages[id(st)] = st  # kept alive, so no id is reused
        out[kind] = sum(st.nbytes() for st in storages.values())
    return out


def _unsharded(parts) -> int:
    from memledger.engine.probe import unsharded_bytes
    return sum(unsharded_bytes(m) for m in parts)


def _cached(sched, inputs: bool) -> int:
    """Bytes held in `fwd_cache` until each micro-batch's backward, each storage once: the stage
    outputs (sent to the next stage; the ledger's 'pipelining stage outputs (fwd_cache)'), or
    the inputs of non-first stages — their receive buffers, which the first checkpointed layer
    keeps as its input. The last stage's outputs are left out: under ChunkedLossWrapper
    (`_skip_lm_head`) they are the final norm's output, the loss's input, which the ledger
    counts in the activations row (`head.in`), not as a stage output."""
    from memledger.engine.probe import local
    seen = {}
    for s in _stages(sched):
        if inputs and s.is_first or not inputs and s.is_last:
            continue
        for outs, ins in s.fwd_cache.values():
            for o in (ins if inputs else outs):
                if hasattr(o, "untyped_storage"):
                    st = local(o).untyped_storage()
                    seen[id(st)] = st
    return sum(st.nbytes() for st in seen.values())


def _measure(case, sched, parts, opt, first, last, probe, torch) -> dict:
    from memledger.engine.pp_buffers import recv_buffers
    local_seq = case.seq // case.cp
    tokens = torch.randint(0, 1000, (case.local_batch, local_seq))
    labels = torch.randint(0, 1000, (case.local_batch, local_seq))
    gvt = torch.tensor(float(labels.numel()))
    # (F/B, stage, live bytes after, unsharded parameters, stage outputs kept in fwd_cache,
    #  receive buffers holding an in-flight stage input)
    events: list[tuple[str, int, int, int, int, int]] = []
    live_box: list = [None]

    def hooked(stage):
        fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk

        def forward_one_chunk(*a, **k):
            out = fwd(*a, **k)
            if live_box[0] is not None:
                events.append(("F", stage.stage_index, live_box[0].current, _unsharded(parts),
                               _cached(sched, False), _cached(sched, True)))
            return out

        def backward_one_chunk(*a, **k):
            out = bwd(*a, **k)
            if live_box[0] is not None:
                events.append(("B", stage.stage_index, live_box[0].current, _unsharded(parts),
                               _cached(sched, False), _cached(sched, True)))
            return out
        stage.forward_one_chunk, stage.backward_one_chunk = forward_one_chunk, backward_one_chunk
    for s in _stages(sched):
        hooked(s)
    marks: dict[str, int] = {}

    def step(live=None):
        losses = [] if last else None
        kw = {"target": labels if last else None, "losses": losses, "return_outputs": False,
              "loss_kwargs": {"global_valid_tokens": gvt}}
        if first:
            sched.step(tokens, **kw)
        else:
            sched.step(**kw)
        if live is not None:
            marks["after_backward"] = live.current
            marks["gradients"] = sum(probe.nbytes(p.grad) for m in parts for p in m.parameters()
                                     if p.grad is not None)
        opt.step()
        opt.zero_grad()

    from memledger.engine.titan_warm import warm_pipeline  # what a first step leaves
    warm_pipeline(sched, _stages(sched), opt, (tokens,) if first else (),
                  labels if last else None, [] if last else None,
                  {"global_valid_tokens": gvt})
    live = probe.LiveBytes()
    for m in parts:
        live.track(*m.parameters(), *m.buffers())
    for o in getattr(opt, "optimizers", [opt]):
        for s in o.state.values():
            live.track(*s.values())
    bufs = recv_buffers(sched)
    live.track(*bufs["activation"], *bufs["gradient"], tokens, labels)
    base = live.current
    live.samples.clear()
    live_box[0] = live
    with live:
        marks["before_step"] = live.current
        step(live)
    live_box[0] = None
    rows = probe.static_rows(parts, [o.state for o in getattr(opt, "optimizers", [opt])])
    # activations: the live bytes the warm-up leaves, the forwards before the first backward,
    # less the stage units FSDP2 keeps unsharded from forward to backward under PP and the
    # stage outputs torch keeps for the sends, plus the receive buffers (allocated at step 1)
    # that hold the in-flight stage inputs the checkpointed first layers keep
    warm = next(i for i, e in enumerate(events) if e[0] == "B")
    _, _, at_warm, unsharded, outputs, received = events[warm - 1]
    return {"weights": rows["weights"], "gradients": marks["gradients"],
            "optimizer": rows["optimizer"],
            "activations": at_warm - marks["before_step"] - unsharded - outputs + received,
            "unsharded_at_warmup_end": unsharded, "outputs_at_warmup_end": outputs,
            "received_inputs_at_warmup_end": received,
            "warmup_forwards": warm,
            "recv_buffers": _recv_bytes(bufs), "base_live": base, "peak_live": live.peak,
            "marks": marks, "events": [list(e) for e in events], "timeline": live.timeline(),
            "at_peak": live.at_peak()}
