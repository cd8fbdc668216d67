"""The planner's per-search tables computed with fewer calls give the numbers of one call per
item: `acts.act_arrays_by_cp` (every cp of a tp as one [cp, etp, b] array) equals one
`_columns` / `_a2a` evaluation per cp, on the vectorised path (megatron) and on the per-pair
fallback (hf profiles branch on the micro-batch)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memledger import gpu, model
from memledger.planner import PlanSpec
from memledger.planner.memory import acts
from memledger.specs.loop import built_model, resolve_loop

ETPS = np.array([1, 2, 4])
EPS = [1, 2, 8, 16]
BS = np.array([1, 2, 3, 4, 6, 8, 12])
CPS = [1, 2, 4, 8]


def _setup(name, profile="megatron"):
    spec = PlanSpec(model=model(name), hardware=gpu("h100"), worlds=(64,), seq=4096,
                    global_batch=96, profile=profile)
    t, rt = spec.base_train(), spec.runtime
    loop = resolve_loop(rt, t.profile)
    return built_model(spec.model, loop), t, rt, loop.loss


@pytest.mark.parametrize("name,profile,tp", [("deepseek-v3", "megatron", 4),
                                             ("llama3-8b", "megatron", 2),
                                             ("mixtral-8x7b", "megatron", 1),
                                             ("llama3-8b", "hf", 1)])
def test_every_cp_at_once_equals_one_cp_at_a_time(name, profile, tp):
    m, t, rt, loss = _setup(name, profile)
    together = acts.act_arrays_by_cp(m, t, rt, tp, CPS, ETPS, EPS, BS, sp=tp > 1)
    assert sorted(together) == CPS
    for cp in CPS:
        one = acts._one_cp(m, t, tp, cp, ETPS, BS, loss, tp > 1)  # the per-cp evaluation
        got = together[cp]
        for kind in acts.KINDS:
            for rc in ("none", "selective"):
                np.testing.assert_array_equal(got.keep[kind, rc], one["keep", kind, rc])
            np.testing.assert_array_equal(got.full[kind], one["full", kind])
        for k in ("layer_input", "first", "last", "logits", "logits_fwd", "bwd"):
            np.testing.assert_array_equal(getattr(got, k), one[k][0], err_msg=k)
        for e in (x for x in EPS if x > 1 and m.moe):
            scalar = [sum(i.bytes for i in acts.comm.moe_items(
                m, acts.VecParallel(tp=tp, cp=cp, ep=e, sp=tp > 1),
                acts.VecTrain(t, micro_batch=int(b)), rt)) for b in BS]
            np.testing.assert_array_equal(got.a2a[e], scalar)
        assert (not m.moe) or set(got.a2a) == {2, 8, 16}


def test_width_buffers_one_call_per_communicator_pattern_equal_one_call_per_width():
    from memledger.planner.memory.coeffs import _vp, buffer_bytes, width_buffers
    from memledger.specs.runtime import RuntimeSpec
    rng = np.random.default_rng(13)
    runtimes = [RuntimeSpec(), RuntimeSpec(grad_buckets="deepspeed"),
                RuntimeSpec(grad_buckets="deepspeed", overlap_comm=False)]
    t = PlanSpec(model=model("deepseek-v3"), hardware=gpu("h100"), worlds=(64,), seq=4096,
                 global_batch=96).base_train()
    n_patterns = set()
    for _ in range(60):
        tp, pp, cp, dp = (int(x) for x in 2 ** rng.integers(0, 4, 4))
        dense = tp * cp * dp
        folds = [(e, x) for e in (1, 2, 4, 8, 16, 64) for x in (1, 2, 4)
                 if dense % (e * x) == 0]
        ep, etp = (np.array(c) for c in zip(*folds))
        for rt in runtimes:
            got = width_buffers(t, rt, tp, pp, cp, dp, ep, etp, tp > 1)
            each = [buffer_bytes(_vp(tp, pp, cp, dp, e, x, sp=tp > 1), t, rt)
                    for e, x in zip(ep.tolist(), etp.tolist())]  # one scalar call per width
            np.testing.assert_array_equal(got, each)
            n_patterns.add(len(np.unique(got)))
    assert max(n_patterns) >= 3  # the widths do differ: the test compares real variety


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(1, 5000), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_top_k_from_a_sampled_cut_is_the_prefix_of_the_full_order(k, n, distinct, seed):
    """Plan.top partitions an even sample for its cut: the same k configurations, in the same
    order (ties of time broken by peak, then by position), as sorting everything."""
    from memledger.planner.sweep.blocks import Evaluated
    from memledger.planner.answer.result import Plan
    rng = np.random.default_rng(seed)
    secs = rng.integers(1, distinct + 1, n) / 7.0  # few distinct times: many ties
    peak = rng.integers(0, 3, n).astype(np.int64)
    spec = PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8,), seq=4096,
                    global_batch=8)

    def fresh():
        return Plan(spec, Evaluated(seconds=secs, peak_bytes=peak, n_fits=n), 0, 0)
    assert fresh().top(k).tolist() == fresh().order[:k].tolist()


def test_a_sink_smaller_than_the_answer_grows_and_keeps_every_row_in_order(monkeypatch):
    """The kept rows are written in place into preallocated columns (planner/sweep/sink.py); when a
    search keeps more than were reserved, the columns grow and the answer is unchanged."""
    from memledger.planner import plan
    from memledger.planner.sweep import sink
    spec = PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(16,), seq=4096,
                    global_batch=64)
    whole = plan(spec)
    monkeypatch.setattr(sink, "CAP", 7)  # grows 7 → 14 → ... over many blocks
    grown = plan(spec)
    assert grown.n_fits == whole.n_fits > 100
    for k in ("block_id", "flat", "peak_bytes", "seconds"):
        np.testing.assert_array_equal(getattr(grown.evaluated, k), getattr(whole.evaluated, k))
    np.testing.assert_array_equal(grown.order, whole.order)


def test_sink_rows_are_views_written_in_place_and_survive_growth():
    from memledger.planner.sweep.sink import Sink
    s = Sink(3)
    a = s.rows(2)
    a["flat"][...] = [5, 6]
    b = s.rows(4)  # beyond the 3 reserved: grows, keeps 5, 6
    b["flat"][...] = [7, 8, 9, 10]
    assert s.result()["flat"].tolist() == [5, 6, 7, 8, 9, 10]
    assert len(s.result()["seconds"]) == 6


def _rows_group_by_group(index, widths, t, zs, sp):
    """The static row tables with one call of each row function per parameter group."""
    from memledger.ledger.static.rows import ROW_FUNCS, Held
    from memledger.planner.memory.coeffs import _vp
    tp, pp, cp, dp, ep, etp = widths
    out = {}
    for row, fn in ROW_FUNCS.items():
        for z in zs:
            table = np.zeros((len(cp), len(index)), np.int64)
            for (g, inst), col in index.items():
                table[:, col] = fn(Held("", g, np.array([[inst]])), _vp(tp, pp, cp, dp, ep, etp,
                                                                          zero=z, sp=sp), t)[0][:, 0]
            out[row, z] = table
    return out


@pytest.mark.parametrize("name", ["deepseek-v3", "mixtral-8x7b", "llama3-8b"])
@pytest.mark.parametrize("precision,optimizer", [("megatron", "adamw"), ("fp8", "adafactor"),
                                                 ("amp", "muon"), ("bf16", "adam8bit")])
def test_row_tables_by_group_kind_equal_one_call_per_group(name, precision, optimizer):
    """coeffs._row_tables evaluates the groups of one kind (shard, matrix, fp32) as one
    `VecGroup`; every (group, instances) column is the group's own call's bytes."""
    from memledger.ledger.pipeline.placement import stage_placement
    from memledger.ledger.static.held import held_groups
    from memledger.planner.memory.coeffs import _pairs, _row_tables
    from memledger.specs.parallel import ParallelSpec
    spec = PlanSpec(model=model(name), hardware=gpu("h100"), worlds=(64,), seq=4096,
                    global_batch=96, precision=precision, optimizer=optimizer)
    t = spec.base_train()
    loop = resolve_loop(spec.runtime, t.profile)
    m = built_model(spec.model, loop)
    p = ParallelSpec(tp=2, pp=2, sp=True, layout=(m.n_layers // 2, m.n_layers - m.n_layers // 2))
    helds = [held_groups(m, p, t, stage_placement(m, p, r), loop) for r in range(2)]
    index, _, _ = _pairs(helds)
    cp, dp = np.array([[1], [2], [4], [1]]), np.array([[8], [4], [2], [4]])
    ep, etp = np.array([[1], [4], [8], [2]]), np.array([[1], [2], [1], [2]])
    widths = (2, 2, cp, dp, ep, etp)
    sp = True
    got, want = _row_tables(index, widths, t, [0, 1, 2, 3], sp), _rows_group_by_group(
        index, widths, t, [0, 1, 2, 3], sp)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=str(k))
    assert len({g.shard for g, _ in index}) >= 2  # several kinds side by side


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(1, 3))
def test_cell_rows_are_the_max_over_ranks_of_f_plus_sf_and_ss(seed, n_z, n_pipes):
    """cells.RankTerms.rows applies SS only where it exceeds every rank's SF (F ≥ 0 makes it
    moot elsewhere): the same as max over the pipe's ranks of max(F + SF, SS), with SS drawn
    above SF on some cells."""
    from memledger.planner.sweep.cells import RankTerms
    rng = np.random.default_rng(seed)
    n_ranks = rng.integers(1, 4, n_pipes)
    seg = np.cumsum(n_ranks) - n_ranks
    n_r, n_w, n_b, n_rc = int(n_ranks.sum()), 3, 4, 2
    f = rng.integers(0, 1000, (n_r, n_w, n_b, n_rc))
    sf = rng.integers(0, 5000, (n_r, n_w, n_z))
    ss = sf + rng.integers(-3000, 3000, (n_r, n_w, n_z))  # above SF here and there
    terms = RankTerms(f, sf, ss)
    cells = np.arange(n_pipes * n_w * n_z)
    pw, z = np.divmod(cells, n_z)
    p, w = np.divmod(pw, n_w)
    got = terms.rows(seg, n_ranks, p, w, z)
    for k in range(len(cells)):
        ranks = range(seg[p[k]], seg[p[k]] + n_ranks[p[k]])
        want = np.maximum.reduce([np.maximum(f[r, w[k]].reshape(-1) + sf[r, w[k], z[k]],
                                             ss[r, w[k], z[k]]) for r in ranks])
        np.testing.assert_array_equal(got[k], want)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.booleans())
def test_discounted_rows_written_into_combines_table_equal_a_fresh_table(seed, n_z, negative):
    """RankTerms' FSDP-discounted rows go into the room evaluate.combine leaves after F (one
    copy per ZeRO stage with units; no concatenation): every row a (stage, rank, width) reads
    is the one a table built from scratch gives — also when a negative at-loss makes every
    stage take the rule and the room is too small (a fresh table then)."""
    from memledger.planner.sweep.cells import RankTerms
    rng = np.random.default_rng(seed)
    n_r, n_w, n_b, n_rc = 4, 3, 2, 2
    f = rng.integers(0, 1000, (n_r, n_w, n_b, n_rc))
    sf = rng.integers(0, 5000, (n_r, n_w, n_z))
    units = rng.integers(0, 300, (n_r, n_w, n_z)) * (rng.random((1, 1, n_z)) < 0.6)
    low = -50 if negative else 0
    phases = [(rng.integers(0, 400, (n_r, 1, n_b)), rng.integers(low, 600, (n_r, n_w, n_b)))
              for _ in range(n_rc)]
    room = 1 + int(units.any(axis=(0, 1)).sum())
    table = np.empty((room * n_r * n_w, n_b * n_rc), np.int64)
    table[:n_r * n_w] = f.reshape(n_r * n_w, -1)
    fv = table[:n_r * n_w].reshape(f.shape)
    a = RankTerms(fv, sf, sf, units, phases, table=table)._sources()
    b = RankTerms(f.copy(), sf, sf, units, phases)._sources()
    for z in range(n_z):
        for r in range(n_r):
            rows = [x[1][x[2][z], r] + np.arange(n_w) for x in (a, b)]
            np.testing.assert_array_equal(a[0][rows[0]], b[0][rows[1]])


def test_block_of_each_kept_row_follows_from_the_per_block_counts():
    """No per-row block id is written (planner/sweep/sink.py): `Evaluated.block_id` is rebuilt from
    each block's kept-row count, and `columns(rows)` finds a row's block by search — the same
    decoded rows as decoding every row and picking."""
    from memledger.planner import plan
    spec = PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(16,), seq=4096,
                    global_batch=64)
    ev = plan(spec).evaluated
    ids = ev.block_id
    assert len(ids) == len(ev.flat) > 100 and len(ev.blocks) > 3
    assert (np.diff(ids) >= 0).all() and np.bincount(ids).tolist() == ev.block_rows
    ends = np.cumsum(ev.block_rows)  # every block's first and last row, and some between
    rows = np.unique(np.concatenate([ends - 1, ends[:-1], [0],
                                     np.random.default_rng(0).choice(len(ev.flat), 50)]))
    some = ev.columns(rows)
    for i, row in enumerate(rows.tolist()):
        want = ev.blocks[ids[row]].decode(np.array([ev.flat[row]]))
        assert {k: some[k][i] for k in want} == {k: v[0] for k, v in want.items()}
