"""Plan: the planner's answer — every fitting configuration with its exact per-rank peak and
estimated step time, the Pareto front of the two, the counts, and, when nothing fits, why.

Configurations are kept compactly (block id + flat index into the block's grid) and decoded on
demand; the time-sorted order and the Pareto front are computed on first use.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from memledger.costs.capacity import gpus_for_states
from memledger.ledger.pipeline.schedules import balanced_layout
from memledger.planner.sweep.blocks import SCHEDULE_CODES, Evaluated
from memledger.planner.sweep.memhint import small_pages
from memledger.planner.question.spec import PLAN_RECOMPUTE, PlanSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec
from memledger.units import GIB


@dataclass
class Plan:
    spec: PlanSpec
    evaluated: Evaluated
    n_structural: int
    n_invalid: int
    invalid_reasons: dict[str, int] = field(default_factory=dict)
    invalid_examples: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0

    # -- counts -------------------------------------------------------------------------------
    @property
    def n_evaluated(self) -> int:
        return self.evaluated.n_evaluated

    @property
    def n_fits(self) -> int:
        return self.evaluated.n_fits

    @property
    def n_over(self) -> int:
        return self.n_evaluated - self.n_fits

    def counts(self) -> dict:
        return {"structural": self.n_structural, "invalid": self.n_invalid,
                "invalid_reasons": dict(self.invalid_reasons), "evaluated": self.n_evaluated,
                "over_capacity": self.n_over, "fits": self.n_fits}

    # -- order --------------------------------------------------------------------------------
    @cached_property
    def order(self) -> np.ndarray:
        """Every fitting configuration, fastest first (ties: smaller peak first)."""
        with small_pages():
            return np.lexsort((self.evaluated.peak_bytes, self.evaluated.seconds))

    def top(self, k: int | None) -> np.ndarray:
        """The k fastest fitting configurations (all when k is None or 0)."""
        n = len(self.evaluated.seconds)
        if not k or k >= n or "order" in self.__dict__:
            return self.order[:k or None]
        secs = self.evaluated.seconds
        # the k-th smallest of an even sample is ≥ the k-th smallest of all, so every one of
        # the k fastest (and every tie of the k-th) is ≤ it: partition ~1/64 of the times
        sample = secs[::max(1, min(64, n // (64 * k)))]
        cut = np.partition(sample, k - 1)[k - 1]
        near = np.flatnonzero(secs <= cut)
        return near[np.lexsort((self.evaluated.peak_bytes[near], secs[near]))][:k]

    @cached_property
    def pareto(self) -> np.ndarray:
        """Fitting configurations no other beats on both peak and time, fastest first.

        Exact without sorting everything: the front of a probe set (about PROBE of the fastest,
        of the smallest peaks, and an even sample) dominates most points; only the points it
        does not dominate are sorted with it. Any probe set gives the same front (a point the
        probe front dominates is dominated), so the probes are cut from even samples (as `top`)
        rather than partitioned out of all points, and the dominance test runs in chunks whose
        temporaries stay small: no array the size of the answer is allocated (a fresh 56 MB
        index array costs 0.05–0.4 s in page faults here; docs/planner-speed.md, Round 5)."""
        peak, secs = self.evaluated.peak_bytes, self.evaluated.seconds
        n = len(secs)
        if n <= PROBE:
            return _front(np.arange(n), peak, secs)
        f0 = _front(np.unique(np.concatenate([_smallest(secs, PROBE), _smallest(peak, PROBE),
                                              np.arange(0, n, n // PROBE)])), peak, secs)
        by_peak = f0[np.argsort(peak[f0])]  # along a front, seconds fall as peak rises
        fp, fs = peak[by_peak], secs[by_peak]
        rest = [f0]
        for c0 in range(0, n, CHUNK):
            p, t = peak[c0:c0 + CHUNK], secs[c0:c0 + CHUNK]
            j = np.searchsorted(fp, p, side="right") - 1
            dominated = (j >= 0) & (fs.take(np.maximum(j, 0)) <= t)
            rest.append(np.flatnonzero(~dominated) + c0)
        return _front(np.unique(np.concatenate(rest)), peak, secs)

    # -- rows ---------------------------------------------------------------------------------
    def rows(self, idx) -> list[dict]:
        idx = np.asarray(idx, dtype=np.int64)
        cols = self.evaluated.columns(idx)
        peak, secs = self.evaluated.peak_bytes[idx], self.evaluated.seconds[idx]
        cap = self.spec.capacity_bytes
        out = []
        for i in range(len(idx)):
            row = {k: v[i].item() for k, v in cols.items()}
            out.append(_named(row, self.spec) | {"peak_bytes": int(peak[i]),
                                                 "free_bytes": int(cap - peak[i]),
                                                 "seconds": float(secs[i])})
        return out

    def specs(self, row: dict) -> tuple[ParallelSpec, TrainSpec]:
        """The ledger's specs for one row (for build_ledger and share links)."""
        p = ParallelSpec(tp=row["tp"], pp=row["pp"], vpp=row["vpp"], ep=row["ep"],
                         etp=row["etp"], cp=row["cp"], dp=row["dp"], sp=row["sp"],
                         zero=row["zero"], schedule=row["schedule"])
        if row["layout"] == "balanced":
            p = replace(p, layout=balanced_layout(self.spec.model.n_layers, p.n_stages))
        t = self.spec.base_train(micro_batch=row["micro_batch"],
                                 micro_batches=row["micro_batches"], recompute=row["recompute"])
        return p, t

    # -- explanation ---------------------------------------------------------------------------
    @cached_property
    def reason(self) -> str | None:
        """Why nothing fits (None when something does)."""
        if self.n_fits:
            return None
        if not self.n_evaluated:
            why = "; ".join(self.invalid_examples.values()) or "the constraints leave no candidate"
            return f"no valid layout for this request: {why}"
        s, best = self.spec, _named(dict(self.evaluated.best), self.spec)
        need = self.gpus_needed
        states = "" if need > max(s.worlds) else " (model states alone)"
        return (f"nothing fits under {s.limit_bytes / GIB:.2f} GiB per GPU "
                f"({s.hardware.name}, headroom {s.headroom:.0%}); the smallest peak is "
                f"{best['peak_bytes'] / GIB:.2f} GiB with {describe(best)}; "
                f"needs ≥ {need} GPUs of this kind{states}")

    @cached_property
    def gpus_needed(self) -> int:
        """A lower bound on GPUs: the model's weights, gradients and optimizer states (no
        parallelism, ZeRO-0) spread perfectly over GPUs that each also hold the CUDA context."""
        s = self.spec
        return gpus_for_states(s.model, s.base_train(), s.runtime, s.limit_bytes)

    def to_dict(self, top: int | None = 20) -> dict:
        """The CLI's --json object: bytes as integers, seconds as floats."""
        s = self.spec
        return {"model": s.model.name, "gpu": s.hardware.name, "worlds": list(s.worlds),
                "capacity_bytes": s.capacity_bytes, "limit_bytes": s.limit_bytes,
                "counts": self.counts(), "reason": self.reason,
                "configurations": self.rows(self.top(top)),
                "pareto": self.rows(self.pareto),
                "smallest_peak": (_named(dict(self.evaluated.best), s)
                                  if self.evaluated.best else None)}


PROBE = 20000
CHUNK = 1 << 18  # points per step of the Pareto dominance test (temporaries of ~2 MB)


def _smallest(a: np.ndarray, k: int) -> np.ndarray:
    """Indices of about k of the smallest values of a: those ≤ the sample's (k / step)-th
    smallest, for an even sample of every step-th value (~4k of them)."""
    step = max(1, len(a) // (4 * k))
    q = max(1, k // step) - 1
    return np.flatnonzero(a <= np.partition(a[::step], q)[q])


def _front(idx: np.ndarray, peak: np.ndarray, secs: np.ndarray) -> np.ndarray:
    """Pareto front of the points idx, fastest first (one of any exact duplicates)."""
    idx = idx[np.lexsort((peak[idx], secs[idx]))]
    p = peak[idx]
    best_before = np.minimum.accumulate(np.concatenate([[np.iinfo(np.int64).max], p[:-1]]))
    return idx[p < best_before]


def _named(row: dict, spec: PlanSpec) -> dict:
    """Codes → names, and the ledger's spellings (sp, layout)."""
    out = dict(row)
    if isinstance(out.get("schedule"), int):
        out["schedule"] = SCHEDULE_CODES[out["schedule"]]
    if isinstance(out.get("recompute"), int):
        out["recompute"] = PLAN_RECOMPUTE[out["recompute"]]
    out["sp"] = spec.sequence_parallel(out["tp"])
    out["layout"] = "balanced" if out.pop("balanced", False) else None
    return out


def describe(row: dict) -> str:
    """One line: 'tp=8 pp=16 ep=64 dp=16 ZeRO-1 1f1b mb=1 m=64 recompute=full'."""
    axes = " ".join(f"{k}={row[k]}" for k in ("tp", "pp", "vpp", "ep", "etp", "cp", "dp")
                    if row[k] != 1 or k in ("tp", "pp", "dp"))
    layout = " (balanced layout)" if row.get("layout") == "balanced" else ""
    return (f"{axes} ZeRO-{row['zero']} {row['schedule']}{layout} mb={row['micro_batch']} "
            f"m={row['micro_batches']} recompute={row['recompute']}")
