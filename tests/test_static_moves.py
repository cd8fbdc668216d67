"""Static rows move too (seed 1, 静态三行也能动): ZeRO-Offload, gradient offload, Muon's gather."""
import pytest

from memledger import ParallelSpec, RuntimeSpec, SpecError, TrainSpec, build_ledger, model
from memledger.ledger.build import rank_parts

M, P, T = model("llama3-8b"), ParallelSpec(dp=8, zero=1), TrainSpec(seq=2048)


def test_optimizer_offload_moves_states_to_the_host_and_prices_pcie():
    on, off = build_ledger(M, P, T).ranks[0], build_ledger(M, P, T, RuntimeSpec(optimizer_offload=True)).ranks[0]
    assert off.rows["optimizer"] == 0
    assert off.host.optimizer_bytes == on.rows["optimizer"]
    n = 8_030_261_248 // 8  # Llama-3 8B over ZeRO-1 with dp 8 (vocab 128256 is a multiple of 128)
    assert off.host.grads_down_bytes_per_step == n * 4  # fp32 main-grads down
    assert off.host.params_up_bytes_per_step == n * 2  # bf16 params up
    assert on.peak_total_bytes - off.peak_total_bytes > on.rows["optimizer"]  # slack shrinks too


def test_gradient_offload_keeps_a_two_chunk_double_buffer():
    rt = RuntimeSpec(optimizer_offload=True, grad_offload=True, grad_offload_chunk_params=10**8)
    r = build_ledger(M, P, T, rt).ranks[0]
    assert r.rows["gradients"] == 2 * 10**8 * 4
    assert r.host.gradient_bytes == build_ledger(M, P, T).ranks[0].rows["gradients"]


def test_gradient_offload_alone_is_refused():
    with pytest.raises(SpecError, match="grad_offload.*optimizer_offload"):
        RuntimeSpec(grad_offload=True)


def test_muon_gathers_one_matrix_on_demand_or_all_at_once():
    """Llama-3 8B, tp 2: the largest matrix is gate (or up) 4096 × 14336 = 58,720,256 fp32
    values; all matrices of the 32 layers unsharded: 32 × (25,165,824 + 16,777,216 +
    117,440,512 + 58,720,256) = 6,979,321,856 values. Newton-Schulz on the largest matrix adds
    its fp32 update (main-grad dtype) plus bf16 iterates 2·r·c and Gram matrices 2·4096².
    All are optimizer-step transients, not buffers held during forward/backward."""
    p, t = ParallelSpec(tp=2, dp=4, sp=True, zero=1), TrainSpec(seq=2048, optimizer="muon")
    rc = 4096 * 14336
    ns = 4 * rc + 2 * (2 * rc + 2 * 4096 * 4096)
    assert rank_parts(M, p, t, RuntimeSpec(), 0).step.bytes == 4 * rc + ns
    assert rank_parts(M, p, t, RuntimeSpec(muon_gather="full"), 0).step.bytes == 6_979_321_856 * 4 + ns
    one = build_ledger(M, p, t).ranks[0]
    allm = build_ledger(M, p, t, RuntimeSpec(muon_gather="full")).ranks[0]
    step = lambda r: next(i for i in r.items if i.name.startswith("largest transient"))  # noqa: E731
    assert "muon" not in " ".join(i.name for i in one.row_items("communication"))
    assert "muon full-matrix gather (all matrices)" in step(allm).name
    assert allm.peak_allocated_bytes == allm.static_bytes + 6_979_321_856 * 4 + ns
