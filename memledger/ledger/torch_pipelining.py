"""What `torch.distributed.pipelining` itself holds on a pipeline rank (RuntimeSpec pp_engine
"pytorch", set explicitly; "auto" and "megatron" keep Megatron's one send + one receive buffer,
`communication.pp_items`: Megatron-Core's p2p_communication allocates a receive tensor per
transfer and frees a sent output's data, `deallocate_output_tensor`).

torch 2.13, torch/distributed/pipelining/stage.py (PipelineStage) and schedules.py; measured by
`memledger validate --engine torch` (memledger/engine/pp_buffers.py, docs/engine-validation.md).
B = b·s/cp (÷tp with SP) × h × act, one stage-boundary tensor; m micro-batches per step.
- activation receive buffers: `_setup_forward_recv_info` allocates one per micro-batch for every
  non-first stage at the first step; the received activation is the buffer itself
  (`_retrieve_recv_activations`); never freed (`clear_runtime_states` only drops their .grad):
  m·B per non-first stage of the rank, all step long.
- gradient receive buffers: `_setup_backward_recv_info` / `_create_grad_recv_info`, likewise one
  per micro-batch for every non-last stage: m·B per non-last stage, kept across steps.
- stage outputs: `forward_one_chunk` keeps each micro-batch's output in `fwd_cache` until its
  backward pops it (and holds it while it runs): one per micro-batch in flight — B on a
  non-last stage, the logits (b·s/cp × V/tp × act, vocab-parallel under loss_parallel) on the
  last, where no saved tensor holds them (cross-entropy keeps its fp32 upcast).
- sends still referenced at the peak (Schedule1F1B._step_microbatches, 1F1B only): the last
  backward's `bwd_sends` (its P2POps hold the stage input's gradient, which `stage_backward`
  handed over when it dropped `.grad`) live until the next backward has run — one B on a
  non-first stage once a steady-state backward follows another (m > w, w = min(m, stages − s)
  the warm-up forwards); and the warm-up's last fired forward send (`send_work`, a gloo Work
  holding micro-batch w−2's output) is waited only in the cooldown — one B on a non-last stage
  with w >= 2 once that micro-batch's backward is done before the steady state ends
  (2w − 1 <= m). GPipe waits its forward sends before the first backward (its peak) and its
  backward sends after the last. ScheduleInterleaved1F1B (`_PipelineScheduleRuntime.
  _step_microbatches`) keeps every send's Work in `send_ops` until the step ends ("there isn't
  an obvious time when to wait for them"): at the last backward that starts with the most
  micro-batches held (same activations, most sends), every output of a non-last stage whose
  micro-batch is through its backward and every input gradient a non-first stage has sent so
  far, one B each (walked over torch's order, `pipeline.order.rank_order`). Measured on pp=2
  v=2 m=2, 4, 6: 0/1, 4.9/7.0, 10.9/13.0 B against 0/1, 5/7, 11/13.
- RoPE (activations row, profiles that list cos/sin on the first stage: hf, hf-cpu): a stage of
  a transformers model computes its own position embeddings (LlamaModel.forward's rotary_emb;
  the harness's Stage): `LlamaRotaryEmbedding.forward` (Qwen3's alike) returns cos, sin of
  shape (position rows, s, head_dim) in the hidden states' dtype, and apply_rotary_pos_emb's
  q·cos / rotate_half(q)·sin save them (a checkpointed layer holds them as inputs instead): one
  cos + sin per micro-batch in flight on every later stage too (the first stage's are in the
  profile; transformers 5.24 models/llama/modeling_llama.py, models/qwen3/modeling_qwen3.py).
Ignores: DualPipeV's and zero-bubble schedules' send bookkeeping (not measured).
"""
from __future__ import annotations

from memledger.ledger.activations.inventory import ActTensor, tensor_bytes
from memledger.ledger.communication import boundary_bytes
from memledger.ledger.items import Item
from memledger.specs.loop import resolve_loop

SRC_STAGE = "torch 2.13 torch/distributed/pipelining/stage.py (PipelineStage)"


def applies(p, rt) -> bool:
    return p.pp > 1 and rt.pipeline_engine == "pytorch"


def logits_bytes(m, p, t) -> int:
    """The last stage's output: b·s/cp × V/tp logits in the activation format."""
    from memledger.ledger.activations.profiles.megatron import _vocab
    return tensor_bytes(ActTensor("stage.logits", "logits", _vocab(m, t, p), "act", split="tp"),
                        m, t, p)


def act_recv_item(m, p, t, stages, flights=(), shared: bool = False) -> Item:
    """m·B per non-first stage. torchtitan under full AC (`shared`): a stage's first
    checkpointed block keeps its input, which is its micro-batch's receive buffer
    (`_retrieve_recv_activations` wraps the buffer, DTensor.from_local under TP): those in-flight
    buffers are already in the activation row ('checkpointed layer.input'), so only the others
    count here (measured: the interleaved 405B case, stage 8 of pp rank 0: 8 × B fewer bytes
    than both counted). The transformers harness under full recompute (pp=2 m=4, rank 1)
    measures both apart, to the byte: why it copies is not known, so the rule is torchtitan's."""
    n = sum(1 for s in stages if s != 0)
    held = sum(k for s, k in flights if s != 0) if shared and t.recompute == "full" else 0
    b = boundary_bytes(m, p, t)
    return Item("communication", "pipelining activation receive buffers",
                (t.micro_batches * n - held) * b,
                f"m={t.micro_batches} micro-batches × {n} non-first stages × B (b·s/cp(/tp) × h × act), "
                f"allocated at the first step, kept across steps; less {held} holding a "
                "checkpointed stage input (in the activation row)",
                SRC_STAGE + " _setup_forward_recv_info, _retrieve_recv_activations")


def grad_recv_item(m, p, t, stages) -> Item:
    n = sum(1 for s in stages if s != p.n_stages - 1)
    return Item("communication", "pipelining gradient receive buffers",
                t.micro_batches * n * boundary_bytes(m, p, t),
                f"m={t.micro_batches} micro-batches × {n} non-last stages × B, kept across steps",
                SRC_STAGE + " _setup_backward_recv_info / _create_grad_recv_info")


def outputs_item(m, p, t, flights, chunked_loss: bool = False) -> Item:
    """Stage outputs kept in fwd_cache. The last stage's are its logits — unless the loss is
    chunked (torchtitan's ChunkedLossWrapper sets `_skip_lm_head`, the stage returns the final
    norm's output and the loss applies the head per chunk, components/loss.py): that tensor is
    the head's input the activations row already holds (`head.in`), so it adds nothing here."""
    last = p.n_stages - 1
    mid = sum(n for s, n in flights if s != last)
    end = 0 if chunked_loss else sum(n for s, n in flights if s == last)
    b, lg = boundary_bytes(m, p, t), logits_bytes(m, p, t)
    tail = ("; the last stage's outputs are the chunked loss's input, in the activations row"
            if chunked_loss else "")
    return Item("communication", "pipelining stage outputs (fwd_cache)", mid * b + end * lg,
                f"{mid} in-flight micro-batches × B + {end} × logits ({lg} B: b·s/cp × V/tp × "
                f"act){tail}", SRC_STAGE + " forward_one_chunk / backward_one_chunk (fwd_cache)")


def warmup_forwards(p, t, stage: int) -> int:
    """Schedule1F1B's warm-up forwards on a stage: min(m, stages − stage)."""
    return min(t.micro_batches, p.n_stages - stage)


def runtime_sends(p, t, r: int) -> tuple[int, int]:
    """Interleaved (torch's runtime): (outputs, input gradients) whose sends are still waiting in
    `send_ops` at the start of the last backward that holds the most micro-batches."""
    from memledger.ledger.pipeline.order import rank_order
    last, held, best, sent = p.n_stages - 1, 0, -1, [0, 0]
    at = (0, 0)
    for kind, s, _ in rank_order(p.schedule, p.pp, p.vpp, t.micro_batches, r, "pytorch"):
        if kind == "F":
            held += 1
            continue
        if held >= best:
            best, at = held, tuple(sent)
        held -= 1
        sent[0] += s != last
        sent[1] += s != 0
    return at


def pending_send_item(m, p, t, r: int, stages) -> Item:
    """Sends whose tensors nothing else holds at the peak: 1F1B's previous input gradient and
    warm-up forward send; interleaved's every send so far."""
    bwd = fwd = 0
    if p.schedule == "1f1b" and p.vpp == 1:
        (s,) = stages
        w, mb = warmup_forwards(p, t, s), t.micro_batches
        bwd = int(s != 0 and mb > w)
        fwd = int(s != p.n_stages - 1 and w >= 2 and 2 * w - 1 <= mb)
        src = "Schedule1F1B._step_microbatches (bwd_sends, send_work)"
    elif p.schedule == "interleaved":
        fwd, bwd = runtime_sends(p, t, r)
        src = "_PipelineScheduleRuntime._step_microbatches (send_ops)"
    else:
        src = "GPipe: none at its peak; zero-bubble / DualPipeV: not measured"
    return Item("communication", "pipelining sends held at the peak", (bwd + fwd) * boundary_bytes(m, p, t),
                f"{bwd} input gradients + {fwd} stage outputs whose sends are pending × B",
                "torch 2.13 torch/distributed/pipelining/schedules.py " + src)


def pipelining_items(m, p, t, rt, place) -> list[Item] | None:
    """The communication items of PipelineStage's buffers on the rank placed at `place`
    (pipeline.placement: its stages, micro-batches in flight; None: not pytorch)."""
    if not applies(p, rt):
        return None
    stages = place.stages
    shared = rt.loop.split("+")[0] == "torchtitan"
    return [act_recv_item(m, p, t, stages, place.flights, shared), grad_recv_item(m, p, t, stages),
            outputs_item(m, p, t, place.flights, resolve_loop(rt, t.profile).loss == "chunked"),
            pending_send_item(m, p, t, place.r, stages)]


def stage_rope_items(m, p, t, rt, place, first_entries) -> list[Item]:
    """RoPE cos/sin of every later stage of the rank, per micro-batch in flight (`place`:
    pipeline.placement)."""
    rope = [e for e in first_entries if e.tensor.cls == "rope"]
    n = sum(k for s, k in place.flights if s != 0)
    if not applies(p, rt) or not rope or not n:
        return []
    one = sum(e.bytes for e in rope)
    return [Item("activations", "later stages / rope cos+sin", n * one,
                 f"{n} micro-batches in flight on non-first stages × cos + sin ({one} B: "
                 f"{rope[0].formula})",
                 "transformers 5.24 models/llama (and qwen3) modeling: LlamaRotaryEmbedding."
                 "forward per stage, apply_rotary_pos_emb's q·cos saves cos")]
