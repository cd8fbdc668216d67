"""The advisor's plan: cheapest changes first, each kept only if it lowers the most loaded rank's
peak, until that rank fits the target.

Order (what each costs): static all-to-all shapes (capacity-factor padding, possible token drops)
→ ZeRO-1, ZeRO-2 (no extra traffic over DP all-reduce) → per activation class, largest first, its
cheapest currency (recompute for cheap element-wise producers, FP8 for linear inputs, CPU offload
for the rest when PCIe hides it, else FP8) → levelling the staircase (inter-rank bandwidth) →
ZeRO-3 (a parameter all-gather per layer) → ZeRO-Offload (PCIe traffic and CPU step time).
"""
from __future__ import annotations

from dataclasses import replace

from memledger.advisor.moves import Candidate, Plan, all_remote, cheapest_currency, evaluate
from memledger.costs.bandwidth import cpu_offload_verdicts
from memledger.specs.policy import CLASSES


def _accept(cur: Candidate, new: Candidate) -> bool:
    return new.ledger is not None and new.peak_bytes < cur.peak_bytes


def _class_steps(cur: Candidate, target: int, mfu: int, steps: list[str]) -> Candidate:
    led = cur.ledger
    sizes: dict[str, int] = {}
    for mv in led.peak.moves:
        if mv.cls in CLASSES and mv.gpu_total:
            sizes[mv.cls] = sizes.get(mv.cls, 0) + mv.gpu_total
    floor = led.peak.rows["activations"] // 100  # classes under 1% of the row are not worth a step
    for cls in sorted(sizes, key=lambda c: -sizes[c]):
        if cur.fits(target) or sizes[cls] < floor:
            break
        if cls in cur.train.policy.as_dict():
            continue  # the user (or an earlier step) already chose this class's policy
        cur_led = cur.ledger
        choice = cheapest_currency(cls, cur_led.hardware is not None)
        t = cur.train
        new = evaluate(f"{cls}={choice}", cur_led, train=replace(t, policy=t.policy.with_rules({cls: choice})))
        if choice == "offload-cpu" and new.ledger is not None:
            r = cur_led.most_loaded_rank
            hidden = all(v.hidden for v in cpu_offload_verdicts(new.ledger, cur_led.hardware, mfu)
                         if v.pp_rank == r)
            if not hidden:
                new = evaluate(f"{cls}=fp8", cur_led, train=replace(t, policy=t.policy.with_rules({cls: "fp8"})))
        if _accept(cur, new):
            steps.append(f"activations: {new.label}")
            cur = new
    return cur


def make_plan(led, target: int, mfu: int):
    cur = Candidate("current", led.parallel, led.train, led.runtime, led)

    def done():
        return Plan(steps=tuple(steps) or ("already fits: no change",), parallel=cur.parallel,
                    train=cur.train, runtime=cur.runtime, peak_bytes=cur.peak_bytes,
                    fits=cur.fits(target))

    steps: list[str] = []
    if cur.fits(target):
        return done()

    def attempt(label, **kw):
        nonlocal cur
        new = evaluate(label, cur.ledger, **kw)
        if _accept(cur, new):
            steps.append(label)
            cur = new
        return cur.fits(target)

    rt, p = cur.runtime, cur.parallel
    if led.model.moe is not None and rt.a2a == "worst-case" and attempt(
            "buffers: static all-to-all shapes (capacity factor)", runtime=replace(rt, a2a="capacity")):
        return done()
    for z in (1, 2):
        if cur.parallel.zero < z and attempt(f"static: ZeRO-{z}", parallel=replace(cur.parallel, zero=z)):
            return done()
    cur = _class_steps(cur, target, mfu, steps)
    if cur.fits(target):
        return done()
    if p.pp > 1 and attempt("staircase: level activations onto later ranks (offload-pp)",
                            train=replace(cur.train, policy=all_remote(cur.train.policy))):
        return done()
    if cur.parallel.zero < 3 and attempt("static: ZeRO-3", parallel=replace(cur.parallel, zero=3)):
        return done()
    attempt("static: optimizer states and step on the CPU (ZeRO-Offload)",
            runtime=replace(cur.runtime, optimizer_offload=True))
    return done()
