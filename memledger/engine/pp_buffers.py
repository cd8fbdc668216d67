"""torch.distributed.pipelining's own receive buffers on one rank (torch, imported by workers).

`PipelineStage` (torch 2.13 torch/distributed/pipelining/stage.py) allocates, once, at the
schedule's first step:
  - `_setup_forward_recv_info`: for every micro-batch 0..m-1 of a non-first stage, one buffer per
    stage input (`_make_tensor_from_meta`), stored in `args_recv_info[mb]`; the received
    activation *is* that buffer (`_retrieve_recv_activations`: `buffer.requires_grad_()`);
  - `_setup_backward_recv_info` -> `_create_grad_recv_info`: for every micro-batch of a non-last
    stage, one buffer per stage output, in `grad_recv_info[mb]`.
Neither is ever freed: `clear_runtime_states` (called at every step's start) empties
`fwd_cache` and `output_chunks` and sets the activation buffers' `.grad` to None, nothing more;
`_prepare_forward_infra` / `_prepare_backward_infra` run only while the schedule is not yet
initialised. No op returns them, so a TorchDispatchMode never sees them: the harness registers
them with its live-bytes probe before the measured step (`worker.measure_step`).
"""
from __future__ import annotations


def stages_of(sched) -> list:
    """The PipelineStage objects a schedule drives on this rank (single- or multi-stage)."""
    return list(getattr(sched, "_stages", None) or [sched._stage])


def _buffers(infos: dict) -> list:
    return [i.buffer for per_mb in infos.values() for i in per_mb
            if not i.is_root_arg and i.buffer is not None]


def recv_buffers(sched) -> dict[str, list]:
    """Every persistent receive buffer of the rank's stages: activations and gradients."""
    stages = stages_of(sched)
    return {"activation": [b for s in stages for b in _buffers(s.args_recv_info)],
            "gradient": [b for s in stages for b in _buffers(s.grad_recv_info)]}


def recv_bytes(sched) -> dict[str, int]:
    """Bytes of the receive buffers by kind, each storage once (their local shards under DTensor)."""
    out = {}
    for kind, bufs in recv_buffers(sched).items():
        seen = {}
        for b in bufs:
            st = b.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        out[kind] = sum(seen.values())
    return out
