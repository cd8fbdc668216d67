"""The advisor: seed 1's four questions ("用这张账本"), each answered with numbers.

  1. static rows — how big, and the smallest ZeRO stage / offload / parallel change that brings
     them under the budget the target leaves after activations, buffers and runtime;
  2. activations — the largest layer and tensor, and that tensor's class paid in every currency
     (bytes saved at the peak; FLOPs and seconds, bits, or bandwidth and exposed seconds);
  3. the staircase — per-rank activations, its steepness, and what levelling (remote offload of
     every class to later ranks) would do, with bytes per step and the link it needs;
  4. buffers — whether the MoE all-to-all is sized for the worst case and what static shapes save;
  5. fine-tuning — freezing parts or training adapters: bytes saved for the trainable fraction.
Finally a plan: cheapest-first changes (static buffer shapes, ZeRO-1/2, per-class currencies in
order of bytes, levelling, ZeRO-3, ZeRO-Offload), applied one by one until the most loaded rank
fits. Every candidate is checked by re-running the ledger. Targets are peak_total bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from memledger.advisor.moves import (Candidate, Plan, all_remote, currency_candidates, evaluate,
                                     static_candidates)
from memledger.advisor.finetune import FinetuneAnswer, finetune_answer
from memledger.advisor.plan import make_plan
from memledger.costs.bandwidth import (MicroBatchAlternative, OffloadVerdict, cpu_offload_verdicts,
                                       remote_offload_verdicts, smaller_micro_batch)
from memledger.costs.compute import DEFAULT_MFU_PCT, seconds
from memledger.ledger import Ledger
from memledger.ledger import communication as comm
from memledger.ledger.pipeline.levelling import Transfer
from memledger.specs.policy import CLASSES, TensorPolicy


@dataclass(frozen=True)
class Option:
    label: str
    static_bytes: int  # on the most loaded rank after the change (-1 if invalid)
    peak_bytes: int
    fits: bool
    error: str = ""


@dataclass(frozen=True)
class StaticAnswer:
    static_bytes: int
    rows: dict
    budget_bytes: int  # target − (activations + buffers + runtime) of the most loaded rank
    under_budget: bool
    options: tuple[Option, ...]
    smallest: str  # label of the first option whose static rows fit the budget, "" if none


@dataclass(frozen=True)
class Currency:
    policy: str
    saved_bytes: int  # peak_total saved on the most loaded rank
    peak_bytes: int
    fits: bool
    recompute_flops_per_step: int = 0
    recompute_s_per_step: float = 0.0
    bits_lost: int = 0
    offload_bytes_per_step: int = 0
    link: str = ""
    required_bytes_per_s: float = 0.0
    link_bytes_per_s: int = 0
    exposed_s_per_step: float = 0.0


@dataclass(frozen=True)
class ActivationAnswer:
    activation_bytes: int
    largest_layer: str  # "moe layers"
    largest_layer_bytes: int  # one layer, one micro-batch, as kept
    largest_tensor: str
    largest_tensor_class: str
    largest_tensor_bytes: int  # at the peak on the rank: every copy (layers × micro-batches)
    by_class: tuple[tuple[str, int], ...]  # GPU bytes at the peak, largest first
    currencies: tuple[Currency, ...]
    smaller_micro_batch: MicroBatchAlternative | None  # fits without offload; None if none does
    largest_tensor_copies: int = 1  # copies held at the peak; bytes / copies = one tensor


@dataclass(frozen=True)
class StaircaseAnswer:
    activation_bytes: tuple[int, ...]
    peak_bytes: tuple[int, ...]
    steepness: float  # first rank's activations ÷ last rank's
    spread_bytes: int  # max − min activations
    levelled_peak_bytes: tuple[int, ...]
    levelled_activation_bytes: tuple[int, ...]  # activations held per rank after levelling
    transfers: tuple[Transfer, ...]
    bytes_per_step: int
    verdicts: tuple[OffloadVerdict, ...]
    fits_before: bool
    fits_after: bool


@dataclass(frozen=True)
class BufferAnswer:
    communication_bytes: int
    a2a_mode: str
    a2a_bytes: dict  # mode -> bytes of dispatch + combine (empty without EP)
    worst_case_sized: bool
    static_saving_bytes: int  # worst-case − capacity-sized (static shapes)
    items: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Advice:
    target_bytes: int
    peak_bytes: int
    most_loaded_rank: int
    fits: bool
    static: StaticAnswer
    activations: ActivationAnswer
    staircase: StaircaseAnswer
    buffers: BufferAnswer
    plan: Plan
    notes: tuple[str, ...] = field(default=())
    finetune: FinetuneAnswer | None = None  # 5. freezing and adapters (advisor/finetune.py)


def _static(led: Ledger, target: int) -> StaticAnswer:
    r = led.peak
    budget = target - (r.peak_total_bytes - r.static_bytes)
    opts = []
    for c in static_candidates(led):
        s = c.ledger.peak.static_bytes if c.ledger else -1
        opts.append(Option(c.label, s, c.peak_bytes, c.fits(target), c.error))
    smallest = next((o.label for o in opts if 0 <= o.static_bytes <= budget), "")
    return StaticAnswer(static_bytes=r.static_bytes,
                        rows={k: r.rows[k] for k in ("weights", "gradients", "optimizer")},
                        budget_bytes=budget, under_budget=r.static_bytes <= budget,
                        options=tuple(opts), smallest=smallest)


def _currency(led: Ledger, c: Candidate, cls: str, target: int, mfu: int) -> Currency:
    r = led.most_loaded_rank
    if c.ledger is None:
        return Currency(policy=c.label.split("=", 1)[1], saved_bytes=0, peak_bytes=-1, fits=False)
    new, hw = c.ledger, led.hardware
    pol = TensorPolicy.parse(c.label.split("=", 1)[1])
    moves = [mv for mv in new.ranks[r].moves if mv.cls == cls]
    base = dict(policy=str(pol), saved_bytes=led.peak.peak_total_bytes - new.ranks[r].peak_total_bytes,
                peak_bytes=new.peak.peak_total_bytes, fits=c.fits(target),
                bits_lost=max((mv.bits_lost for mv in moves), default=0))
    if pol.recompute:
        flops = sum(mv.recompute_flops_per_micro_batch for mv in moves) * led.train.micro_batches
        return Currency(**base, recompute_flops_per_step=flops,
                        recompute_s_per_step=seconds(flops, hw, mfu) if hw else 0.0)
    verdicts = []
    if hw and pol.offload == "cpu":
        verdicts = [v for v in cpu_offload_verdicts(new, hw, mfu) if v.pp_rank == r]
    elif hw and pol.offload == "pp":
        verdicts = remote_offload_verdicts(new, hw, mfu)
    if not verdicts:
        return Currency(**base)
    v = max(verdicts, key=lambda v: v.exposed_s_per_step)
    return Currency(**base, offload_bytes_per_step=v.bytes_per_step, link=v.link,
                    required_bytes_per_s=v.required_out_bytes_per_s,
                    link_bytes_per_s=v.link_bytes_per_s, exposed_s_per_step=v.exposed_s_per_step)


def _activations(led: Ledger, target: int, mfu: int) -> ActivationAnswer:
    r = led.peak
    by_class: dict[str, int] = {}
    per_layer: dict[str, int] = {}
    for mv in r.moves:
        by_class[mv.cls] = by_class.get(mv.cls, 0) + mv.gpu_total
        if mv.section.endswith("layers"):
            per_layer[mv.section] = per_layer.get(mv.section, 0) + mv.gpu_bytes
    kept = [mv for mv in r.moves if mv.cls in CLASSES]
    top = max(kept, key=lambda mv: mv.gpu_total, default=None)
    layer = max(per_layer, key=per_layer.get, default="")
    cur = tuple(_currency(led, c, top.cls, target, mfu) for c in currency_candidates(led, top.cls)) if top else ()
    return ActivationAnswer(
        activation_bytes=r.rows["activations"], largest_layer=layer,
        largest_layer_bytes=per_layer.get(layer, 0), largest_tensor=top.tensor if top else "",
        largest_tensor_class=top.cls if top else "", largest_tensor_bytes=top.gpu_total if top else 0,
        by_class=tuple(sorted(by_class.items(), key=lambda kv: -kv[1])), currencies=cur,
        smaller_micro_batch=smaller_micro_batch(led, target),
        largest_tensor_copies=top.copies if top else 1)


def _staircase(led: Ledger, target: int, mfu: int) -> tuple[StaircaseAnswer, Candidate | None]:
    acts = tuple(r.rows["activations"] for r in led.ranks)
    peaks = tuple(r.peak_total_bytes for r in led.ranks)
    steep = acts[0] / acts[-1] if acts[-1] else float("inf")
    fits = max(peaks) <= target
    if led.parallel.pp == 1:
        return StaircaseAnswer(acts, peaks, 1.0, 0, peaks, acts, (), 0, (), fits, fits), None
    c = evaluate("level the staircase (remote offload to later ranks)", led,
                 train=replace(led.train, policy=all_remote(led.train.policy)))
    if c.ledger is None:
        return StaircaseAnswer(acts, peaks, steep, max(acts) - min(acts), peaks, acts, (), 0, (),
                               fits, fits), None
    new = c.ledger
    transfers = tuple(sorted({x for r in new.ranks for x in r.transfers}, key=lambda x: (x.src, x.dst)))
    verdicts = tuple(remote_offload_verdicts(new, led.hardware, mfu)) if led.hardware else ()
    return StaircaseAnswer(
        activation_bytes=acts, peak_bytes=peaks, steepness=steep, spread_bytes=max(acts) - min(acts),
        levelled_peak_bytes=tuple(r.peak_total_bytes for r in new.ranks),
        levelled_activation_bytes=tuple(r.rows["activations"] for r in new.ranks), transfers=transfers,
        bytes_per_step=sum(v.bytes_per_step for v in verdicts), verdicts=verdicts,
        fits_before=fits, fits_after=c.fits(target)), c


def _buffers(led: Ledger) -> BufferAnswer:
    r, m, p, t, rt = led.peak, led.model, led.parallel, led.train, led.runtime
    table = comm.a2a_table(m, p, t, rt) if m.moe is not None and p.ep > 1 else {}
    saving = table["worst-case"] - table["capacity"] if table else 0
    return BufferAnswer(communication_bytes=r.rows["communication"], a2a_mode=rt.a2a, a2a_bytes=table,
                        worst_case_sized=bool(table) and rt.a2a == "worst-case",
                        static_saving_bytes=saving,
                        items=tuple((i.name, i.bytes) for i in r.row_items("communication")))


def advise(led: Ledger, target_bytes: int | None = None, mfu_pct: int = DEFAULT_MFU_PCT) -> Advice:
    """The four answers and a plan for `led` against target_bytes (default: the GPU's HBM)."""
    from memledger.errors import SpecError
    if target_bytes is None:
        if led.hardware is None:
            raise SpecError("target_gib", "give a GPU (--gpu) or a target (--target-gib)")
        target_bytes = led.hardware.hbm_bytes
    if target_bytes <= 0:
        raise SpecError("target_gib", f"must be > 0, got {target_bytes} bytes")
    stair, _ = _staircase(led, target_bytes, mfu_pct)
    peak = led.peak.peak_total_bytes
    notes = () if led.hardware else ("no GPU given: bandwidth and time prices are omitted",)
    return Advice(target_bytes=target_bytes, peak_bytes=peak, most_loaded_rank=led.most_loaded_rank,
                  fits=peak <= target_bytes, static=_static(led, target_bytes),
                  activations=_activations(led, target_bytes, mfu_pct), staircase=stair,
                  buffers=_buffers(led), plan=make_plan(led, target_bytes, mfu_pct), notes=notes,
                  finetune=finetune_answer(led, target_bytes))
