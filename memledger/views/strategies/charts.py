"""Tables and Plotly figures of the "Strategies" page: storage policies and what they cost.

- `policy_table`: per tensor class on the most loaded rank — bytes per micro-batch as the
  profile stores them, the policy, GPU bytes saved at the peak, and the price in its currency;
- `before_after`: the six rows of the most loaded rank without and with the policy;
- `bandwidth_table`: one row per offloading rank (host or remote), the verdict against the link;
- `levelled_staircase`: per-rank peaks before and after levelling the staircase;
- `advice_sections`: the advisor's four answers (and plan) as short lines of text.
Builders read finished ledgers / verdicts / advice and only convert units for display.
Colours are the dashboard's (`palette`), layout the house style (`charts.house_layout`).
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from memledger.advisor.text import QUANT_PRICE, flops_text, price
from memledger.costs.compute import seconds
from memledger.ledger.items import ROW_LABELS, ROWS
from memledger.units import gib
from memledger.views.peaks import gib_text, peak_label
from memledger.views import safe_text
from memledger.views.figures import GIB_AXIS, describe, house_layout, merge
from memledger.views.palette import CAPACITY_COLOR, ROW_COLORS, ROW_SHORT

BEFORE_COLOR = "#BBBBBB"  # the staircase before levelling, behind the levelled bars


def _price(moves, hw, mfu: int, m: int) -> str:
    flops = sum(mv.recompute_flops_per_micro_batch for mv in moves) * m
    if flops:
        t = f" ≈ {seconds(flops, hw, mfu):.3f} s" if hw else ""
        return f"{flops_text(flops)}/step{t}"
    quant = sorted({q for mv in moves for q in mv.policy.split("+") if q in QUANT_PRICE})
    host = sum(mv.host_bytes_per_micro_batch for mv in moves) * m
    movable = sum(mv.movable_bytes_per_micro_batch for mv in moves) * m
    parts = [QUANT_PRICE[q] for q in quant]
    if host:
        parts.append(f"{gib(host):,.1f} GiB/step to host (PCIe)")
    if movable:
        parts.append(f"≤ {gib(movable):,.1f} GiB/step to later ranks")
    return ", ".join(parts) or "—"


def policy_table(before, after, mfu: int = 40) -> pd.DataFrame:
    """One row per tensor class on the most loaded rank (of `before`)."""
    r = before.most_loaded_rank
    b_moves, a_moves = before.ranks[r].moves, after.ranks[r].moves
    classes = sorted({mv.cls for mv in b_moves if mv.cls != "*"},
                     key=lambda c: -sum(mv.native_bytes * mv.per_micro_batch for mv in b_moves if mv.cls == c))
    rows = []
    for c in classes:
        mine = [mv for mv in a_moves if mv.cls == c]
        native = sum(mv.native_bytes * mv.per_micro_batch for mv in b_moves if mv.cls == c)
        gpu_before = sum(mv.gpu_total for mv in b_moves if mv.cls == c)
        gpu_after = sum(mv.gpu_total for mv in mine)
        rows.append({"tensor class": c, "GiB per micro-batch": gib(native),
                     "policy": ", ".join(sorted({mv.policy for mv in mine})) or "keep",
                     "GiB saved at peak": gib(gpu_before - gpu_after),
                     "cost": _price(mine, after.hardware, mfu, after.train.micro_batches)})
    return pd.DataFrame(rows)


def _target_line(capacity_bytes: int, label: str) -> tuple[dict, dict]:
    y = gib(capacity_bytes)
    line = dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y,
                line=dict(color=CAPACITY_COLOR, width=2, dash="dash"))
    note = dict(x=1, xref="paper", xanchor="left", xshift=4, y=y, yref="y", showarrow=False,
                align="left", text=f"{label}<br>{y:,.1f} GiB", font=dict(color=CAPACITY_COLOR))
    return line, note


def before_after(before, after, capacity_bytes: int | None = None,
                 target_label: str = "target") -> go.Figure:
    """Stacked bars of the six rows on the most loaded rank, without and with the policy."""
    # two lines and never rotated: on a phone "before (pp rank 0)" turned and hit the legend
    labels = [f"before<br>(pp rank {before.peak.pp_rank})", f"after<br>(pp rank {after.peak.pp_rank})"]
    fig = go.Figure()
    for row in ROWS:
        vals = [gib(before.peak.rows[row]), gib(after.peak.rows[row])]
        fig.add_bar(x=labels, y=vals, name=ROW_SHORT[row], marker_color=ROW_COLORS[row],
                    customdata=[before.peak.rows[row], after.peak.rows[row]],
                    hovertemplate=f"{ROW_LABELS[row]}: %{{y:,.2f}} GiB (%{{customdata:,}} B)"
                                  "<extra></extra>")
    totals = [gib(before.peak.peak_total_bytes), gib(after.peak.peak_total_bytes)]
    notes = [dict(x=x, y=t, xref="x", yref="y", yanchor="bottom", showarrow=False,
                  text=f"<b>{t:,.2f} GiB</b>") for x, t in zip(labels, totals)]
    shapes, top = [], max(totals)
    if capacity_bytes:
        line, note = _target_line(capacity_bytes, target_label)
        shapes, notes, top = [line], notes + [note], max(top, gib(capacity_bytes))
    title = (f"{safe_text.plot(before.model.name)}: the most loaded GPU, "
             f"{peak_label('total', before.peak.peak_total_bytes)} → "
             f"{gib_text(after.peak.peak_total_bytes)} with the policy")
    layout = merge(house_layout(title, describe(before), height=470, bottom=105), dict(
        shapes=shapes, annotations=notes, margin=dict(r=90), bargap=0.45,
        xaxis=dict(tickangle=0),
        yaxis=dict(title=dict(text=GIB_AXIS), range=[0, top * 1.12])))
    fig.update_layout(layout)
    return fig


def bandwidth_table(verdicts) -> pd.DataFrame:
    return pd.DataFrame([{
        "pp rank": v.pp_rank, "to": "host" if v.target == "cpu" else "later ranks", "link": v.link,
        "GB per micro-batch": v.bytes_per_micro_batch / 1e9, "GB per step": v.bytes_per_step / 1e9,
        "needs GB/s (fwd)": v.required_out_bytes_per_s / 1e9, "link GB/s": v.link_bytes_per_s / 1e9,
        "verdict": "hidden" if v.hidden else f"exposed {v.exposed_s_per_step:.3f} s/step",
        "recompute instead": f"{flops_text(v.alt_recompute_flops_per_step)} ≈ "
                             f"{v.alt_recompute_s_per_step:.3f} s/step",
    } for v in verdicts])


def levelled_staircase(stair, capacity_bytes: int | None = None,
                       target_label: str = "target") -> go.Figure:
    """Peak per pipeline rank before and after remote offload levels the staircase."""
    x = list(range(len(stair.peak_bytes)))
    fig = go.Figure()
    fig.add_bar(x=x, y=[gib(b) for b in stair.peak_bytes], name="before levelling",
                marker_color=BEFORE_COLOR,
                hovertemplate="pp rank %{x}: %{y:,.2f} GiB before<extra></extra>")
    fig.add_bar(x=x, y=[gib(b) for b in stair.levelled_peak_bytes], name="levelled",
                marker_color=ROW_COLORS["activations"],
                hovertemplate="pp rank %{x}: %{y:,.2f} GiB levelled<extra></extra>")
    shapes, notes = [], []
    top = max([gib(b) for b in stair.peak_bytes + stair.levelled_peak_bytes], default=1)
    if capacity_bytes:
        line, note = _target_line(capacity_bytes, target_label)
        shapes, notes, top = [line], [note], max(top, gib(capacity_bytes))
    title = (f"The staircase levelled: first/last rank activations {stair.steepness:.2f}×; "
             f"levelling moves {gib(stair.bytes_per_step):,.1f} GiB/step")
    layout = merge(house_layout(title, "peak per pipeline rank, before and after sending "
                                       "activations to later ranks (offload-pp)",
                                height=420, bottom=95), dict(
        barmode="group", shapes=shapes, annotations=notes, margin=dict(r=90),
        xaxis=dict(title=dict(text="pipeline-parallel rank (0 = first stage)"), tickmode="array",
                   tickvals=x if len(x) <= 32 else None),
        yaxis=dict(title=dict(text=GIB_AXIS), range=[0, top * 1.12])))
    fig.update_layout(layout)
    return fig


def advice_sections(a) -> dict[str, list[str]]:
    """The answers (fine-tuning the fifth) and the plan as lines of text (GiB / GB / seconds)."""
    s, act, st, b, pl = a.static, a.activations, a.staircase, a.buffers, a.plan
    g = lambda n: f"{gib(n):,.2f} GiB"  # noqa: E731
    return {
        "1. Static rows": [f"{g(s.static_bytes)} on the most loaded rank; budget {g(s.budget_bytes)}",
                           "under budget" if s.under_budget else f"smallest change: {s.smallest or 'none'}"]
        + [f"{o.label}: " + (o.error or f"static {g(o.static_bytes)}, peak total {g(o.peak_bytes)}")
           for o in s.options],
        "2. Activations": [f"{g(act.activation_bytes)}; largest layer: {act.largest_layer} "
                           f"({g(act.largest_layer_bytes)}/layer/micro-batch); largest tensor "
                           f"{act.largest_tensor} [{act.largest_tensor_class}]: "
                           f"{g(act.largest_tensor_bytes)} over its {act.largest_tensor_copies:,} "
                           f"copies (layers × micro-batches in flight), "
                           f"{g(act.largest_tensor_bytes // max(act.largest_tensor_copies, 1))} each"]
        + [f"{c.policy}: saves {g(c.saved_bytes)}; costs {price(c)}" for c in act.currencies]
        + [f"smaller micro-batch without offload: {act.smaller_micro_batch.micro_batch} × "
           f"{act.smaller_micro_batch.micro_batches}/step → {g(act.smaller_micro_batch.peak_bytes)}"
           if act.smaller_micro_batch else "no smaller micro-batch fits without offload"],
        "3. Staircase": [f"first/last activations {st.steepness:.2f}×, spread {g(st.spread_bytes)}",
                         "levelled activations per rank: "
                         + ", ".join(f"{gib(x):,.1f}" for x in st.levelled_activation_bytes) + " GiB",
                         f"levelled peak total {g(max(st.levelled_peak_bytes, default=0))}; "
                         f"{gib(st.bytes_per_step):,.1f} GiB/step; "
                         + ("fits after levelling" if st.fits_after else "still over after levelling")]
        + [f"pp rank {x.src} → {x.dst}: {g(x.bytes)}" for x in st.transfers],
        "4. Buffers": [f"communication row {g(b.communication_bytes)}"]
        + ([f"all-to-all '{b.a2a_mode}': " + ", ".join(f"{k} {g(v)}" for k, v in b.a2a_bytes.items()),
            f"static shapes save {g(b.static_saving_bytes)} against the worst case"] if b.a2a_bytes else
           ["no expert-parallel all-to-all"]),
        **({"5. Fine-tuning": [f"{a.finetune.mode}: {a.finetune.trainable_pct:.2f}% of the rank's "
                                  f"parameters train"]
            + [f"{o.label}: " + (o.error or f"trains {o.trainable_pct:.3f}%, saves "
                                 f"{g(o.saved_bytes)}, peak total {g(o.peak_bytes)}")
               for o in a.finetune.options]} if a.finetune is not None else {}),
        "Plan": list(pl.steps) + [f"peak total after {g(pl.peak_bytes)}: {'fits' if pl.fits else 'still over'}"],
    }
