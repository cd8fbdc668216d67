"""What would fit, for a configuration that does not: one-setting changes that bring the most
loaded GPU under its capacity, and a lower bound on the GPUs the model needs.

Each candidate changes one sidebar setting (in this order of preference: ZeRO stage, HSDP's
replicas folded into one shard group, expert, pipeline and tensor parallelism, recompute, a
smaller micro-batch with more of them per step, the static rows offloaded to the CPU, more
GPUs), is repaired to a valid configuration
by the same rules as the sidebar and rebuilt through the ledger; the ones that fit are offered,
cheapest first. Pure (no Streamlit).
Ignores: changes of two settings at once (the Planner page searches those).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from memledger.costs.capacity import gpus_for_states
from memledger.errors import SpecError
from memledger.presets import gpu
from memledger.presets.layouts import LAYOUT_KEYS, start_layout
from memledger.specs import ModelSpec, TrainSpec
from memledger.specs.parallel import replicas_kept
from memledger.specs.runtime import RuntimeSpec
from memledger.views.compute import ledger_for
from memledger.views.options import problem
from memledger.views.state import Config, hardware, start_of

MAX_FIXES = 3
MAX_WORLD = 1 << 17


@dataclass(frozen=True)
class Fix:
    label: str  # what changes, in words: "ZeRO-1 → ZeRO-3"
    changes: dict  # sidebar setting -> new value
    peak_bytes: int  # the most loaded GPU after the change


def _halving_dp(cfg: Config, **changes) -> dict:
    """A degree doubled at the same world size halves dp, which keeps what HSDP copies it can."""
    return {**changes, "dp_replicate": replicas_kept(cfg.dp // 2, cfg.dp_replicate)}


def _candidates(m: ModelSpec, cfg: Config) -> list[tuple[str, dict]]:
    out = [(f"ZeRO-{cfg.zero} → ZeRO-{z}", {"zero": z}) for z in range(cfg.zero + 1, 4)]
    if cfg.dp_replicate > 1 and cfg.zero:
        out.append((f"HSDP replicas {cfg.dp_replicate} → 1 (shard over all dp)",
                    {"dp_replicate": 1}))
    if m.moe is not None:
        out.append((f"EP {cfg.ep} → {cfg.ep * 2}", {"ep": cfg.ep * 2}))
    out.append((f"PP {cfg.pp} → {cfg.pp * 2}", _halving_dp(cfg, pp=cfg.pp * 2)))
    if cfg.tp < 8:
        out.append((f"TP {cfg.tp} → {cfg.tp * 2}", _halving_dp(cfg, tp=cfg.tp * 2)))
    for rc in ("selective", "full"):
        if rc != cfg.recompute and not (rc == "selective" and cfg.recompute == "full"):
            out.append((f"recompute {cfg.recompute} → {rc}", {"recompute": rc}))
    if cfg.mb > 1:
        half = cfg.mb // 2
        out.append((f"micro-batch {cfg.mb} → {half} (× {cfg.m * 2} per step: same tokens)",
                    {"mb": half, "m": cfg.m * 2}))
    if cfg.offload == "none":  # host memory and PCIe time instead of GPUs
        out.append(("optimizer offload to the CPU (ZeRO-Offload)", {"offload": "optimizer"}))
    if cfg.zero == 3 and cfg.offload != "params":
        out.append(("parameters, gradients and optimizer to the CPU (FSDP CPU offload)",
                    {"offload": "params"}))
    out.append((f"world {cfg.world:,} → {cfg.world * 2:,} GPUs", {"world": cfg.world * 2}))
    return out


def _peak(m: ModelSpec, cfg: Config) -> int | None:
    if problem(m, cfg) is not None:
        return None
    try:
        return ledger_for(m, cfg).peak.peak_total_bytes
    except SpecError:
        return None


def _tried(m: ModelSpec, cfg: Config) -> list[tuple[int, str, dict]]:
    """(peak, label, changes) of every valid one-setting change."""
    out = []
    for label, changes in _candidates(m, cfg):
        peak = _peak(m, replace(cfg, **changes))
        if peak is not None:
            out.append((peak, label, changes))
    return out


@lru_cache(maxsize=64)  # small results; a rerun of the same configuration costs nothing
def fixes(m: ModelSpec, cfg: Config, limit: int = MAX_FIXES) -> tuple[Fix, ...]:
    """Up to `limit` changes after which the configuration fits its GPU: the preset's start
    layout when it differs and fits, one-setting changes in order of preference, and when none
    of those fits, the chain of one-setting changes that each cut the peak the most."""
    cap = hardware(cfg).hbm_bytes
    out = [f for f in (_start_fix(m, cfg, cap),) if f is not None]
    tried = _tried(m, cfg)
    out += [Fix(label, changes, peak) for peak, label, changes in tried if peak <= cap]
    if len(out) < limit:
        chained = _chain(m, cfg, cap, tried)  # its first step may be a fix already offered
        out += [chained] if chained is not None and all(
            f.changes != chained.changes for f in out) else []
    return tuple(out[:limit])


def _start_fix(m: ModelSpec, cfg: Config, cap: int) -> Fix | None:
    new, _ = start_of(cfg.model, cfg)
    start = start_layout(cfg.model)
    changes = {k: getattr(new, k) for k in LAYOUT_KEYS if getattr(new, k) != getattr(cfg, k)}
    peak = _peak(m, new) if start is not None and changes else None
    if peak is None or peak > cap:
        return None
    kind = "published layout" if start.published else "start layout"
    what = ", ".join(f"{k} {v}" for k, v in changes.items())
    return Fix(f"{m.name}'s {kind} ({what})", changes, peak)


def _chain(m: ModelSpec, cfg: Config, cap: int, tried, steps: int = 5) -> Fix | None:
    """Greedy: take the one-setting change with the lowest peak, repeat until it fits."""
    labels, changes = [], {}
    for _ in range(steps):
        if not tried:
            return None
        peak, label, step = min(tried, key=lambda x: x[0])
        labels.append(label)
        changes |= step
        cfg = replace(cfg, **step)
        if peak <= cap:
            return Fix(", then ".join(labels), changes, peak)
        tried = _tried(m, cfg)
    return None


def gpus_needed(m: ModelSpec, cfg: Config) -> int:
    return _gpus_needed(m, cfg.seq, cfg.precision, cfg.optimizer, cfg.profile, cfg.gpu)


@lru_cache(maxsize=64)
def _gpus_needed(m: ModelSpec, seq: int, precision: str, optimizer: str, profile: str,
                 gpu_name: str) -> int:
    """memledger.costs.capacity's lower bound for this GPU (capped at MAX_WORLD)."""
    train = TrainSpec(seq=seq, precision=precision, optimizer=optimizer, profile=profile)
    return min(MAX_WORLD, gpus_for_states(m, train, RuntimeSpec(), gpu(gpu_name).hbm_bytes))
