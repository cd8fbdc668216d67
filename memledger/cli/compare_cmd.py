"""`memledger compare --snapshot FILE [configuration flags]`: a run's PyTorch memory snapshot
beside the ledger of the same configuration — measured vs predicted per row, the peaks, and
the rows that explain the difference, biggest first. --json prints one object (bytes as
integers). A file that is not a snapshot (or is hostile) exits 2 with one line."""
from __future__ import annotations

import json

from memledger.cli.args import add_config_args, specs_from_args
from memledger.ledger import build_ledger
from memledger.units import gib


def add(sub) -> None:
    p = sub.add_parser("compare", help="a measured memory snapshot beside the ledger")
    p.add_argument("--snapshot", required=True, metavar="FILE",
                   help="torch.cuda.memory._dump_snapshot() pickle (gzip accepted)")
    p.add_argument("--device", type=int, default=None,
                   help="the snapshot's device to measure (default: the busiest trace)")
    p.add_argument("--pp-rank", type=int, default=None,
                   help="the ledger's pipeline rank to compare with (default: most loaded)")
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object, bytes as integers")
    p.set_defaults(run=run)


def run(args) -> int:
    from memledger.errors import SpecError
    from memledger.snapshot.compare import compare
    from memledger.snapshot.measure import measure
    from memledger.snapshot.reader import read
    m = measure(read(args.snapshot), args.device)
    led = build_ledger(*specs_from_args(args))
    if args.pp_rank is not None and not 0 <= args.pp_rank < len(led.ranks):
        raise SpecError("pp_rank", f"must be 0..{len(led.ranks) - 1}, got {args.pp_rank}")
    doc = compare(m, led, args.pp_rank)
    if args.json:
        print(json.dumps(doc))
        return 0
    mm, pr = doc["measured"], doc["predicted"]
    print(f"snapshot {args.snapshot}: device {mm['device']}, {mm['trace_entries']:,} trace "
          f"entries{' (partial trace: segments fill what it lacks)' if mm['partial'] else ''}")
    print(f"peak allocated: measured {gib(mm['peak_allocated_bytes']):,.2f} GiB, predicted "
          f"{gib(pr['peak_allocated_bytes']):,.2f} GiB (pp rank {pr['pp_rank']}); peak reserved "
          f"measured {gib(mm['peak_reserved_bytes']):,.2f} GiB   (GiB = 2^30 bytes)")
    print(f"{'row':<16}{'measured GiB':>14}{'predicted GiB':>15}{'difference':>12}")
    for row, e in doc["errors"].items():
        if row == "peak_allocated":
            continue
        print(f"{row:<16}{gib(e['measured_bytes']):>14,.3f}{gib(e['predicted_bytes']):>15,.3f}"
              f"{gib(e['difference_bytes']):>+12,.3f}")
    un = mm["rows"]["unattributed"]
    print(f"{'unattributed':<16}{gib(un):>14,.3f}{'':>15}{gib(un):>+12,.3f}")
    top = doc["explain"][:3]
    if top:
        print("biggest differences: " + ", ".join(
            f"{x['row']} {gib(x['difference_bytes']):+,.2f} GiB" for x in top))
    return 0
