"""The planner's search space: every structural layout (tp, pp, vpp, ep, etp, cp, dp, schedule)
of one world size, checked by the core's own validity rules.

A layout is a pipeline shape (pp, vpp, schedule, layout) times a width (tp, cp, dp, ep, etp).
The core's checks split along that seam — `check_model_parallel` reads (tp, ep, etp, sp) and the
stage split (pp, vpp, schedule, layout); `check_train` reads (tp, cp, sp, seq); ParallelSpec
itself checks that ep·etp divides tp·cp·dp — so each factor is checked once, by calling the core
on a ParallelSpec whose other fields are 1, and a layout is valid when all its factors are
(tests/test_planner_space.py pins this against `check_all` on full specs). Planner rules on
top: dp divides the global batch, every pipeline stage holds at least one layer, sequence
parallel is on whenever tp > 1 and the framework has it (`PlanSpec.sequence_parallel`), and
when pp·vpp does not divide the layer count the stages get `balanced_layout` instead of the
configuration being dropped.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from memledger.errors import SpecError
from memledger.ledger.checks import check_model_parallel, check_train
from memledger.ledger.pipeline.schedules import balanced_layout
from memledger.planner.question.spec import PLAN_SCHEDULES, PlanSpec
from memledger.specs.parallel import ParallelSpec


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class Pipe:
    """A pipeline shape; `layout` is set only when the stages need `balanced_layout`."""

    pp: int
    vpp: int
    schedule: str
    layout: tuple[int, ...] | None = None

    def parallel(self, **kw) -> ParallelSpec:
        return ParallelSpec(pp=self.pp, vpp=self.vpp, schedule=self.schedule, layout=self.layout,
                            **kw)


@dataclass
class Group:
    """All valid layouts of one (world, pp): its pipeline shapes × its widths (arrays)."""

    world: int
    pp: int
    pipes: list[Pipe]
    tp: np.ndarray
    cp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray

    @property
    def n_widths(self) -> int:
        return len(self.tp)


@dataclass
class Space:
    groups: list[Group] = field(default_factory=list)
    n_structural: int = 0
    n_invalid: int = 0
    reasons: Counter = field(default_factory=Counter)  # SpecError field -> layouts rejected
    examples: dict[str, str] = field(default_factory=dict)  # field -> one message

    def reject(self, err: SpecError, count: int) -> None:
        if count:
            self.n_invalid += count
            self.reasons[err.field] += count
            self.examples.setdefault(err.field, str(err))


class _Checks:
    """The core's checks, memoised on exactly the fields each one reads."""

    def __init__(self, spec: PlanSpec):
        self.spec, self.m = spec, spec.model
        self.train = spec.base_train()
        self.cache: dict = {}

    def _memo(self, key, fn) -> SpecError | None:
        if key not in self.cache:
            try:
                self.cache[key] = fn()
            except SpecError as e:
                # kept without its traceback: the traceback's frames reach up to the search
                # that asked (its locals hold the space, the result) — a cycle that would keep
                # a search's arrays alive until the garbage collector happens to run
                self.cache[key] = e.with_traceback(None)
        return self.cache[key]

    def pipe(self, pp: int, vpp: int, schedule: str) -> Pipe | SpecError:
        def build():
            p = ParallelSpec(pp=pp, vpp=vpp, schedule=schedule)
            n, layers = p.n_stages, self.m.n_layers
            if n > layers:
                raise SpecError("pp", f"{n} pipeline stages (pp={pp}, vpp={vpp}) exceed "
                                      f"n_layers={layers}; every stage needs a layer")
            if layers % n and not self.spec.fw.uneven_stages:
                raise SpecError("pp", f"n_layers={layers} does not split into {n} equal stages "
                                      f"(pp={pp}, vpp={vpp}); {self.spec.fw.name} runs equal "
                                      "stages only")
            pipe = Pipe(pp, vpp, schedule, None if layers % n == 0 else balanced_layout(layers, n))
            check_model_parallel(self.m, pipe.parallel())
            return pipe
        return self._memo(("pipe", pp, vpp, schedule), build)

    def base(self, world: int, pp: int, tp: int, cp: int) -> SpecError | None:
        """Checks of (tp, cp, dp): the world split, the global batch, sequence vs cp and tp."""
        def split():
            ParallelSpec.from_world(world, tp=tp, pp=pp, cp=cp)
            self._batch(world // (tp * pp * cp))
        return (self._memo(("split", world, pp, tp, cp), split)
                or self._memo(("train", tp, cp), lambda: check_train(
                    self.m, ParallelSpec(tp=tp, cp=cp, sp=self.spec.sequence_parallel(tp)),
                    self.train)))

    def experts(self, dense_ranks: int, tp: int, ep: int, etp: int) -> SpecError | None:
        """ep·etp folding over tp·cp·dp ranks, and the model's tp / ep / etp divisibility."""
        return (self._memo(("fold", dense_ranks, ep, etp),
                           lambda: ParallelSpec(dp=dense_ranks, ep=ep, etp=etp) and None)
                or self._memo(("model", tp, ep, etp), lambda: check_model_parallel(
                    self.m, ParallelSpec(tp=tp, ep=ep, etp=etp, dp=ep * etp,
                                         sp=self.spec.sequence_parallel(tp)))))

    def _batch(self, dp: int) -> None:
        b = self.spec.global_batch
        if b % dp:
            raise SpecError("global_batch", f"global_batch={b} is not divisible by dp={dp}")

def _candidates(spec: PlanSpec, axis: str, natural: list[int], bound: int | None) -> list[int]:
    fixed = getattr(spec.constraints, axis)
    if fixed is not None:
        return [fixed]
    return [v for v in natural if bound is None or v <= bound]


def pipes_for(spec: PlanSpec, pp: int) -> list[tuple[int, int, str]]:
    c, m, fw = spec.constraints, spec.model, spec.fw
    out = []
    for schedule in PLAN_SCHEDULES:
        if not c.allows("schedule", schedule) or (schedule == "dualpipe" and m.moe is None) \
                or schedule not in fw.schedules:
            continue
        if schedule != "interleaved":
            if c.vpp in (None, 1):
                out.append((pp, 1, schedule))
            continue
        if pp < fw.interleave_min_pp:
            continue
        top = max(m.n_layers // pp, 1)
        vpps = [c.vpp] if c.vpp is not None else range(2, top + 1)
        out += [(pp, v, schedule) for v in vpps if c.max_vpp is None or v <= c.max_vpp]
    return out


def widths_for(spec: PlanSpec, world: int, pp: int):
    """(tp, cp, [ep], [etp]) candidates: divisors of what is left of the world, within bounds."""
    c, moe = spec.constraints, spec.model.moe is not None
    rest = world // pp
    eps = _candidates(spec, "ep", divisors(rest), None) if moe else [c.ep or 1]
    etps = _candidates(spec, "etp", divisors(rest), spec.max_etp) if moe else [c.etp or 1]
    for tp in _candidates(spec, "tp", divisors(rest), spec.max_tp):
        left = rest // tp if rest % tp == 0 else 1
        cps = _candidates(spec, "cp", divisors(left), c.max_cp) if spec.fw.context_parallel \
            else [1]
        for cp in cps:
            if c.dp is not None and left % cp == 0 and left // cp != c.dp:
                continue
            yield tp, cp, eps, etps


def framework_runs(spec: PlanSpec, pipes, pp: int, ms: np.ndarray):
    """[P, M] whether the framework runs each pipe with each micro-batch count (Megatron-LM
    2021 interleaves only counts pp divides, `costs.overlap`); True where it sets no rule."""
    if not spec.fw.interleave_m_multiple:
        return True
    interleaved = np.array([p.schedule == "interleaved" for p in pipes])[:, None]
    return ~interleaved | (np.asarray(ms)[None] % pp == 0)


def enumerate_space(spec: PlanSpec) -> Space:
    space, checks = Space(), _Checks(spec)
    for world in spec.worlds:
        for pp in _candidates(spec, "pp", divisors(world), None):
            pipes = [checks.pipe(*key) for key in pipes_for(spec, pp)]
            good_pipes = [p for p in pipes if isinstance(p, Pipe)]
            good, n_widths = [], 0
            for tp, cp, eps, etps in widths_for(spec, world, pp):
                n = len(eps) * len(etps)
                n_widths += n
                err = checks.base(world, pp, tp, cp)
                if err is not None:
                    space.reject(err, n * len(good_pipes))
                    continue
                for ep in eps:
                    for etp in etps:
                        err = checks.experts(world // pp, tp, ep, etp)
                        if err is None:
                            good.append((tp, cp, ep, etp))
                        else:
                            space.reject(err, len(good_pipes))
            space.n_structural += len(pipes) * n_widths
            for err in pipes:
                if isinstance(err, SpecError):
                    space.reject(err, n_widths)
            if good_pipes and good:
                tp, cp, ep, etp = (np.array(col, dtype=np.int64) for col in zip(*good))
                dp = world // (pp * tp * cp)
                space.groups.append(Group(world, pp, good_pipes, tp, cp, dp, ep, etp))
    return space
