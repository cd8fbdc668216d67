"""Claims on a compiled torchtitan 2024-12 block's forward under full AC
(memledger.ledger.activations.titan_block_forward): golden working-set peaks from the block's
op order, every tensor freed, the scope, and what the reserved replay does with it."""
from __future__ import annotations

import dataclasses

from memledger.ledger import build_ledger
from memledger.ledger.activations.titan_block_forward import applies, forward_ops, live_peak
from memledger.ledger.reserved import replay
from memledger.validation.published_titan import load, specs

ROWS = {r["id"]: r for r in load()}
MIB = 2**20


def _specs(row_id, **rt_kw):
    m, p, t, rt = specs(ROWS[row_id]["memledger"])
    return m, p, t, dataclasses.replace(rt, **rt_kw)


def test_70b_tp8_float8_block_peaks_in_the_mlp():
    """T4 (131,072 tokens, TP 8, float8): the residual T/tp·h bf16, w1's and w3's outputs
    (T·f bf16 each, f = 28672/8) and the float8 all-gathered input T·h — 3,072 MiB."""
    m, p, t, _ = _specs("T4 70b fsdp32 tp8")
    tokens, h, f = 131072, 8192, 3584
    want = 2 * tokens // 8 * h + 2 * 2 * tokens * f + tokens * h
    assert live_peak(forward_ops(m, t, p, float8=True)) == want == 3072 * MIB
    # bf16 all-gather without float8: the gathered input doubles (the fp8 casts go)
    assert live_peak(forward_ops(m, t, p, float8=False)) == want + tokens * h


def test_ring_forward_holds_the_all_gathered_kv():
    """T6 CP 8 (32,768 local tokens, 16 local heads after repeat_kv, Kv = 128 MiB per k or v):
    rope'd q and the repeated k, v (3 Kv), cat(k, v) (2 Kv) and its all-gather (8 × 2 Kv), the
    first step's output (Kv) and fp32 logsumexp, the fp32 running output (2 Kv)."""
    m, p, t, _ = _specs("T6 405b pp8 fsdp1 cp8 256k")
    kv = 2 * 32768 * 16 * 128
    want = (3 + 2 + 16 + 1 + 2) * kv + 4 * 16 * 32768
    assert live_peak(forward_ops(m, t, p, float8=True)) == want
    m1, p1, t1, _ = _specs("T6 405b pp8 fsdp8 cp1 32k")  # the same local tokens, no ring
    assert live_peak(forward_ops(m1, t1, p1, float8=True)) == 1472 * MIB < want


def test_every_tensor_is_freed_once():
    for row_id in ("T2 8b fsdp1 cp8 256k", "T4 70b fsdp32 tp8", "T6 405b pp8 fsdp2 cp4 128k"):
        m, p, t, _ = _specs(row_id)
        for fp8 in (True, False):
            ops = forward_ops(m, t, p, float8=fp8)
            allocated = sum(1 for n in ops if n > 0)
            freed = sorted(~n for n in ops if n <= 0)
            assert freed == list(range(allocated)), row_id


def test_scope_is_the_era_read_compiled_and_fully_checkpointed():
    m, p, t, rt = _specs("T4 70b fsdp32 tp8")
    assert applies(m, t, rt)
    assert not applies(m, t, dataclasses.replace(rt, torchtitan_version="0.3"))
    assert not applies(m, t, dataclasses.replace(rt, torch_compile=False))
    assert not applies(m, dataclasses.replace(t, recompute="op"), rt)
    led = build_ledger(m, p, t, dataclasses.replace(rt, torchtitan_version="0.3"))
    assert led.peak.shape.t_fwd_layer == 0 and not led.peak.shape.fwd_layer_ops


def test_forward_segments_stay_cached_beside_the_loss():
    """T4's peak is the loss backward (three 7.8 GiB fp32 tensors): no block of the layers'
    forward working set (≤ 2 GiB each) can hold one, so the replay's reserved rises by at least
    the set's peak; the allocated peak stays the loss's."""
    led = build_ledger(*_specs("T4 70b fsdp32 tp8"))
    rank = led.peak
    whole = rank.replay_shape  # the replay walks the loss-side transients whole
    without = dataclasses.replace(rank, replay_shape=type(whole)(
        dataclasses.replace(whole.get(), t_fwd_layer=0, fwd_layer_ops=())))
    a, b = replay(rank), replay(without)
    assert rank.shape.t_fwd_layer == 3072 * MIB
    assert a.max_reserved - b.max_reserved >= rank.shape.t_fwd_layer
    assert rank.peak_event.phase == "loss-backward"
