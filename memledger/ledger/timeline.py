"""The step timeline of one pipeline rank: ordered events and the bytes alive at each.

Events, in the schedule's order (`action_order`): each layer's forward per micro-batch, the
loss forward (last stage), the loss backward, each layer's backward, the optimizer step and
zero_grad. Each event records the bytes alive at its high point:
  forward layer   after its saved tensors are added (a forward only grows memory)
  loss forward    + the forward working set (logits and their fp32 upcast, amp's cast cache)
  loss backward   + the logits gradients; then the head/MTP gradients are allocated
                  (on-demand) and the last stage's tensors (final norm, logits) are freed
  backward layer  its gradients allocated (on-demand, first backward of the stage only) and
                  the recompute working set, *before* its saved tensors are freed (they are
                  read by the backward); the first-stage tensors go at the stage's end
  optimizer step  every gradient + the step's temporaries; activations and communication
                  buffers are free (docs/design.md §2, docs/design-notes.md 1)
  zero_grad       gradients freed (set_to_none: on-demand) or kept (persistent)
peak_allocated is the maximum over events. With persistent gradients that maximum is the
closed form static + max(staircase + buffers + largest transient, step temporaries): the
activations never exceed the staircase held at the first backward and every transient meets
it there (the recompute working set net of the last stage's tensors, freed just before). With on-demand gradients (PyTorch's zero_grad(set_to_none=True), default since 2.0)
the first backward of each stage starts with no gradient and allocates them layer by layer
while freeing that layer's activations — the events are walked.
Order (per rank, m micro-batches, n = its in-flight count): gpipe: all forwards, then all
backwards; 1f1b / zb-h1: n forwards, then backward k followed by forward n + k (Narayanan et al.
2021, Megatron-Core schedules.py forward_backward_pipelining_without_interleaving). Interleaved
and the V schedules take a coarse order consistent with `schedules.in_flight`: forwards up to
the staircase, then each backward is followed by a forward of the same stage. A per-rank action
list (e.g. from a schedule simulator) can replace `action_order`.
Ignores: the in-flight activation gradient of one layer, bucket all-reduce timing (buffers are
alive for the whole forward/backward).
"""
from __future__ import annotations

from typing import NamedTuple

from memledger.ledger.items import Item
from memledger.ledger.step_in_backward import stepped_backward
from memledger.ledger.titan_lifetimes import stage_end
from memledger.ledger.timeline_shape import RankShape


class Event(NamedTuple):
    phase: str  # forward | loss-forward | loss-backward | backward | optimizer-step | zero-grad
    stage: int  # -1 outside the pipeline
    micro_batch: int  # -1 outside the pipeline
    layer: int  # -1 when not a layer
    gradients: int
    activations: int
    communication: int
    transient: int

    def live(self, static_bytes: int) -> int:
        return static_bytes + self.gradients + self.activations + self.communication + self.transient


class PeakEvent(NamedTuple):
    phase: str
    stage: int
    layer: int
    micro_batch: int
    index: int  # position in the rank's timeline (-1 when found in closed form)
    bytes: int


def action_order(sh: RankShape) -> list[tuple[str, int, int]]:
    """(F|B, stage, micro-batch) of the rank, in execution order."""
    if sh.order:
        return list(sh.order)
    m, st = sh.micro_batches, [s.stage for s in sh.stages]
    if sh.schedule == "gpipe":
        return [("F", s, k) for k in range(m) for s in st] + \
               [("B", s, k) for k in range(m) for s in reversed(st)]
    if sh.schedule in ("1f1b", "zb-h1") and len(st) == 1:
        n, s = sh.stages[0].in_flight, st[0]
        out = [("F", s, k) for k in range(n)]
        for k in range(m):
            out.append(("B", s, k))
            if n + k < m:
                out.append(("F", s, n + k))
        return out
    return _coarse_order(sh)


def _coarse_order(sh: RankShape) -> list[tuple[str, int, int]]:
    m = sh.micro_batches
    fwd = {s.stage: 0 for s in sh.stages}
    bwd = dict(fwd)
    out = []
    for s in sh.stages:
        for _ in range(s.in_flight):
            out.append(("F", s.stage, fwd[s.stage]))
            fwd[s.stage] += 1
    while any(b < m for b in bwd.values()):
        live = [s for s in reversed(list(fwd)) if fwd[s] > bwd[s]]
        if not live:  # a stage with nothing in flight at the staircase starts now
            s = next(s for s in fwd if fwd[s] < m)
            out.append(("F", s, fwd[s]))
            fwd[s] += 1
            continue
        s = live[0]
        out.append(("B", s, bwd[s]))
        bwd[s] += 1
        if fwd[s] < m:
            out.append(("F", s, fwd[s]))
            fwd[s] += 1
    return out


def events(sh: RankShape) -> list[Event]:
    """The rank's explicit timeline."""
    by_stage = {s.stage: s for s in sh.stages}
    on_demand = sh.on_demand
    grads = 0 if on_demand else sh.grads
    acts, comm, started = sh.fixed_acts, sh.comm, set()
    out: list[Event] = []
    last = max(by_stage)  # the rank's last-stage flag lives on the stage itself
    head, unit = sh.loss_release_comm, sh.layer_release
    comm -= head + unit * sum(len(st.layers) for st in sh.stages)  # units gathered as they run
    for kind, s, k in action_order(sh):
        st = by_stage[s]
        if kind == "F":
            acts += st.first_acts
            for i, a, _ in st.layers:
                comm += unit
                if sh.t_fwd_layer:  # the layer's forward working set, before its output exists
                    out.append(Event("forward", s, k, i, grads, acts, comm, sh.t_fwd_layer))
                acts += a
                out.append(Event("forward", s, k, i, grads, acts, comm, 0))
            if st.last_acts or st.loss_grads or (st.stage == last and sh.t_fwd_last):
                acts += st.last_acts
                out.append(Event("loss-forward", s, k, -1, grads, acts, comm + head, sh.t_fwd_last))
            elif sh.t_fwd and st.layers:
                out[-1] = out[-1]._replace(transient=sh.t_fwd)
            continue
        if sh.step_in_backward:
            acts = stepped_backward(out, sh, st, k, acts, comm, head, last, Event)
            continue
        first_time = on_demand and s not in started
        if first_time and not started:
            grads += sh.other_grads
        started.add(s)
        if st.last_acts or st.loss_grads or (st.stage == last and sh.t_fwd_last):
            out.append(Event("loss-backward", s, k, -1, grads, acts, comm + head, sh.t_loss))
        grads += st.loss_grads if first_time else 0  # the head's gradient follows the loss's
        acts -= st.last_acts
        if sh.head_rs_delta and st.loss_grads:  # the head unit's reduce-scatter
            out.append(Event("backward", s, k, -1, grads, acts, comm + sh.head_rs_delta, 0))
        comm += sh.tied_head_grad  # held to the embedding's backward (titan_lifetimes)
        for i, a, g in reversed(st.layers):
            grads += g if first_time else 0
            out.append(Event("backward", s, k, i, grads, acts, comm, sh.t_layer))
            acts, comm = acts - a, comm - unit
        acts -= st.first_acts
        ends, grads, comm = stage_end(sh, st, first_time, grads, comm)
        out += [Event("backward", s, k, -1, g, acts, c, 0) for g, c in ends]
        if not out or out[-1].phase not in ("backward", "loss-backward") or out[-1].stage != s:
            out.append(Event("backward", s, k, -1, grads, acts, comm, 0))
        if k == sh.micro_batches - 1 and (st.release_grads or st.release_comm):
            grads, comm = grads - st.release_grads, comm - st.release_comm
            out.append(Event("backward", s, k, -1, grads, acts, comm, 0))
    if sh.step_in_backward:  # optimizers.step() and zero_grad() are no-ops: nothing is left
        out.append(Event("optimizer-step", -1, -1, -1, 0, 0, 0, 0))
        out.append(Event("zero-grad", -1, -1, -1, 0, 0, 0, 0))
        return out
    out.append(Event("optimizer-step", -1, -1, -1, sh.grads, 0, 0, sh.step))
    out.append(Event("zero-grad", -1, -1, -1, 0 if on_demand else sh.grads, 0, 0, 0))
    return out


def closed_peak(static_bytes: int, fwd_bwd: int, tr, step: int, flights) -> PeakEvent:
    """Persistent gradients: static + max(staircase + buffers + largest transient, step).
    `static_bytes` includes the gradients; `flights` names the first backward's stage. The
    recompute working set meets the staircase less the last stage's tensors (freed by the loss
    backward): tr.layer is passed net of them (timeline_shape.transient_classes)."""
    top = fwd_bwd + tr.largest
    if top < step:
        return PeakEvent("optimizer-step", -1, -1, -1, -1, static_bytes + step)
    stage = max((s for s, n in flights if n), default=-1)
    n = dict(flights).get(stage, 0)
    if tr.largest == 0 or tr.largest == tr.layer - tr.last_acts:
        return PeakEvent("backward", stage, -1, 0, -1, static_bytes + top)
    if tr.largest == tr.loss:
        return PeakEvent("loss-backward", stage, -1, 0, -1, static_bytes + top)
    return PeakEvent("loss-forward" if tr.largest == tr.fwd_last else "forward", stage, -1,
                     n - 1, -1, static_bytes + top)


def walked_peak(sh: RankShape) -> PeakEvent:
    """max over `events(sh)` without building them: within an action the events are monotone
    (a forward grows, a backward that allocates nothing shrinks) except in each stage's first
    backward under on-demand gradients, which is walked layer by layer. Same maximum, same
    event (the first one reaching it), in O(actions)."""
    if sh.step_in_backward:  # one stage, one micro-batch: the events are O(layers)
        evs = events(sh)
        i = max(range(len(evs)), key=lambda j: (evs[j].live(0), -j))
        e = evs[i]
        return PeakEvent(e.phase, e.stage, e.layer, e.micro_batch, -1, e.live(sh.static_bytes))
    by_stage = {s.stage: s for s in sh.stages}
    last = max(by_stage)
    grads = 0 if sh.on_demand else sh.grads
    acts, comm, started = sh.fixed_acts, sh.comm, set()
    best, at = None, None

    def see(level, where):
        nonlocal best, at
        if best is None or level > best:
            best, at = level, where

    head, unit = sh.loss_release_comm, sh.layer_release
    comm -= head + unit * sum(len(st.layers) for st in sh.stages)
    for kind, s, k in action_order(sh):
        st = by_stage[s]
        loss = bool(st.last_acts or st.loss_grads or (st.stage == last and sh.t_fwd_last))
        if kind == "F":
            acts += st.first_acts + sum(a for _, a, _ in st.layers)
            comm += unit * len(st.layers)
            if loss:
                acts += st.last_acts
                see(grads + acts + comm + head + sh.t_fwd_last, ("loss-forward", s, k, -1))
            elif st.layers:
                see(grads + acts + comm + sh.t_fwd, ("forward", s, k, st.layers[-1][0]))
            continue
        first_time = sh.on_demand and s not in started
        if first_time and not started:
            grads += sh.other_grads
        started.add(s)
        if loss:
            see(grads + acts + comm + head + sh.t_loss, ("loss-backward", s, k, -1))
        grads += st.loss_grads if first_time else 0
        acts -= st.last_acts
        if sh.head_rs_delta and st.loss_grads:
            see(grads + acts + comm + sh.head_rs_delta, ("backward", s, k, -1))
        comm += sh.tied_head_grad
        if first_time:
            for i, a, g in reversed(st.layers):
                grads += g
                see(grads + acts + comm + sh.t_layer, ("backward", s, k, i))
                acts, comm = acts - a, comm - unit
        else:
            if st.layers:
                see(grads + acts + comm + sh.t_layer, ("backward", s, k, st.layers[-1][0]))
            acts -= sum(a for _, a, _ in st.layers)
            comm -= unit * len(st.layers)
        acts -= st.first_acts
        ends, grads, comm = stage_end(sh, st, first_time, grads, comm)
        for g, c in ends:
            see(g + acts + c, ("backward", s, k, -1))
        if not st.layers and not loss:
            see(grads + acts + comm, ("backward", s, k, -1))
        if k == sh.micro_batches - 1:  # FSDP2 under PP: the stage's last backward (fsdp2)
            grads, comm = grads - st.release_grads, comm - st.release_comm
    see(sh.grads + sh.step, ("optimizer-step", -1, -1, -1))
    phase, s, k, i = at
    return PeakEvent(phase, s, i, k, -1, sh.static_bytes + best)


def describe(pe: PeakEvent) -> str:
    """"backward of layer 7, stage 0, micro-batch 0" — where a peak happens, in words."""
    what = {"forward": "forward", "backward": "backward", "loss-forward": "loss forward",
            "loss-backward": "loss backward", "optimizer-step": "optimizer step",
            "zero-grad": "zero_grad"}[pe.phase]
    parts = [what + (f" of layer {pe.layer}" if pe.layer >= 0 else "")]
    parts += [f"stage {pe.stage}"] if pe.stage >= 0 else []
    parts += [f"micro-batch {pe.micro_batch}"] if pe.micro_batch >= 0 else []
    return ", ".join(parts)


def compact(evs: list[Event], static_bytes: int) -> dict:
    """JSON form: column names once, one row of integers per event (phase as a code)."""
    phases = ["forward", "loss-forward", "loss-backward", "backward", "optimizer-step", "zero-grad"]
    return {"static_bytes": static_bytes, "phases": phases,
            "columns": ["phase", "stage", "micro_batch", "layer", "gradients", "activations",
                        "communication", "transient"],
            "events": [[phases.index(e.phase), *e[1:]] for e in evs]}


def lifetime_item(shape, pe, added: int) -> Item:
    """On-demand gradients: the rows hold every byte of the step, the peak event fewer (or a
    transient more); this runtime item is the difference, so the rows still sum to peak_total."""
    return Item("runtime", f"lifetimes at the peak ({describe(pe)})", added,
                "timeline: transient at the peak minus the gradients not yet allocated and the "
                "activations/buffers already freed there", "memledger.ledger.timeline (on-demand grads)")


class Timeline:
    """A rank's step timeline, built on first use (RankLedger.timeline / timeline_json): the
    persistent-gradient peak is a closed form and needs none of it."""

    def __init__(self, shape):
        self._shape = shape  # RankShape or timeline_shape.LazyShape

    def get(self) -> RankShape:
        s = self._shape
        return s.get() if hasattr(s, "get") else s

    def events(self) -> list[Event]:
        return events(self.get())

    def json(self) -> dict:
        return compact(self.events(), self.get().static_bytes)
