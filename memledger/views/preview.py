"""Drag to preview: the compact data the preview component (memledger/views/dragbar.js) draws
while one parallelism setting is dragged, every value along that axis with the others held.

For the axis, every candidate value (`options.CANDIDATES`, plus short lists for micro-batch and
sequence) is asked of the core (`options.problem`); a valid one gets its ledger from
`compute.ledger_for` (cached per configuration) and is reduced to what the chart shows: the
exact bytes of each ledger row for the ranks drawn (the most loaded rank for the Ledger page,
every pipeline rank for the staircase), the GPU's capacity, the title, the one-line
configuration and the verdict with the headline numbers, worded as the page's own chart and
metrics word them. An invalid value carries the core's reason and no number. The work is
bounded: `budget.admit_ledgers` counts the ledgers (at most the axis's valid values) times
their pipeline ranks.

Ignores: every setting but the dragged one (the sidebar holds them), and drawing (the
component turns bytes into GiB only for bar lengths and labels). Pure: no Streamlit, no Plotly.
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.ledger import Ledger
from memledger.ledger.items import ROW_LABELS, ROWS
from memledger.specs import ModelSpec
from memledger.specs.hardware import Hardware
from memledger.views.peaks import peak_label
from memledger.views import safe_text
from memledger.views.budget import admit_ledgers
from memledger.views.compute import ledger_for
from memledger.views.figures import describe, fit
from memledger.views.options import CANDIDATES, problem, with_value
from memledger.views.palette import CAPACITY_COLOR, ROW_COLORS, ROW_SHORT
from memledger.views.state import Config, hardware

AXES = {"tp": "TP", "pp": "PP", "vpp": "VPP", "ep": "EP", "cp": "CP",
        "dp_replicate": "HSDP replicas", "zero": "ZeRO", "mb": "micro-batch", "seq": "sequence"}
KINDS = ("ledger", "staircase")


def candidates(m: ModelSpec, cfg: Config, axis: str) -> tuple:
    """The values the preview offers along `axis`, in order, valid or not."""
    if axis == "mb":
        out = {cfg.mb} | {2**k for k in range(7)}
    elif axis == "seq":
        out = {cfg.seq} | {2**k for k in range(9, 18)}
    else:
        out = set(CANDIDATES[axis](m, cfg))
    return tuple(sorted(out))


@dataclass(frozen=True)
class Step:
    """One value along the axis: its configuration and ledger, or the core's reason."""

    value: int
    cfg: Config
    ledger: Ledger | None
    reason: str | None


def steps(m: ModelSpec, cfg: Config, axis: str) -> list[Step]:
    """Every candidate value of `axis` with `cfg`'s other settings, each valid one's ledger."""
    if axis not in AXES:
        raise ValueError(f"axis {axis!r}: one of {', '.join(AXES)}")
    alts = [(v, with_value(cfg, axis, v)) for v in candidates(m, cfg, axis)]
    errs = {v: problem(m, alt) for v, alt in alts}
    valid = [alt for v, alt in alts if errs[v] is None]
    admit_ledgers(len(valid), max((a.pp for a in valid), default=1), f"the {AXES[axis]} preview")
    return [Step(v, alt, ledger_for(m, alt) if errs[v] is None else None,
                 None if errs[v] is None else str(errs[v])) for v, alt in alts]


def headline(led: Ledger, hw: Hardware) -> str:
    """The verdict and the headline numbers, as the Ledger page's metrics state them."""
    v = fit(led, hw)
    return (f"{v.sentence(hw.name)} · busiest GPU pp rank {v.rank} of {led.parallel.pp}: "
            f"{peak_label('total', v.peak_bytes)}")


def title(led: Ledger, hw: Hardware, kind: str) -> str:
    """The page chart's title for this ledger (plain text: the component sets textContent)."""
    name = safe_text.plain(led.model.name)
    if kind == "staircase":
        return f"{name}: memory per pipeline rank, {led.parallel.schedule} schedule"
    total, word = led.peak.peak_total_bytes, "fits" if fit(led, hw).fits else "does not fit"
    return (f"{name} on {hw.name}: the most loaded GPU (pp rank {led.peak.pp_rank}) needs "
            f"{peak_label('total', total)}: {word}")


def _value(s: Step, hw: Hardware, kind: str) -> dict:
    if s.ledger is None:
        return {"v": s.value, "ok": False, "reason": s.reason}
    led = s.ledger
    ranks = led.ranks if kind == "staircase" else (led.peak,)
    return {"v": s.value, "ok": True, "fits": fit(led, hw).fits, "peak": led.peak.pp_rank,
            "title": title(led, hw, kind), "sub": describe(led), "head": headline(led, hw),
            "ranks": [[r.pp_rank, r.peak_total_bytes, [r.rows[row] for row in ROWS]]
                      for r in ranks]}


def preview_data(m: ModelSpec, cfg: Config, axis: str, kind: str) -> dict:
    """What the component needs to draw `kind`'s chart for every value of `axis` (JSON-ready:
    ints, strings, booleans; bytes exact)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    hw = hardware(cfg)
    all_steps = steps(m, cfg, axis)
    return {"axis": axis, "label": AXES[axis], "kind": kind,
            "current": [s.value for s in all_steps].index(getattr(cfg, axis)),
            "gpu": hw.name, "capacity": hw.hbm_bytes, "cap_color": CAPACITY_COLOR,
            "rows": [{"key": r, "short": ROW_SHORT[r], "label": ROW_LABELS[r],
                      "color": ROW_COLORS[r]} for r in ROWS],
            "values": [_value(s, hw, kind) for s in all_steps]}


def committable(m: ModelSpec, cfg: Config, axis: str, value) -> int | None:
    """`value` as the setting to commit when it is one of the axis's candidates and the core
    accepts it with `cfg`'s other settings; None otherwise (a value from the browser is
    untrusted input)."""
    if axis not in AXES or isinstance(value, bool) or not isinstance(value, int):
        return None
    if value not in candidates(m, cfg, axis) or problem(m, with_value(cfg, axis, value)):
        return None
    return value
