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
  - a send's Work holds the sent tensor until it is waited, as NCCL's does (ProcessGroupNCCL
    stashes a collective's inputs in the Work's `stashed_for_allocator_safety_` shelf, cleared
    by `wait()`; gloo's send Work holds its tensor too): the fake process group's Work holds
    nothing, so `schedules._batch_p2p`'s works are wrapped to (`_sends_held`) — the schedules
    keep them (1F1B's `send_work`, the interleaved runtime's `send_ops` to the step's end);
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
    if not case.preset:
        return dict(case.hf_config)["hidden_size"]
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


class _HeldWork:
    """A fake Work that keeps its sends' tensors until waited (module docstring)."""

    def __init__(self, work, tensors):
        self.work, self.tensors = work, tensors

    def wait(self, *a, **k):
        self.tensors = None
        return self.work.wait(*a, **k)

    def __getattr__(self, name):
        return getattr(self.work, name)


def _sends_held() -> None:
    import torch.distributed as dist
    from torch.distributed.pipelining import schedules
    if getattr(schedules._batch_p2p, "_memledger", False):
        return
    orig = schedules._batch_p2p

    def batch_p2p(p2p_ops, desc=None):
        works = orig(p2p_ops, desc)
        sent = [p.tensor for p in p2p_ops if p.op is dist.isend]
        return [_HeldWork(w, sent) for w in works] if sent else works
    batch_p2p._memledger = True
    schedules._batch_p2p = batch_p2p


def pp_config(cfg, case) -> None:
    """The pipeline settings of the case on torchtitan's Trainer.Config (in place)."""
    p = cfg.parallelism
    p.pipeline_parallel_degree = case.pp
    p.pipeline_parallel_schedule = case.schedule
    p.pipeline_parallel_microbatch_size = case.microbatch_size
    cfg.compile.enable = False


def run_titan_pp(case, cfg) -> dict:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from memledger.engine.titan_pp_step import build_and_measure_pp
    t0 = time.perf_counter()
    _p2p_stand_ins()
    _sends_held()
    SENT.clear()
    # torchtitan's meshes are pp-major (distributed/parallel_dims.py): pp rank k starts at k·w/pp
    rank = case.pp_rank * (case.world // case.pp)
    dist.init_process_group("fake", rank=rank, world_size=case.world, store=FakeStore())

    def on_dims(dims):
        if case.pp_rank:  # no stage of this rank has sent the hidden state's metadata
            SENT["forward"] = hidden_state_meta(case, dims)
    try:
        res = build_and_measure_pp(case, cfg, fake=True, on_dims=on_dims)
    finally:
        dist.destroy_process_group()
    return {**res, "seconds": round(time.perf_counter() - t0, 2)}


