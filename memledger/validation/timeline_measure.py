"""Measure a training step's timeline with the allocation tracker and line it up with the
ledger's predicted events (torch lazily; CPU or GPU).

One step of a validation case under a loop (`LoopRun`: zero_grad to None or not, AdamW fused /
foreach / for-loop, HF gradient checkpointing via the case's recompute) is run twice; the second
is measured inside `tracker.LiveBytes` with marks after each decoder layer's forward (forward
hook) and backward (its input norm's gradient accumulated), after each micro-batch's loss, after the optimizer
step and after zero_grad. Static bytes (weights, optimizer states and, when they persist,
gradients) exist before the mode is entered and are added to every mark.
The prediction at a mark is the bytes alive *after* the matching event of
`memledger.ledger.timeline.events`: the event's high point minus its transient, minus the layer's
activations for a backward event (freed once the layer's backward ends).
"""
from __future__ import annotations

import gc
from dataclasses import dataclass

from memledger.ledger import build_ledger
from memledger.model.hf_config import from_hf_config
from memledger.specs import ParallelSpec
from memledger.specs.runtime import RuntimeSpec
from memledger.validation.cases import Case


@dataclass(frozen=True)
class LoopRun:
    """How the measured loop runs: the knobs `memledger validate` covers."""

    name: str
    set_to_none: bool = True
    optimizer_impl: str = "foreach"  # fused | foreach | for-loop
    loss: str = "materialized"  # materialized (the model's loss) | chunked (chunked_loss)

    def runtime(self) -> RuntimeSpec:
        return RuntimeSpec(cuda_context_bytes=0, allocator_slack_pct=0, nccl_channels=0,
                           loop="pytorch", optimizer_impl=self.optimizer_impl, loss=self.loss,
                           grad_lifetime="on-demand" if self.set_to_none else "persistent")


LOOP_RUNS = (LoopRun("set_to_none foreach"), LoopRun("set_to_none fused", optimizer_impl="fused"),
             LoopRun("set_to_none for-loop", optimizer_impl="for-loop"),
             LoopRun("persistent foreach", set_to_none=False),
             LoopRun("set_to_none fused chunked-loss", optimizer_impl="fused", loss="chunked"))
CHUNKS = 8


def chunked_loss(model, x, chunks: int = CHUNKS):
    """Cross-entropy over sequence chunks, each chunk's head + loss checkpointed: the logits of
    one chunk exist at a time (in forward, and again in backward), none is saved — what a
    fused linear cross-entropy (Liger) achieves with one kernel."""
    import torch
    from torch.utils.checkpoint import checkpoint
    h = model.model(input_ids=x).last_hidden_state[:, :-1]
    labels = x[:, 1:]
    head = model.get_output_embeddings()

    def part(hc, yc):
        logits = head(hc).float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), yc.flatten(),
                                                 reduction="sum")
    total = sum(checkpoint(part, hc, yc, use_reentrant=False)
                for hc, yc in zip(h.chunk(chunks, 1), labels.chunk(chunks, 1)))
    return total / labels.numel()


def predicted_marks(case: Case, run: LoopRun, device: str = "cpu") -> list[tuple[str, int]]:
    """(mark label, bytes alive after the matching event) from the ledger's timeline."""
    led = build_ledger(from_hf_config(case.config, name=case.name), ParallelSpec(schedule="gpipe"),
                       case.train(device), run.runtime())
    return [(label, after) for label, after in event_marks(led) if label]


def event_marks(led) -> list[tuple[str | None, int]]:
    """(mark label or None, bytes alive after the event) for every event of rank 0."""
    r = led.ranks[0]
    sh = r.shape
    acts = {i: a for st in sh.stages for i, a, _ in st.layers}
    out = []
    for e in r.timeline:
        after = e.live(sh.static_bytes) - e.transient
        label = {"forward": f"F{e.micro_batch}.{e.layer}", "loss-forward": f"loss{e.micro_batch}",
                 "optimizer-step": "optimizer-step", "zero-grad": "zero-grad"}.get(e.phase)
        if e.phase == "backward" and e.layer >= 0:
            label, after = f"B{e.micro_batch}.{e.layer}", after - acts[e.layer]
        out.append((label, after))
    return out


def _optimizer(model, run: LoopRun):
    import torch
    impl = {"fused": dict(fused=True), "foreach": dict(foreach=True),
            "for-loop": dict(foreach=False)}[run.optimizer_impl]
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], **impl)


def measure_marks(case: Case, run: LoopRun, device: str = "cpu") -> dict:
    """Measured bytes at every mark of the second step, the tracker's peak and static bytes."""
    import torch

    from memledger.validation.measure import _batches, _forward, _tensor_bytes, build_model
    from memledger.validation.tracker import LiveBytes
    gc.collect()
    model = build_model(case, device)
    opt = _optimizer(model, run)
    batches = _batches(case, model.config.vocab_size, device)
    for x in batches:
        (chunked_loss(model, x) if run.loss == "chunked" else _forward(model, case, [x])[0]).backward()
    opt.step()
    opt.zero_grad(set_to_none=run.set_to_none)
    static = sum(_tensor_bytes(p) for p in model.parameters()) + \
        sum(_tensor_bytes(v) for s in opt.state.values() for v in s.values()
            if isinstance(v, torch.Tensor) and v.dim()) + \
        sum(_tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None)
    existing = [*model.parameters(), *model.buffers(), *batches,
                *(p.grad for p in model.parameters() if p.grad is not None),
                *(v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor))]
    tr = LiveBytes(existing)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    layers = base.model.layers
    state = {"mb": 0}
    hooks = []
    for i, layer in enumerate(layers):
        # hooks must return None (a value would replace the layer's output / input grads)
        hooks.append(layer.register_forward_hook(
            lambda mod, a, o, i=i: tr.mark(f"F{state['mb']}.{i}") and None))
        # a layer's backward ends with its input norm's gradient: mark when it is accumulated
        # (a frozen norm accumulates none: fine-tuning cases are compared without B marks)
        if layer.input_layernorm.weight.requires_grad:
            hooks.append(layer.input_layernorm.weight.register_post_accumulate_grad_hook(
                lambda p, i=i: tr.mark(f"B{state['mb']}.{i}") and None))
    try:
        with tr:
            losses = []
            for k, x in enumerate(batches):
                state["mb"] = k
                losses += [chunked_loss(model, x)] if run.loss == "chunked" else _forward(model, case, [x])
                tr.mark(f"loss{k}")
            for k, loss in enumerate(losses):
                state["mb"] = k
                (loss / len(batches)).backward()
                losses[k] = None
            del loss, losses
            opt.step()
            tr.mark("optimizer-step")
            opt.zero_grad(set_to_none=run.set_to_none)
            tr.mark("zero-grad")
    finally:
        for h in hooks:
            h.remove()
    out = {"static": static, "marks": [(k, static + v) for k, v in tr.marks],
           "peak_allocated": static + tr.peak_bytes, "peak_at": tr.peak_label}
    del model, opt, batches
    gc.collect()
    return out


def compare(case: Case, run: LoopRun, device: str = "cpu") -> dict:
    """Predicted vs measured at every mark both have (the first measurement of a label counts:
    a layer re-run by gradient checkpointing marks its forward again inside the backward)."""
    measured = measure_marks(case, run, device)
    got = dict(reversed(measured["marks"]))
    pred = predicted_marks(case, run, device)
    rows = [(k, p, got[k]) for k, p in pred if k in got]
    led = build_ledger(from_hf_config(case.config, name=case.name), ParallelSpec(schedule="gpipe"),
                       case.train(device), run.runtime())
    return {"case": case.name, "loop": run.name, "rows": rows, "marks": measured["marks"],
            "peak_predicted": led.ranks[0].peak_allocated_bytes,
            "peak_measured": measured["peak_allocated"], "peak_at": measured["peak_at"]}
