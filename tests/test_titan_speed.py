"""The torchtitan harness's speed-ups change no result: FakeTensorMode's dispatch-cache key built
by `titan_speed.fast_cache_keys` equals torch's own, entry for entry, and raises torch's bypass
where torch does; the warm optimizer states equal what torchtitan's `init_optim_state` makes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch._subclasses import fake_tensor as ft  # noqa: E402

from memledger.engine.titan_speed import fast_cache_keys  # noqa: E402


@pytest.fixture(scope="module")
def keys():
    """(fast, torch's) key builders; FakeTensorMode restored afterwards."""
    before = ft.FakeTensorMode._prep_args_for_hash
    fast_cache_keys(torch)
    fast = ft.FakeTensorMode._prep_args_for_hash
    yield fast, fast._torch
    ft.FakeTensorMode._prep_args_for_hash = before


def both(keys, mode, args):
    """Each builder's key entries for `args`, or the bypass reason it raised."""
    out = []
    for build in keys:
        got: list = []
        try:
            build(mode, got, args, ft._CacheKeyState(None), [])
        except ft._BypassDispatchCache as e:
            got = ["bypass", str(e)]
        out.append(got)
    return out


DTYPES = (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64)


@st.composite
def fake_args(draw):
    """A tensor of 0-5 dims, some dims 0 or 1, permuted (channels-last-like strides included),
    sliced to a storage offset, maybe conj / neg / requiring grad — with scalars around it."""
    ndim = draw(st.integers(0, 5))
    shape = draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim))
    dtype = draw(st.sampled_from(DTYPES))
    perm = draw(st.permutations(range(ndim)))
    offset = draw(st.booleans())
    flags = draw(st.sampled_from(("", "conj", "neg", "grad")))
    scalars = draw(st.lists(st.one_of(st.none(), st.booleans(), st.integers(-3, 3),
                                      st.floats(-2, 2, allow_nan=False), st.just(torch.float16),
                                      st.just("mean")), max_size=3))
    return shape, dtype, perm, offset, flags, scalars


@settings(max_examples=150, deadline=None)
@given(fake_args())
def test_the_fast_key_is_torchs_key(keys, case):
    shape, dtype, perm, offset, flags, scalars = case
    with ft.FakeTensorMode() as mode:
        base = torch.empty([s + 1 for s in shape] if offset else shape, dtype=dtype)
        t = base[tuple(slice(1, None) for _ in shape)] if offset and shape else base
        t = t.permute(*perm) if shape else t
        if flags == "conj" and dtype.is_complex:
            t = t.conj()
        elif flags == "neg" and dtype.is_complex:
            t = torch._neg_view(t)
        elif flags == "grad" and dtype.is_floating_point:
            t = t.detach().requires_grad_()
        args = (t, scalars, {"dim": scalars[:1], "out_dtype": dtype}, (t, None))
        fast, slow = both(keys, mode, args)
    assert fast == slow
    assert fast[0] is tuple and fast[1] == "length_4"


def test_torchs_bypasses_are_raised_alike(keys):
    with ft.FakeTensorMode() as mode, ft.FakeTensorMode() as other:
        mine = mode.from_tensor(torch.empty(2, 3))
        theirs = other.from_tensor(torch.empty(2, 3))
    sparse = torch.empty(2, 2).to_sparse()
    for args in ((theirs,), (torch.empty(2),), (lambda: 0,), (sparse,), ([mine, (theirs,)],)):
        fast, slow = both(keys, mode, args)
        assert fast == slow and fast[0] == "bypass", (args, fast, slow)


def test_a_parameter_goes_through_torchs_own_branch(keys):
    with ft.FakeTensorMode() as mode:
        p = torch.nn.Parameter(torch.empty(4, 8))
        fast, slow = both(keys, mode, (p, [p.t()], {"k": p[1:]}))
    assert fast == slow and len(fast) > 40


def test_warm_states_equal_torchtitans_init_optim_state():
    pytest.importorskip("torchtitan.components.optimizer.utils")
    from torchtitan.components.optimizer.utils import init_optim_state

    from memledger.engine.titan_warm import init_states

    def states(init, **kw):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2, bias=False))
        m[1].weight.requires_grad_(False)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, **kw)
        init(opt)
        grads = [p.grad for p in m.parameters()]
        return ({i: {k: (v.dtype, tuple(v.shape), v.device) for k, v in s.items()}
                 for i, s in enumerate(opt.state.values())}, grads)

    for kw in ({}, {"foreach": True}, {"amsgrad": True}):
        ours, theirs = states(init_states, **kw), states(init_optim_state, **kw)
        assert ours == theirs and ours[1] == [None, None, None]
        assert len(ours[0]) == 2  # the frozen weight gets no state in either


def test_a_torch_with_other_metadata_fields_keeps_its_own_key(monkeypatch):
    import memledger.engine.titan_speed as ts
    before = ft.FakeTensorMode._prep_args_for_hash
    if getattr(before, "_memledger", False):
        monkeypatch.setattr(ft.FakeTensorMode, "_prep_args_for_hash", before._torch)
    monkeypatch.setattr(ts, "METADATA_FIELDS", ts.METADATA_FIELDS[:-1])
    fast_cache_keys(torch)
    assert not getattr(ft.FakeTensorMode._prep_args_for_hash, "_memledger", False)
