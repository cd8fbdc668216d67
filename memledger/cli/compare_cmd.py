"""`memledger compare --snapshot FILE`: a PyTorch memory snapshot of your run beside the
ledger's prediction for the same configuration (memledger.snapshot; docs/snapshots.md)."""
from __future__ import annotations

import json

from memledger.cli.args import add_config_args, specs_from_args
from memledger.ledger import build_ledger
from memledger.snapshot.attribute import ATTRIBUTED_ROWS, attribute
from memledger.snapshot.compare import compare
from memledger.snapshot.measure import measure
from memledger.snapshot.reader import MAX_FILE_BYTES, read_file
from memledger.units import gib


def add(sub) -> None:
    p = sub.add_parser("compare", help="a PyTorch memory snapshot beside the prediction")
    p.add_argument("--snapshot", required=True, metavar="FILE",
                   help="torch.cuda.memory._dump_snapshot output (.pickle, or gzipped)")
    p.add_argument("--rank", type=int, default=None,
                   help="pipeline rank the snapshot is of (default: the most loaded)")
    p.add_argument("--max-snapshot-mb", type=int, default=MAX_FILE_BYTES >> 20,
                   help="largest file read, MiB (default: %(default)s)")
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object, bytes as integers")
    p.set_defaults(run=run)


def run(args) -> int:
    from memledger.errors import SpecError
    if not 1 <= args.max_snapshot_mb <= 4096:
        raise SpecError("max_snapshot_mb", f"must be 1..4096, got {args.max_snapshot_mb}")
    snap = read_file(args.snapshot, args.max_snapshot_mb << 20)
    m, p, t, rt, hw = specs_from_args(args)
    led = build_ledger(m, p, t, rt, hw)
    if args.rank is not None and not 0 <= args.rank < len(led.ranks):
        raise SpecError("rank", f"must be 0..{len(led.ranks) - 1} (pp={p.pp}), got {args.rank}")
    measured = measure(snap)
    cmp = compare(measured, attribute(measured), led, args.rank)
    if args.json:
        print(json.dumps(cmp.to_dict()))
        return 0
    print(render(cmp))
    return 0


def render(cmp) -> str:
    m, e = cmp.measured, cmp.errors()
    lines = [f"snapshot: device {m.device}, {m.n_entries:,} trace entries, peak at entry "
             f"{m.peak_index:,} ({cmp.attribution.phase_at_peak})"
             + (" — PARTIAL: " + "; ".join(m.partial_reasons) if m.partial else ""),
             f"compared with pp rank {cmp.pp_rank}; all figures GiB (2^30 bytes)",
             f"{'row':<16}{'measured':>12}{'predicted':>12}{'difference':>12}{'error %':>10}"]
    for row in ATTRIBUTED_ROWS + ("peak_allocated", "peak_reserved"):
        x = e[row]
        pct = "—" if x["error_pct"] is None else f"{x['error_pct']:+.1f}"
        lines.append(f"{row:<16}{gib(x['measured_bytes']):>12.3f}{gib(x['predicted_bytes']):>12.3f}"
                     f"{gib(x['difference_bytes']):>+12.3f}{pct:>10}")
    top = [f"{r} {gib(d):+.3f}" for r, d in cmp.explaining() if d][:3]
    lines.append("biggest differences: " + (", ".join(top) if top else "none"))
    return "\n".join(lines)
