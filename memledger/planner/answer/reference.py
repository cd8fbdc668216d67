"""Checks the planner against published trainings (`memledger.costs.published`): for each,
does the ledger say the published layout fits, what TFLOP/s per GPU the step-time model
predicts for it (in the paper's own FLOP convention), and where it ranks among every fitting
configuration the planner finds for the same model, GPUs, sequence and global batch.

The published layout's time is the fastest fitting configuration with the published axes fixed
(what a paper leaves open — micro-batch size, schedule, vpp — the planner chooses). Two ranks:
among configurations, 1 + the number of fitting configurations of the open search that are
strictly faster; among layouts — the rows of the Planner's table (`groups`: one per world, tp,
pp, ep, etp, cp, dp, schedule, ZeRO stage and micro-batch size; vpp and recompute are knobs
within a row) — 1 + the number of layouts whose fastest configuration is strictly faster than
the published layout's. The first counts the published layout's own knob settings (another
vpp) as rivals; the second is where a user of the planner finds the published layout. How
far behind the fastest the published layout's predicted step is (`behind_fastest`) puts a rank
in seconds, to be read against the model's error on the same runs.
"In the fastest 10 %" (`in_fastest_tenth`): rank ≤ max(1, ⌊n / 10⌋) — the first always is.
For the paper's layout comparisons (`LayoutFigure`), `figure_seconds` predicts each layout's
step and `figure_agrees` says whether their order is the one the paper measured. `report`
gathers all of it as plain rows (what `memledger reference` prints and the Planner page shows).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from memledger.costs.published import (FLOP_COUNTS, LAYOUT_FIGURES, REFERENCE_RUNS, LayoutFigure,
                                       PublishedRun)
from memledger.planner.answer.search import plan
from memledger.planner.answer.groups import GROUP_AXES
from memledger.planner.answer.groups import layout_rank as layout_rank_of
from memledger.planner.question.spec import Constraints, PlanSpec
from memledger.planner.time.throughput import forward_flops_per_token
from memledger.presets import gpu


@dataclass
class ReferenceCheck:
    run: PublishedRun
    fits: bool
    seconds: float | None  # predicted step time of the published layout
    tflops_per_gpu: float | None  # predicted, in the paper's FLOP convention
    rank: int | None  # 1 = the planner's fastest configuration
    n_fits: int  # fitting configurations of the open search
    best: dict | None  # the planner's fastest configuration
    layout_rank: int | None = None  # 1 = the planner's fastest layout (its table's first row)
    n_layouts: int = 0  # fitting layouts of the open search

    @property
    def error(self) -> float | None:
        """Predicted / published − 1."""
        if self.tflops_per_gpu is None or self.run.tflops_per_gpu is None:
            return None
        return self.tflops_per_gpu / self.run.tflops_per_gpu - 1

    @property
    def behind_fastest(self) -> float | None:
        """The published layout's predicted step / the planner's fastest − 1 (0: it is the
        fastest): how far a rank is in time, to read against the model's own error."""
        if self.seconds is None or not self.best:
            return None
        return self.seconds / self.best["seconds"] - 1

    @property
    def rank_fraction(self) -> float | None:
        return None if self.rank is None else self.rank / max(self.n_fits, 1)

    @property
    def layout_fraction(self) -> float | None:
        return None if self.layout_rank is None else self.layout_rank / max(self.n_layouts, 1)


def in_fastest_tenth(rank: int, n: int) -> bool:
    """Whether rank (1 = fastest) of n is in the fastest 10 %: rank ≤ max(1, ⌊n / 10⌋)."""
    return rank <= max(1, n // 10)


def _spec(run: PublishedRun, **fixed) -> PlanSpec:
    return PlanSpec(model=run.model, hardware=gpu(run.gpu), worlds=(run.world,), seq=run.seq,
                    global_batch=run.global_batch, precision=run.precision,
                    profile=run.profile, attention=run.attention, framework=run.framework,
                    constraints=Constraints(**{**run.constraints, **fixed}))


def step_flops(run: PublishedRun) -> float:
    count = FLOP_COUNTS.get(run.flops_convention)
    if count is not None:
        return count(run.model, run.seq, run.global_batch)
    return 3.0 * forward_flops_per_token(run.model, run.seq) * run.seq * run.global_batch


def published_seconds(run: PublishedRun) -> float | None:
    """Predicted step time of the published layout (None: it does not fit)."""
    found = _published(run)
    return None if found is None else found[0]


def _published(run: PublishedRun) -> tuple[float, dict] | None:
    """(seconds, its layout's axes) of the published layout's fastest configuration."""
    fixed = plan(_spec(run, **run.layout))
    if not fixed.n_fits:
        return None
    i = int(np.argmin(fixed.evaluated.seconds))
    cols = fixed.evaluated.columns(np.array([i]))
    return float(fixed.evaluated.seconds[i]), {a: cols[a][0] for a in GROUP_AXES}


def tflops_per_gpu(run: PublishedRun, seconds: float) -> float:
    """TFLOP/s per GPU of a step of `seconds`, in the run's own FLOP convention."""
    return step_flops(run) / (seconds * run.world) / 1e12


def check(run: PublishedRun) -> ReferenceCheck:
    found = _published(run)
    if found is None:
        return ReferenceCheck(run, False, None, None, None, 0, None)
    secs, axes = found
    tflops = tflops_per_gpu(run, secs)
    full = plan(_spec(run))
    rank = 1 + int(np.count_nonzero(full.evaluated.seconds < secs))
    best = full.rows(full.top(1))[0] if full.n_fits else None
    layout_rank, n_layouts = layout_rank_of(full, _row_of(full.evaluated, axes))
    return ReferenceCheck(run, True, secs, tflops, rank, full.n_fits, best, layout_rank,
                          n_layouts)


def _row_of(ev, axes: dict) -> int:
    """A kept row of `ev` with the layout `axes` (the open search holds the published
    configuration: it fits, and the published run's constraints only fix axes). Only the
    rows of its block are decoded."""
    start = 0
    for blk, n in zip(ev.blocks, ev.block_rows):
        if (blk.world, blk.tp, blk.pp, blk.cp, blk.dp) == tuple(
                axes[a] for a in ("world", "tp", "pp", "cp", "dp")):
            cols = blk.decode(ev.flat[start:start + n])
            hit = np.logical_and.reduce([cols[a] == v for a, v in axes.items()])
            if hit.any():
                return start + int(np.flatnonzero(hit)[0])
        start += n
    raise LookupError(f"no kept configuration has the layout {axes}")


def figure_seconds(fig: LayoutFigure, global_batch: int) -> list[float | None]:
    """Predicted step seconds of each of the figure's layouts (None: does not fit)."""
    return [published_seconds(fig.run(layout, global_batch)) for layout in fig.layouts]


def figure_agrees(fig: LayoutFigure, global_batch: int) -> bool:
    """Whether the predicted order is the measured one (`order_agrees`)."""
    return order_agrees(fig, figure_seconds(fig, global_batch))


def order_agrees(fig: LayoutFigure, secs: list[float | None]) -> bool:
    """Whether step times `secs` of the figure's layouts order them as measured: `fig.fastest`
    the fastest layout, or (fastest None) every layout strictly slower than the one before
    it; every layout fits."""
    if None in secs:
        return False
    if fig.fastest is not None:
        return fig.layouts[secs.index(min(secs))] == fig.fastest
    return all(a < b for a, b in zip(secs, secs[1:]))


def picked(match: str | None) -> tuple[list[PublishedRun], list[LayoutFigure]]:
    """The published runs and figures whose name contains `match` (case-insensitive; None: all).
    An empty or blank `match`, or one that picks nothing, is a ValueError naming the entries."""
    if match is not None and not match.strip():
        raise ValueError("empty; give part of an entry's name (or leave it out)")
    pick = lambda entries: [e for e in entries  # noqa: E731
                            if match is None or match.lower() in e.name.lower()]
    runs, figs = pick(REFERENCE_RUNS), pick(LAYOUT_FIGURES)
    if not runs and not figs:
        names = "; ".join(e.name for e in REFERENCE_RUNS + LAYOUT_FIGURES)
        raise ValueError(f"no entry's name contains {match!r}; names: {names}")
    return runs, figs


def report(match: str | None = None) -> dict:
    """{"runs": one row per published run (`check`), "figures": one row per layout comparison,
    with each batch's predicted seconds and TFLOP/s per layout and whether their order is the
    measured one} — plain values (JSON-ready)."""
    runs, figs = picked(match)
    return {"runs": [run_row(r) for r in runs], "figures": [figure_row(f) for f in figs]}


def run_row(run: PublishedRun) -> dict:
    c = check(run)
    best = c.best or {}
    return {"name": run.name, "source": run.source, "layout": run.layout, "fits": c.fits,
            "predicted_tflops_per_gpu": c.tflops_per_gpu, "published_tflops_per_gpu":
            run.tflops_per_gpu, "error": c.error, "seconds": c.seconds, "rank": c.rank,
            "n_fits": c.n_fits, "rank_fraction": c.rank_fraction, "layout_rank": c.layout_rank,
            "n_layouts": c.n_layouts, "layout_fraction": c.layout_fraction,
            "behind_fastest": c.behind_fastest,
            "in_fastest_tenth": c.layout_rank is not None and in_fastest_tenth(c.layout_rank,
                                                                               c.n_layouts),
            "fastest": {k: best.get(k) for k in ("tp", "pp", "vpp", "ep", "cp", "dp", "zero",
                                                 "micro_batch", "schedule", "seconds")}}


def figure_row(fig: LayoutFigure) -> dict:
    per_batch = []
    for b in fig.global_batches:
        secs = figure_seconds(fig, b)
        tflops = [None if s is None else tflops_per_gpu(fig.run(layout, b), s)
                  for layout, s in zip(fig.layouts, secs)]
        per_batch.append({"global_batch": b, "seconds": secs, "tflops_per_gpu": tflops,
                          "agrees": order_agrees(fig, secs)})
    measured = (f"fastest at {fig.fastest.label(fig.shows)}" if fig.fastest
                else "each layout slower than the one before")
    return {"name": fig.name, "layouts": [asdict(x) for x in fig.layouts],
            "labels": [x.label(fig.shows) for x in fig.layouts], "measured": measured,
            "batches": per_batch}
