"""The step-time model ranks layouts; it must be monotone in the obvious ways."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memledger import MODELS, ParallelSpec, TrainSpec, gpu, model
from memledger.costs.collectives import (NETWORK_BUS_EFFICIENCY, NVLINK_BUS_EFFICIENCY,
                                        all_to_all_seconds, inside_node, link, rails)
from memledger.costs.steptime import link_bw, selective_flops_per_token, step_seconds
from memledger.ledger.activations import get_profile
from memledger.model.flops import layer_forward_flops_per_token
from memledger.planner import Constraints, PlanSpec, plan

pos = st.floats(min_value=1e-6, max_value=1e3)
frac = st.floats(min_value=0.0, max_value=0.95)


@given(pos, pos, pos, frac, frac, st.integers(1, 512), pos)
def test_a_bigger_bubble_or_more_compute_is_never_faster(compute, extra, comm, b1, b2, m, sync):
    lo, hi = sorted((b1, b2))
    base = dict(comm_s=comm, micro_batches=m, dp_sync_s=sync)
    assert step_seconds(compute_s=compute, bubble=lo, **base) <= step_seconds(
        compute_s=compute, bubble=hi, **base)
    assert step_seconds(compute_s=compute, bubble=lo, **base) <= step_seconds(
        compute_s=compute + extra, bubble=lo, **base)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("profile", ["megatron", "paper"])
def test_selective_recompute_costs_at_most_a_full_forward(name, profile):
    m = model(name)
    prof = get_profile(profile)
    t, p = TrainSpec(seq=4096, profile=profile), ParallelSpec()
    for kind in ("dense", "moe") if m.moe else ("dense",):
        sel = selective_flops_per_token(m, prof.layer(m, kind, t, p), prof.selective)
        assert 0 < sel <= layer_forward_flops_per_token(m, kind, t.seq)


def test_more_recompute_is_never_faster_in_the_plan():
    spec = PlanSpec(model=model("mixtral-8x7b"), hardware=gpu("h200"), worlds=(16,), seq=4096,
                    global_batch=32, constraints=Constraints(max_vpp=2))
    result = plan(spec, keep_all=True)
    c = result.evaluated.columns()
    keys = np.stack([c[k] for k in ("world", "tp", "pp", "vpp", "ep", "etp", "cp", "dp",
                                    "schedule", "zero", "micro_batch")], 1)
    _, group = np.unique(keys, axis=0, return_inverse=True)
    secs = np.full((group.max() + 1, 3), np.nan)
    secs[group.ravel(), c["recompute"]] = result.evaluated.seconds  # none, selective, full
    assert np.all(secs[:, 0] <= secs[:, 1]) and np.all(secs[:, 1] < secs[:, 2])


def test_larger_pipeline_bubble_is_slower_for_the_same_work():
    """Same layout, 1F1B: fewer micro-batches of the same total tokens → bigger bubble
    (p−1)/(m+p−1) → slower (ZeRO-1: no per-micro-batch weight gathers)."""
    spec = PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8,), seq=4096,
                    global_batch=64, constraints=Constraints(tp=1, pp=8, schedule="1f1b", zero=1,
                                                             recompute="full"))
    result = plan(spec, keep_all=True)
    rows = sorted(result.rows(range(result.n_evaluated)), key=lambda r: r["micro_batches"])
    secs = [r["seconds"] for r in rows]
    assert len(rows) >= 4 and secs == sorted(secs, reverse=True)


def test_groups_inside_a_node_use_nvlink_and_larger_ones_the_network():
    hw = gpu("h100")
    assert link_bw(hw, 8, 8) == hw.nvlink_bw and link_bw(hw, 16, 8) == hw.network_bw
    assert link_bw(gpu("mi300x"), 2, 8) == gpu("mi300x").pcie_bw  # no NVLink: PCIe


def test_a_group_span_that_does_not_divide_the_node_crosses_it():
    """tp 3 or 6 on 8-GPU nodes: groups tile the ranks in blocks of 3 (6), so ranks 6-8
    (6-11) straddle the first node boundary and the collective waits for the network."""
    hw = gpu("a100-80gb")
    assert [bool(inside_node(s, 8)) for s in (1, 2, 3, 4, 6, 8, 16)] == [
        True, True, False, True, False, True, False]
    assert link_bw(hw, 3, 8) == hw.network_bw and link_bw(hw, 4, 8) == hw.nvlink_bw
    beta3, alpha3 = link(hw, np.array([3, 4]), 8)
    assert beta3[0] < beta3[1] and alpha3[0] > alpha3[1]


def test_tensor_parallel_across_nodes_would_be_slower_than_inside():
    """With 4 GPUs per node, tp=8 spans two nodes: same FLOPs, slower link."""
    kw = dict(model=model("llama3-70b"), hardware=gpu("h100"), worlds=(64,), seq=4096,
              global_batch=64, constraints=Constraints(tp=8, pp=4, cp=1, zero=1,
                                                       recompute="none", micro_batch=1,
                                                       schedule="1f1b"))
    inside = plan(PlanSpec(gpus_per_node=8, **kw), keep_all=True)
    across = plan(PlanSpec(gpus_per_node=4, constraints=Constraints(
        **{**kw.pop("constraints").__dict__, "max_tp": 8}), **kw), keep_all=True)
    assert inside.n_evaluated == across.n_evaluated == 1
    assert across.evaluated.seconds[0] > inside.evaluated.seconds[0]


def test_a_collective_across_nodes_stripes_over_the_nics_of_its_members_in_a_node():
    """A dp group of stride 1 over 4 nodes has 8 members per node: its channels use 8 NICs
    (up to what links them inside the node); stride 2 → 4 NICs; stride 8 (one member per
    node) → 1; a span that straddles nodes unevenly, and point-to-point, stay on one NIC."""
    hw = gpu("a100-80gb")
    one_nic = hw.network_bw * NETWORK_BUS_EFFICIENCY
    nvlink = hw.nvlink_bw * NVLINK_BUS_EFFICIENCY
    assert [int(rails(32, s, 8)) for s in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]
    assert int(rails(12, 1, 8)) == 1 and int(rails(24, 3, 8)) == 1
    beta = lambda span, stride: float(link(hw, span, 8, stride=stride)[0])  # noqa: E731
    assert beta(32, 8) == beta(32, None) == one_nic
    assert beta(32, 2) == 4 * one_nic
    assert beta(32, 1) == 8 * one_nic < nvlink
    mi300x = gpu("mi300x")  # no NVLink: the stripes meet in PCIe, which bounds them
    assert float(link(mi300x, 32, 8, stride=1)[0]) == mi300x.pcie_bw
    assert beta(8, 1) == nvlink  # inside a node: unchanged


def test_an_all_to_all_across_nodes_sends_only_the_other_nodes_share_over_the_nic():
    """ep 16 over two 8-GPU nodes: 8/16 of a rank's rows go to the other node through its own
    NIC while 7/16 go to its node's peers over NVLink; inside a node nothing changes."""
    hw, n_bytes = gpu("h100"), 1e9
    nic, alpha = link(hw, 16, 8)
    nvlink = float(link(hw, 1, 8)[0])
    t = all_to_all_seconds(n_bytes, 16, nic, alpha, local=8, beta_local=nvlink)
    want = 15 * float(alpha) + max(8 / 16 * n_bytes / nic, 7 / 16 * n_bytes / nvlink)
    assert float(t) == pytest.approx(want)
    assert t < all_to_all_seconds(n_bytes, 16, nic, alpha)  # the old charge: 15/16 over the NIC
    inside = all_to_all_seconds(n_bytes, 8, nvlink, 5e-6)
    assert all_to_all_seconds(n_bytes, 8, nvlink, 5e-6, local=1, beta_local=nvlink) == inside
