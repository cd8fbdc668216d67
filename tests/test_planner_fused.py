"""The compiled pass (planner/sweep/fused.py) gives the numpy path's answer: the same kept rows in the
same order, byte-identical peaks, bit-identical step times, the same counts and the same
smallest fitting peak — on real searches of every kind and on random blocks built to hit ties,
micro-batch counts the engine does not run, FSDP-discounted rows and SS above SF."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memledger import gpu, model
from memledger.planner import Constraints, PlanSpec
from memledger.planner.sweep import cells, fused
from memledger.planner.sweep.cells import RankTerms, alloc_ceiling, assemble
from memledger.planner.sweep.evaluate import evaluate
from memledger.planner.sweep.sink import Sink
from memledger.planner.time.timing import StepTerms
from memledger.costs.stepmodel import DPTerms
from memledger.planner.question.space import enumerate_space
from memledger.specs.runtime import RuntimeSpec


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the compiled kernel's calls (a comparison that never ran it proves nothing)."""
    calls = []
    real = fused.kernel()

    def counting(*args):
        calls.append(len(args[0]))
        return real(*args)
    monkeypatch.setattr(fused, "kernel", lambda: counting)
    return calls


def both_paths(spec: PlanSpec, monkeypatch):
    space = enumerate_space(spec)
    got = evaluate(spec, space)
    monkeypatch.setattr(cells, "FUSED", False)
    want = evaluate(spec, space)
    monkeypatch.setattr(cells, "FUSED", True)
    return got, want


def assert_same_answer(a, b) -> None:
    assert (a.n_evaluated, a.n_fits, a.n_pruned) == (b.n_evaluated, b.n_fits, b.n_pruned)
    assert a.block_rows == b.block_rows
    for k in ("flat", "peak_bytes", "seconds"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert a.best == b.best


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(("llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3")),
       world=st.sampled_from((8, 16, 64)), batch=st.sampled_from((16, 48, 64)),
       headroom=st.sampled_from((0.0, 0.3)), zero3=st.sampled_from(("fsdp", "deepspeed")),
       precision=st.sampled_from(("megatron", "amp")),
       framework=st.sampled_from(("megatron-core", "megatron-2021")))
def test_fused_and_numpy_searches_keep_the_same_rows(name, world, batch, headroom, zero3,
                                                     precision, framework, kernel_calls,
                                                     monkeypatch):
    """Dense and MoE, ZeRO-3 with FSDP units (discounted rows in the table), amp's casts,
    no sequence parallelism (megatron-2021; MoE with tp then needs SP, so its tp is 1)."""
    assume(framework != "megatron-2021" or name == "llama3-8b")
    spec = PlanSpec(model=model(name), hardware=gpu("h100"), worlds=(world,), seq=2048,
                    global_batch=batch, headroom=headroom, precision=precision,
                    framework=framework, runtime=RuntimeSpec(loop="megatron", zero3_impl=zero3),
                    constraints=Constraints(max_vpp=3))
    kernel_calls.clear()
    got, want = both_paths(spec, monkeypatch)
    assert_same_answer(got, want)
    assert kernel_calls or got.n_fits == 0


def test_deepseek_v3_on_256_gpus_is_the_same_with_many_kept_rows(kernel_calls, monkeypatch):
    spec = PlanSpec(model=model("deepseek-v3"), hardware=gpu("h100"), worlds=(256,), seq=4096,
                    global_batch=1024, constraints=Constraints(max_vpp=2, max_cp=2))
    got, want = both_paths(spec, monkeypatch)
    assert got.n_fits > 10_000 and len(kernel_calls) > 10
    assert_same_answer(got, want)


def random_block(rng, n_z: int, units: bool, negative: bool = False):
    """A block's RankTerms and step-time addends with small integer ranges (ties in peaks)."""
    n_p, n_w, n_b, n_rc = int(rng.integers(1, 4)), int(rng.integers(1, 4)), 3, 2
    n_ranks = rng.integers(1, 4, n_p)
    seg = np.cumsum(n_ranks) - n_ranks
    n_r = int(n_ranks.sum())
    f = rng.integers(0, 40, (n_r, n_w, n_b, n_rc)) * 1000
    sf = rng.integers(0, 40, (n_r, n_w, n_z)) * 1000
    ss = sf + rng.integers(-20, 20, (n_r, n_w, n_z)) * 1000
    u, phases = None, None
    if units:
        u = rng.integers(0, 30, (n_r, n_w, n_z)) * 1000 * (rng.random((1, 1, n_z)) < 0.6)
        phases = [(rng.integers(0, 20, (n_r, 1, n_b)) * 1000,
                   rng.integers(-5 if negative else 0, 30, (n_r, n_w, n_b)) * 1000)
                  for _ in range(n_rc)]  # a negative at-loss: every stage takes the rule
        for i, (lp, sp) in enumerate(phases):  # F holds its transient (combine): F ≥ 0 after
            f[..., i] += np.maximum(lp, sp)  # the discount, which pruning and SS rely on
    secs = random_step_terms(rng, n_p, n_w, n_z, n_b, n_rc)
    valid = rng.random((n_p, n_b)) < 0.8
    return (lambda: RankTerms(f, sf, ss, u, phases)), secs, valid, seg, n_ranks, \
        (n_p, n_w, n_z, n_b, n_rc)


def random_step_terms(rng, n_p, n_w, n_z, n_b, n_rc) -> StepTerms:
    """Step-time pieces with coarse values (ties in seconds), DualPipe ranks, every way a
    data-parallel term is hidden, and stages with one term or two."""
    t_n = rng.integers(1, 4, n_p)
    n_r = int(t_n.sum())
    coarse = lambda *shape: rng.integers(0, 8, shape) / 4  # noqa: E731
    x = coarse(n_z, n_p, n_w)
    dp = DPTerms(x=x, y=np.where(rng.random(x.shape) < 0.5, -np.inf, coarse(*x.shape)),
                 per_mb=rng.random(n_z) < 0.5, hide=rng.integers(0, 3, n_z),
                 zero3=np.zeros(n_z, bool))
    return StepTerms(mo=coarse(n_r), dual=rng.random(n_r) < 0.3, g=coarse(1 + n_rc, n_w, n_b),
                     g_dual=coarse(1 + n_rc, n_w, n_b), fixed=coarse(1 + n_rc, n_r, n_b),
                     seg=np.cumsum(t_n) - t_n, n_ranks=t_n, scale=coarse(n_p, n_b) + 1,
                     dp=dp, opt=coarse(n_p, n_w, n_z), acc=coarse(n_p, n_w, n_b),
                     m=rng.integers(1, 9, n_b) * 1.0)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n_z=st.integers(1, 4), units=st.booleans(),
       negative=st.booleans(), quantile=st.floats(0.0, 1.0))
def test_fused_block_equals_numpy_block(seed, n_z, units, negative, quantile, kernel_calls,
                                        monkeypatch):
    """One block, both paths, a limit anywhere from nothing fits to everything fits; blocks
    carried over from a previous one (rows already in the sink, a best to beat)."""
    rng = np.random.default_rng(seed)
    terms, secs, valid, seg, n_ranks, shape = random_block(rng, n_z, units, negative)
    rt = RuntimeSpec()
    allocs = terms().rows(seg, n_ranks, *np.unravel_index(
        np.arange(np.prod(shape[:3])), shape[:3]))
    ceiling = int(np.quantile(allocs, quantile))
    limit = int(cells.peak_total(ceiling, rt.allocator_slack_pct, rt.cuda_context_bytes))
    assert alloc_ceiling(limit, rt.allocator_slack_pct, rt.cuda_context_bytes) >= ceiling
    runs = {}
    for mode in (True, False):
        monkeypatch.setattr(cells, "FUSED", mode)
        sink = Sink(5)
        sink.rows(2)  # a previous block's rows
        kept = assemble(terms(), secs, valid, seg, n_ranks, shape, limit, rt, False, True,
                        sink)
        runs[mode] = kept, sink.result()
    (a, ra), (b, rb) = runs[True], runs[False]
    for k in ("n_rows", "n_evaluated", "n_fits", "n_pruned", "best"):
        assert getattr(a, k) == getattr(b, k), k
    for k in ("flat", "peak_bytes", "seconds"):
        assert np.array_equal(ra[k][2:], rb[k][2:]), k
    assert len(ra["flat"]) == 2 + a.n_rows
    assert kernel_calls or a.n_fits == 0  # something fits: the kernel found it


def test_sink_give_back_names_the_rows_handed_out():
    sink = Sink(4)
    sink.rows(3)
    sink.give_back(2)
    assert sink.n == 1
    with pytest.raises(ValueError, match="k=5 outside 0..1"):
        sink.give_back(5)


def test_warm_up_compiles_the_signature_real_searches_use(kernel_calls):
    """The one-cell warm-up call has the planner's argument types: a real search adds no
    second compilation (which would put a compile on the first search after all)."""
    fused.warm().join()
    assert fused.loaded()
    spec = PlanSpec(model=model("mixtral-8x7b"), hardware=gpu("h100"), worlds=(32,), seq=4096,
                    global_batch=64)
    evaluate(spec, enumerate_space(spec))
    assert kernel_calls and len(fused._KERNEL.signatures) == 1


def test_a_one_shot_search_never_loads_numba():
    """`memledger plan` in a fresh process stays on numpy: the ~0.6 s load is not paid."""
    import subprocess
    import sys
    code = ("import sys; from memledger.cli import main\n"
            "try: main(['plan', '--model', 'llama3-8b', '--world', '16', '--seq', '2048', "
            "'--global-batch', '32'])\nexcept SystemExit as e: assert not e.code, e.code\n"
            "assert 'numba' not in sys.modules, 'numba loaded'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_failed_load_leaves_searches_on_numpy(monkeypatch):
    """numba missing (or unable to compile here): the background load records why, nothing is
    raised into the app, and searches run on numpy with the same answer."""
    import builtins
    real_import = builtins.__import__

    def no_numba(name, *args, **kwargs):
        if name == "numba":
            raise ImportError("No module named 'numba'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_numba)
    monkeypatch.setattr(fused, "_KERNEL", None)
    monkeypatch.setattr(fused, "failure", None)
    fused.warm().join()
    assert not fused.loaded() and fused.failure == "ImportError: No module named 'numba'"
    spec = PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(16,), seq=2048,
                    global_batch=32)
    assert evaluate(spec, enumerate_space(spec)).n_fits > 0
