"""`memledger ledger`: the per-rank ledger as a GiB table, or --json with integer bytes."""
from __future__ import annotations

import json

from memledger.cli.args import add_config_args, specs_from_args
from memledger.ledger import build_ledger
from memledger.ledger.activations.policy import payments
from memledger.ledger.items import ROW_LABELS, ROWS
from memledger.units import gib


def add(sub) -> None:
    p = sub.add_parser("ledger", help="per-rank memory ledger")
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object, bytes as integers")
    p.add_argument("--items", action="store_true", help="list every item of the most loaded rank")
    p.set_defaults(run=run)


def run(args) -> int:
    m, p, t, rt, hw = specs_from_args(args)
    led = build_ledger(m, p, t, rt, hw)
    if args.json:
        print(json.dumps(led.to_dict()))
        return 0
    print(render(led, args.items))
    return 0


def _reserved_text(r) -> str:
    """Reserved in GiB, or n/a where the timeline is too long to replay (bounded work)."""
    n = r.peak_reserved_bytes
    return "n/a" if n is None else f"{gib(n):.2f}"


def render(led, with_items: bool = False) -> str:
    m, p, t = led.model, led.parallel, led.train
    head = (f"{m.name}: {led.n_params:,} params ({led.n_active_params:,} active) | "
            f"tp={p.tp} pp={p.pp} vpp={p.vpp} ep={p.ep} etp={p.etp} cp={p.cp} dp={p.dp}"
            f"{f' dp_replicate={p.dp_replicate}' if p.dp_replicate > 1 else ''} "
            f"sp={'on' if p.sp else 'off'} ZeRO-{p.zero} {p.schedule} | "
            f"mb={t.micro_batch}×{t.seq} m={t.micro_batches} {t.precision}/{t.optimizer} "
            f"profile={t.profile} recompute={t.recompute}")
    cols = ["rank"] + [ROW_LABELS[r].split()[0] for r in ROWS] + ["peak alloc", "peak reserv", "peak total"]
    lines = [head, "all figures GiB (2^30 bytes); peak alloc = allocated, peak reserv = the "
             "caching allocator's reserved (docs/allocator.md), peak total = allocated + "
             "allocator slack + CUDA context", "  ".join(f"{c:>12}" for c in cols)]
    for r in led.ranks:
        vals = [r.pp_rank] + [f"{gib(r.rows[k]):.2f}" for k in ROWS] + [
            f"{gib(r.peak_allocated_bytes):.2f}", _reserved_text(r), f"{gib(r.peak_total_bytes):.2f}"]
        lines.append("  ".join(f"{v:>12}" for v in vals))
    peak = led.peak
    lines.append(f"most loaded: pp rank {peak.pp_rank}, peak total {gib(peak.peak_total_bytes):.2f} GiB")
    if peak.peak_event is not None:
        from memledger.ledger.timeline import describe
        lines.append(f"peak at: {describe(peak.peak_event)} (loop {led.loop.name})")
    if led.hardware:
        cap = led.hardware.hbm_bytes
        diff = gib(cap - peak.peak_total_bytes)
        verdict = f"fits, {diff:.2f} GiB free" if diff >= 0 else f"OVER by {-diff:.2f} GiB"
        lines.append(f"{led.hardware.name} ({gib(cap):.1f} GiB): {verdict}")
    lines += [f"WARNING: {w}" for w in led.warnings]
    host = peak.host
    if host is not None and host.host_bytes:
        lines.append(f"static rows in host memory: optimizer {gib(host.optimizer_bytes):.2f}, "
                     f"gradients {gib(host.gradient_bytes):.2f}, weights "
                     f"{gib(host.weight_bytes):.2f} GiB; PCIe per step {host.params_up_bytes_per_step / 1e9:,.1f} "
                     f"GB up, {host.grads_down_bytes_per_step / 1e9:,.1f} GB down")
    pay = payments(peak.moves, t.micro_batches)
    if pay["saved_bytes"] or peak.transfers:
        lines.append(f"storage policy ({t.policy}): saves {gib(pay['saved_bytes']):.2f} GiB on this rank; "
                     f"recompute {pay['recompute_flops_per_step'] / 1e9:,.0f} GFLOP/step; host "
                     f"{gib(pay['host_bytes']):.2f} GiB, {pay['host_bytes_per_step'] / 1e9:,.1f} GB/step "
                     f"each way; to later ranks {gib(sum(x.bytes for x in peak.transfers if x.src == peak.pp_rank)):.2f} GiB")
    if with_items:
        for i in peak.items:
            lines.append(f"  {i.row:<14} {i.name:<40} {gib(i.bytes):>10.4f}  {i.formula}")
    return "\n".join(lines)
