"""The planner's pruning is exact: the cells its static bound rules out hold nothing that fits,
so the pruned search gives the same answer as the unpruned one — the same fitting count, the
same kept configurations in the same order with byte-identical peaks and the same step times,
the same top results and the same smallest peak (planner.sweep.cells)."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memledger import gpu, model
from memledger.planner import Constraints, Plan, PlanSpec, plan
from memledger.planner.sweep.cells import alloc_ceiling, peak_total
from memledger.planner.sweep.evaluate import evaluate
from memledger.planner.question.space import enumerate_space
from memledger.specs.runtime import RuntimeSpec

MODELS = ("llama3-8b", "llama3.2-1b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3",
          "llama3-70b")


def both(spec: PlanSpec):
    space = enumerate_space(spec)
    return evaluate(spec, space), evaluate(spec, space, prune=False)


def assert_same(a, b) -> None:
    assert (a.n_evaluated, a.n_fits) == (b.n_evaluated, b.n_fits)
    for k in ("block_id", "flat", "peak_bytes", "seconds"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert a.best == b.best
    assert [blk.shape for blk in a.blocks] == [blk.shape for blk in b.blocks]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(MODELS), world=st.sampled_from((8, 16, 32, 64)),
       seq=st.sampled_from((1024, 4096)), batch=st.sampled_from((16, 32, 48, 64)),
       headroom=st.sampled_from((0.0, 0.1, 0.3)),
       loop=st.sampled_from(("megatron", "deepspeed", "pytorch")),
       zero3=st.sampled_from(("fsdp", "deepspeed")), precision=st.sampled_from(("megatron", "amp")))
def test_pruned_and_unpruned_searches_agree_on_random_spaces(name, world, seq, batch, headroom,
                                                              loop, zero3, precision):
    """Models dense and MoE, ZeRO-3 with and without FSDP units (the loss-side discount),
    amp's cast cache (a loss-side transient on every rank), on-demand gradients (no pruning)."""
    spec = PlanSpec(model=model(name), hardware=gpu("h100"), worlds=(world,), seq=seq,
                    global_batch=batch, headroom=headroom, precision=precision,
                    runtime=RuntimeSpec(loop=loop, zero3_impl=zero3),
                    constraints=Constraints(max_vpp=3))
    pruned, full = both(spec)
    assert full.n_pruned == 0
    assert_same(pruned, full)


def test_top_results_and_the_front_are_those_of_the_unpruned_search():
    spec = PlanSpec(model=model("mixtral-8x7b"), hardware=gpu("h100"), worlds=(32,), seq=4096,
                    global_batch=64)
    pruned, full = both(spec)
    assert pruned.n_pruned > 0 and pruned.n_fits > 0
    a, b = plan(spec), Plan(spec=spec, evaluated=full, n_structural=0, n_invalid=0)
    assert a.evaluated.n_pruned == pruned.n_pruned
    assert a.rows(a.top(20)) == b.rows(b.top(20))
    assert np.array_equal(a.pareto, b.pareto)
    assert_same(a.evaluated, full)


def test_zero_0_of_llama3_8b_on_8_h100_is_ruled_out_by_its_static_rows_alone():
    """tp = pp = cp = 1, dp = 8: ZeRO-0 holds 18 N = 134.6 GiB of model states, over 79.65 GiB
    before any activation (test_planner.py pins the numbers), so its cell — 4 micro-batch
    sizes × 3 recompute modes — is never assembled; every other cell is, and the answer is the
    12 fitting configurations of the unpruned search."""
    spec = PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8,), seq=8192,
                    global_batch=64, constraints=Constraints(tp=1, pp=1, cp=1))
    pruned, full = both(spec)
    assert (pruned.n_evaluated, pruned.n_pruned, pruned.n_fits) == (48, 12, 12)
    assert_same(pruned, full)


def test_when_nothing_fits_the_smallest_peak_is_the_unpruned_one():
    """Llama-3.1 405B on 8 H100: every cell is ruled out, so the pruned pass knows no peak; the
    search runs again unpruned and reports the same smallest peak and its step time."""
    spec = PlanSpec(model=model("llama3.1-405b"), hardware=gpu("h100"), worlds=(8,), seq=8192,
                    global_batch=64)
    pruned, full = both(spec)
    assert pruned.n_fits == 0 and pruned.best is not None
    assert pruned.best == full.best


@given(limit=st.integers(0, 10**12), slack=st.integers(0, 100), context=st.integers(0, 10**9))
def test_the_alloc_ceiling_is_the_largest_alloc_whose_peak_fits(limit, slack, context):
    c = alloc_ceiling(limit, slack, context)
    assert c >= -1
    assert c == -1 or peak_total(c, slack, context) <= limit
    assert peak_total(c + 1, slack, context) > limit
