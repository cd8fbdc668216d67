"""The planner's peak under on-demand gradients (zero_grad(set_to_none=True)): the closed form
of `memledger.ledger.timeline`'s walked events for a 1F1B rank, on the planner's arrays.

Per rank (one stage, n micro-batches in flight at its first backward, m per step), with
S0 = static rows without gradients, C = buffers, A = the staircase, T_F / T_loss / T_layer the
forward working set, the loss-backward and the per-layer (recompute) transients:
  warm-up end        S0 + C + A + T_F                       (no gradient exists yet)
  loss backward      S0 + C + A + G_other + T_loss           (last stage)
  layer k backward   S0 + C + A − L + G_other + G_head + Σ_{i<k}(g_i − a_i) + g_k + T_layer
                     (layers in reverse; linear within a run of one kind: its ends suffice;
                     L: the last stage's tensors of the micro-batch, freed by the loss backward)
  steady state       S0 + G + C + max(A + T_F, A + T_loss, A − L + T_layer)   if m > n
  second backward    S0 + G + C + A − a_mb + max(T_loss, T_layer − L)         if m = n ≥ 2
  optimizer step     S0 + G + step temporaries
Interleaved and V-shaped ranks hold several stages; their walked timeline has no vectorised
form here, so the planner leaves those shapes out under an on-demand loop.

Mirrors memledger/ledger/timeline.py (the walked on-demand events); held equal by
tests/test_planner_equality.py::test_vectorised_peak_equals_scalar_ledger_byte_for_byte
(its on-demand cases).
"""
from __future__ import annotations

import numpy as np

SECTIONS = ("dense layers", "moe layers", "head", "mtp", "embedding")


def backward_corners(kinds: list[str]) -> tuple[tuple[int, int, str], ...]:
    """(dense layers before, MoE layers before, kind) at the ends of each run of one kind, in
    backward order (last layer first) — where the per-layer backward level can peak."""
    rev = kinds[::-1]
    out, nd, nm = [], 0, 0
    for k, kind in enumerate(rev):
        if k == 0 or k == len(rev) - 1 or rev[k - 1] != kind or rev[k + 1] != kind:
            out.append((nd, nm, kind))
        nd, nm = nd + (kind == "dense"), nm + (kind == "moe")
    return tuple(out)


def section_grads(raw: dict, index: dict, unique: list, zs) -> dict:
    """{section: [W, U, z]} gradient bytes of each unique held list, by section."""
    n_w = next(iter(raw.values())).shape[0]
    out = {s: np.zeros((n_w, len(unique), len(zs)), np.int64) for s in SECTIONS}
    for j, held in enumerate(unique):
        for h in held:
            col = index[(h.group, h.instances)]
            for k, z in enumerate(zs):
                out[h.section][:, j, k] += raw["gradients", z][:, col]
    return out


def _per_layer(total: np.ndarray, n: np.ndarray) -> np.ndarray:
    """[R, W, Z] per-layer bytes of a section held n times ([R])."""
    return total // np.maximum(n, 1)[:, None, None]


def on_demand_alloc(static, fixed, step, ba, lD, lM, fmb, lml, n_dense, n_moe, rcs, life):
    """[R, W, Z, B, RC] peak allocated of every candidate rank under on-demand gradients."""
    g = {k: v.transpose(1, 0, 2) for k, v in life["grads"].items()}  # [R, W, Z]
    G = sum(g.values())
    gD, gM = _per_layer(g["dense layers"], n_dense), _per_layer(g["moe layers"], n_moe)
    head = g["head"] + g["mtp"]
    S0 = static - G
    n_in, m_b, last, corners = life["n_mb"], life["m_b"], life["last"], life["corners"]
    first = fmb > 0  # [R, B]
    comm = fixed[..., None] + (ba.pp_buf[None, None, :] + (n_moe > 0)[:, None, None] * ba.a2a[None])[:, :, None]
    has_layers = (n_dense + n_moe) > 0
    parts = []
    for rc in rcs:
        cast_d, cast_m, cast_last = ba.autocast[rc]
        if rc == "full":
            aD = aM = np.broadcast_to(ba.layer_input[None], (len(ba.const), len(ba.layer_input)))
            cache_d, cache_m = ba.cast_cache
            t_layer = np.maximum((n_dense > 0)[:, None, None] * ba.full["dense"][None],
                                 (n_moe > 0)[:, None, None] * ba.full["moe"][None])  # [R, W, B]
            t_fwd = ((lml > 0) * ba.logits_fwd)[:, None, :] + \
                (n_dense * cache_d + n_moe * cache_m)[:, None, None]
        else:
            aD, aM = ba.keep["dense", rc], ba.keep["moe", rc]
            t_layer = np.zeros((len(lD), 1, 1), np.int64)
            t_fwd = ((lml > 0) * ba.logits_fwd)[:, None, :]
        aD, aM = aD + cast_d, aM + cast_m  # [W, B]
        t_loss = (lml > 0)[:, None, :] * ba.logits[None, None, :]  # [R, 1, B]
        acts = (lD[:, None, :] * aD[None] + lM[:, None, :] * aM[None] + (fmb * ba.first)[:, None, :]
                + (lml * (ba.last + cast_last))[:, None, :])  # [R, W, B]
        a_mb = (n_dense[:, None, None] * aD[None] + n_moe[:, None, None] * aM[None]
                + (first * ba.first)[:, None, :] + ((lml > 0) * (ba.last + cast_last))[:, None, :])
        base = S0[..., None] + comm + acts[:, :, None, :]  # [R, W, Z, B]
        freed = ((lml > 0) * (ba.last + cast_last))[:, None, :]  # [R, 1, B]
        t_net = t_layer - freed
        t_all = np.maximum(np.maximum(t_fwd, t_loss), t_net)[:, :, None, :]
        warm = base + t_fwd[:, :, None, :]
        other = (G - gD * n_dense[:, None, None] - gM * n_moe[:, None, None] - g["embedding"]
                 - head)[..., None]
        best = np.maximum(warm, np.where(last[:, None, None, None],
                                         base + other + t_loss[:, :, None, :], warm))
        start = base + other + head[..., None] - freed[:, :, None, :]
        for j in range(max(len(c) for c in corners)):
            nd = np.array([c[min(j, len(c) - 1)][0] if c else 0 for c in corners], np.int64)
            nm = np.array([c[min(j, len(c) - 1)][1] if c else 0 for c in corners], np.int64)
            dense = np.array([c[min(j, len(c) - 1)][2] == "dense" if c else False for c in corners])
            gk = np.where(dense[:, None, None], gD, gM)[..., None]
            lvl = (start + nd[:, None, None, None] * (gD[..., None] - aD[None, :, None, :])
                   + nm[:, None, None, None] * (gM[..., None] - aM[None, :, None, :]) + gk
                   + t_layer[:, :, None, :])
            best = np.maximum(best, np.where(has_layers[:, None, None, None], lvl, best))
        full = base + G[..., None]
        restore = full + t_all
        second = full - a_mb[:, :, None, :] + np.maximum(
            t_loss, np.where(has_layers[:, None, None], t_net, t_loss))[:, :, None, :]
        more = (m_b[None, :] > n_in)[:, None, None, :]
        again = ((m_b[None, :] == n_in) & (n_in >= 2))[:, None, None, :]
        fb = np.where(more, restore, np.where(again, np.maximum(best, second), best))
        parts.append(np.maximum(fb, (static + step)[..., None]))
    return np.stack(parts, -1)
