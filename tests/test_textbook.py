"""Seed 2's 16N ledger and the ZeRO stages, against the published figures."""
from memledger.costs.textbook import SEED_EXAMPLES, static_bytes, technique_columns, zero_bytes
from memledger.units import GIB


def test_seed2_7b_static_ledger_is_104p3_gib():
    rows = static_bytes(7 * 10**9)
    assert rows == {"weights": 14 * 10**9, "gradients": 14 * 10**9, "optimizer": 84 * 10**9}
    assert f"{sum(rows.values()) / GIB:.1f}" == "104.3"


def test_seed2_70b_static_ledger_is_1043p1_gib():
    assert f"{sum(static_bytes(70 * 10**9).values()) / GIB:.1f}" == "1043.1"


def test_optimizer_states_are_three_quarters_of_the_static_ledger():
    rows = static_bytes(10**9)
    assert rows["optimizer"] * 4 == sum(rows.values()) * 3


def test_zero_paper_figure1_7p5b_on_64_gpus():
    """ZeRO (arXiv 1910.02054) Figure 1, Ψ = 7.5e9, N_d = 64, K = 12, decimal GB."""
    psi, d = 7_500_000_000, 64
    gb = {s: sum(zero_bytes(psi, d, s).values()) / 1e9 for s in range(4)}
    assert round(gb[0], 1) == 120.0
    assert round(gb[1], 1) == 31.4
    assert round(gb[2], 1) == 16.6
    assert round(gb[3], 1) == 1.9


def test_each_technique_column_cuts_only_its_own_ledger():
    cols = technique_columns(7 * 10**9, 8, act_mixed=10**9, act_fp32=2 * 10**9, n_layers=32)
    fp32, mixed, z1, z2, z3, ckpt = (c.rows for c in cols)
    assert sum(fp32[r] for r in ("weights", "gradients", "optimizer")) == 16 * 7 * 10**9
    assert mixed["weights"] == fp32["weights"] // 2 and mixed["activations"] == 10**9
    assert z1["optimizer"] == mixed["optimizer"] // 8 and z1["gradients"] == mixed["gradients"]
    assert z2["gradients"] == mixed["gradients"] // 8 and z2["weights"] == mixed["weights"]
    assert z3["weights"] == mixed["weights"] // 8
    assert ckpt["activations"] == 218_750_000  # 1e9 · 7/32, exact
    assert {k: v for k, v in ckpt.items() if k != "activations"} == \
           {k: v for k, v in z3.items() if k != "activations"}


def test_seed_examples_are_the_seed_scripts_inputs():
    assert {k: v[1:] for k, v in SEED_EXAMPLES.items()} == {
        "seed-7b": (7 * 10**9, 32), "seed-70b": (70 * 10**9, 80)}
