"""The advisor's candidate moves: static-row changes (ZeRO stage, offload, the optimizer step
inside the backward, parallel degrees) and
the currencies an activation class can be paid in, each evaluated by re-running the ledger.

Every candidate is a (label, model, parallel, train, runtime) tuple; `evaluate` builds its ledger
or records why it is invalid (the SpecError message). Parallel changes keep the world size:
doubling tp, pp or ep halves dp (ep re-folds within tp·cp·dp).
"""
from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from dataclasses import replace

from memledger.errors import SpecError
from memledger.ledger import Ledger, build_ledger
from memledger.ledger.pipeline.schedules import balanced_layout
from memledger.specs.parallel import replicas_kept
from memledger.specs.policy import CLASSES, QUANT_FORMATS, TensorPolicy

CURRENCIES = ("recompute",) + tuple(QUANT_FORMATS) + ("offload-cpu", "offload-pp")
# Seed 1: recompute suits cheap element-wise producers that take a lot of memory.
CHEAP_RECOMPUTE = ("norm_out", "mlp_act", "expert_act", "attn_core", "mla_up")
# DeepSeek-V3 §3.3.3 / Kimi K2 §2.4.3: linear inputs tolerate FP8 with 1×128 scales.
FP8_TOLERANT = ("mlp_fc1", "expert_fc1", "expert_in", "attn_out", "mla_down", "expert_out")


@dataclass(frozen=True)
class Candidate:
    label: str
    parallel: object
    train: object
    runtime: object
    ledger: Ledger | None
    error: str = ""

    @property
    def peak_bytes(self) -> int:
        return self.ledger.peak.peak_total_bytes if self.ledger else -1

    def fits(self, target: int) -> bool:
        return self.ledger is not None and self.peak_bytes <= target


def evaluate(label: str, led: Ledger, *, parallel=None, train=None, runtime=None) -> Candidate:
    p, t, rt = parallel or led.parallel, train or led.train, runtime or led.runtime
    try:
        new = build_ledger(led.model, p, t, rt, led.hardware)
    except SpecError as e:
        return Candidate(label, p, t, rt, None, str(e))
    return Candidate(label, p, t, rt, new)


def _halve_dp(p, **kw):
    if p.dp % 2:
        raise SpecError("dp", f"dp={p.dp} is odd: cannot double a degree at a fixed world size")
    fields = {**{f.name: getattr(p, f.name) for f in dataclass_fields(p)}, **kw, "dp": p.dp // 2}
    fields["dp_replicate"] = replicas_kept(fields["dp"], p.dp_replicate)
    if fields.get("tp", 1) > 1:
        fields["sp"] = True
    return fields


def static_candidates(led: Ledger) -> list[Candidate]:
    """ZeRO stages above the current one, HSDP's replicas folded into one shard group (the states
    over all of dp·cp), ZeRO-Offload, ZeRO-3 parameter offload, then tp / pp / ep doubled
    (world kept)."""
    p, rt, m = led.parallel, led.runtime, led.model
    out = [evaluate(f"ZeRO-{z}", led, parallel=replace(p, zero=z)) for z in range(p.zero + 1, 4)]
    if p.dp_replicate > 1 and p.zero:
        out.append(evaluate(f"shard over all dp (HSDP replicas {p.dp_replicate} → 1)", led,
                            parallel=replace(p, dp_replicate=1)))
    if not rt.optimizer_offload:
        out.append(evaluate("optimizer offload to CPU (ZeRO-Offload)", led,
                            runtime=replace(rt, optimizer_offload=True)))
    if led.loop.on_demand and not rt.optimizer_in_backward:  # ledger.step_in_backward
        out.append(evaluate("optimizer step in backward", led,
                            runtime=replace(rt, optimizer_in_backward=True)))
    if p.zero == 3 and not rt.param_offload:  # FSDP moves all three; DeepSpeed the parameters
        fsdp = rt.zero3_impl == "fsdp"
        out.append(evaluate("parameter offload to CPU (FSDP CPU offload)" if fsdp else
                            "parameter offload to CPU (DeepSpeed offload_param)", led,
                            runtime=replace(rt, param_offload=True,
                                            optimizer_offload=rt.optimizer_offload or fsdp)))
    changes = [("tp", p.tp * 2), ("pp", p.pp * 2)] + ([("ep", p.ep * 2)] if m.moe else [])
    for name, value in changes:
        dp = f" (dp {p.dp} → {p.dp // 2})" if p.dp % 2 == 0 else ""
        label = f"{name} {getattr(p, name)} → {value}{dp}"
        try:
            if name == "ep":
                new = replace(p, ep=value)
            else:
                fields = _halve_dp(p, **{name: value})
                if p.layout is not None or name == "pp":
                    n = value * p.chunks if name == "pp" else p.n_stages
                    fields["layout"] = (balanced_layout(m.n_layers, n)
                                        if p.layout is not None or m.n_layers % n else None)
                new = type(p)(**fields)
        except SpecError as e:
            out.append(Candidate(label, p, led.train, rt, None, str(e)))
            continue
        out.append(evaluate(label, led, parallel=new))
    return out


def currency_candidates(led: Ledger, cls: str) -> list[Candidate]:
    """The class under each currency (on top of the current policy; quantise keeps offload)."""
    t = led.train
    out = []
    for cur in CURRENCIES:
        if cur == "offload-pp" and led.parallel.pp == 1:
            continue
        out.append(evaluate(f"{cls}={cur}", led, train=replace(t, policy=t.policy.with_rules({cls: cur}))))
    return out


def cheapest_currency(cls: str, has_links: bool) -> str:
    """The first currency the plan tries for a class (seed 1's '适合谁' column)."""
    if cls in CHEAP_RECOMPUTE:
        return "recompute"
    if cls in FP8_TOLERANT:
        return "fp8"
    return "offload-cpu" if has_links else "fp8"


@dataclass(frozen=True)
class Plan:
    steps: tuple[str, ...]
    parallel: object
    train: object
    runtime: object
    peak_bytes: int
    fits: bool


def all_remote(policy):
    """Every class movable to later ranks; quantisation rules stay, recompute rules stay."""
    rules = {}
    for c in CLASSES:
        pol = policy.get(c)
        if not pol.recompute:
            rules[c] = str(TensorPolicy(quant=pol.quant, offload="pp"))
    return policy.with_rules(rules)
