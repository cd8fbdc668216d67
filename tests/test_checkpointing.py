"""Gradient checkpointing arithmetic: seed 2's printed numbers and Chen et al. 2016's √n."""
import math

from hypothesis import given
from hypothesis import strategies as st

from memledger.costs import checkpointing as ck


def test_seed2_32_layers_keep_7_checkpoints_about_22_percent():
    assert ck.seed_checkpoints(32) == 7
    assert ck.seed_percent(32) == 22
    assert abs(ck.seed_fraction(32) - 7 / 32) < 1e-12


def test_seed2_80_layers_keep_10_checkpoints_about_13_percent():
    assert ck.seed_checkpoints(80) == 10
    assert ck.seed_percent(80) == 13  # 12.5 rounds half up, as the seed's toFixed(0) prints it


def test_seed_count_is_ceil_sqrt_plus_one():
    for n in range(1, 2000):
        assert ck.seed_checkpoints(n) == math.ceil(math.sqrt(n)) + 1


@given(st.integers(min_value=1, max_value=5000))
def test_chen_optimum_costs_about_two_sqrt_n(n):
    """Chen et al. 2016 (arXiv 1604.06174) §4: k + n/k is minimised near k = √n, at ≈ 2√n."""
    best = ck.optimum(n)
    peak = ck.segment_peak_layers(n, best)
    assert peak <= 2 * math.sqrt(n) + 2
    assert peak == min(ck.segment_peak_layers(n, k) for k in range(1, n + 1))
    assert abs(best - math.sqrt(n)) <= math.sqrt(n) / 2 + 1


def test_curve_ends_at_storing_everything():
    pts = ck.curve(32)
    assert [p.checkpoints for p in pts] == list(range(1, 33))
    assert pts[-1].peak_share(32) == 1.0
    assert pts[0].peak_layers == 32  # one checkpoint: the whole chain is one segment


def test_checkpointed_bytes_scale_the_full_figure_by_the_seed_share():
    assert ck.checkpointed_bytes(32 * 10**9, 32) == 7 * 10**9
    assert ck.checkpointed_bytes(80, 80) == 10
