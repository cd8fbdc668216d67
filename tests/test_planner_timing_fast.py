"""The planner's faster step-time arrays (planner/time/timing.py) give the same answer as the
term-by-term sum they replace: `StepTerms` (width-free terms on [R, B], the MoE layers' as one
product) equals the slowest rank of `_rank_parts`' sum to rounding and ranks every
configuration in the same order; `_layers_from` (one layer table per (tp, cp) over every
micro-batch size and width of the search) is bit for bit the per-block `_layers`; and
`segment_max`'s strided path for equal segments is numpy's reduceat."""
from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memledger import gpu, model
from memledger.planner import Constraints, PlanSpec, plan
from memledger.planner.sweep import cells
from memledger.planner.time import timing
from memledger.planner.memory.segmax import segment_max

SPECS = {
    "deepseek-v3 dualpipe": dict(model=model("deepseek-v3"), hardware=gpu("h100"), worlds=(256,),
                                 seq=4096, global_batch=512,
                                 constraints=Constraints(max_vpp=2, max_cp=2)),
    "llama3-8b cp": dict(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(32,), seq=8192,
                         global_batch=64, constraints=Constraints(max_vpp=4)),
}


def _term_by_term(pf, L, p2p, n_w):
    """The sum as it was before the regrouping: every rank's five terms, then its recompute."""
    rp = timing._rank_parts(pf, L, p2p)
    per_rank = sum(rp[k] for k in ("compute", "tp", "cp", "ep", "pp_p2p"))
    shape = (len(pf.dense), n_w, np.shape(p2p)[-1])
    t_mb = np.stack([segment_max(np.broadcast_to(per_rank + r, shape), pf.seg)
                     for r in rp["recompute"]], -1)
    return t_mb, segment_max(np.broadcast_to(rp["compute"], shape), pf.seg)


@dataclass(kw_only=True)
class _TermByTerm(timing.StepTerms):
    """`StepTerms` whose slowest ranks come from the term-by-term sum."""

    summed: np.ndarray | None = None

    def passes(self):
        return self.summed


def _step_terms_term_by_term(pf, L, p2p, scale, dp, opt, acc, m_b, n_w):
    terms = REAL_STEP_TERMS(pf, L, p2p, scale, dp, opt, acc, m_b, n_w)
    t_mb, comp = _term_by_term(pf, L, p2p, n_w)
    return _TermByTerm(**vars(terms), summed=np.concatenate([comp[None],
                                                             np.moveaxis(t_mb, -1, 0)]))


REAL_STEP_TERMS = timing.step_terms


def _search(spec, monkeypatch, step_terms=None, layers_from=None):
    with monkeypatch.context() as mp:
        mp.setattr(cells, "FUSED", False)  # the numpy path reads `passes` (the compiled pass
        if step_terms is not None:  # equals it: tests/test_planner_fused.py)
            mp.setattr(timing, "step_terms", step_terms)
        if layers_from is not None:
            mp.setattr(timing, "_layers_from", layers_from)
        return plan(spec)


def test_regrouped_step_times_rank_every_configuration_as_the_term_by_term_sum(monkeypatch):
    for kw in SPECS.values():
        spec = PlanSpec(**kw)
        new = _search(spec, monkeypatch)
        old = _search(spec, monkeypatch, step_terms=_step_terms_term_by_term)
        assert new.n_fits == old.n_fits > 0
        assert not np.array_equal(new.evaluated.seconds, old.evaluated.seconds)  # two sums
        np.testing.assert_array_equal(new.evaluated.flat, old.evaluated.flat)
        np.testing.assert_array_equal(new.evaluated.peak_bytes, old.evaluated.peak_bytes)
        np.testing.assert_allclose(new.evaluated.seconds, old.evaluated.seconds, rtol=1e-13)
        np.testing.assert_array_equal(new.order, old.order)
        np.testing.assert_array_equal(new.pareto, old.pareto)


def test_layer_table_per_tp_and_cp_is_bit_for_bit_the_per_block_one(monkeypatch):
    def per_block(cache, su, pf, seq, bs, ep, etp):
        tokens = np.asarray(bs, np.float64) * seq / su.cp
        return timing._layers(su, pf, tokens, np.asarray(ep)[:, None], np.asarray(etp)[:, None])
    spec = PlanSpec(**SPECS["deepseek-v3 dualpipe"])
    new = _search(spec, monkeypatch)
    old = _search(spec, monkeypatch, layers_from=per_block)
    np.testing.assert_array_equal(new.evaluated.seconds, old.evaluated.seconds)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.booleans(), st.integers(0, 2**32 - 1))
def test_segment_max_of_equal_segments_is_numpys_reduceat(k, n_seg, ragged, seed):
    rng = np.random.default_rng(seed)
    n = np.full(n_seg, k)
    if ragged:
        n = rng.integers(1, k + 1, n_seg)
    seg = np.cumsum(n) - n
    a = rng.normal(size=(int(n.sum()), 3, 2))
    np.testing.assert_array_equal(segment_max(a, seg), np.maximum.reduceat(a, seg, axis=0))
