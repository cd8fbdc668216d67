"""Tables of a ledger for the page and for download: the same integers the CLI's --json prints.

`ledger_json` is `Ledger.to_dict()` (the CLI's JSON object); the CSVs flatten that same object:
one line per pipeline rank (six rows and the two peaks, in bytes) or one line per item.
GiB columns are derived for reading and always say so in their name.
"""
from __future__ import annotations

import json

import pandas as pd

from ..checkpointing import seed_checkpoints, seed_percent
from ..items import ROW_LABELS, ROWS, RankLedger
from ..ledger import Ledger
from ..textbook import static_bytes
from ..units import GIB

RANK_COLUMNS = ["pp_rank"] + [f"{r}_bytes" for r in ROWS] + ["peak_allocated_bytes",
                                                           "peak_total_bytes"]
ITEM_COLUMNS = ["pp_rank", "row", "item", "bytes", "gib", "formula", "source"]


def items_frame(rank: RankLedger) -> pd.DataFrame:
    """The items of one rank, largest first within each row, for the on-page table."""
    order = {r: i for i, r in enumerate(ROWS)}
    rows = sorted(rank.items, key=lambda i: (order[i.row], -i.bytes))
    return pd.DataFrame({
        "row": [ROW_LABELS[i.row] for i in rows],
        "item": [i.name for i in rows],
        "GiB": [i.bytes / GIB for i in rows],
        "bytes": [i.bytes for i in rows],
        "formula": [i.formula for i in rows],
        "source": [i.source for i in rows],
    })


def ranks_frame(led: Ledger) -> pd.DataFrame:
    d = led.to_dict()
    return pd.DataFrame([[r["pp_rank"]] + [r["rows"][k] for k in ROWS]
                         + [r["peak_allocated_bytes"], r["peak_total_bytes"]] for r in d["ranks"]],
                        columns=RANK_COLUMNS)


def all_items_frame(led: Ledger) -> pd.DataFrame:
    d = led.to_dict()
    return pd.DataFrame([[r["pp_rank"], i["row"], i["name"], i["bytes"], i["bytes"] / GIB,
                          i["formula"], i["source"]] for r in d["ranks"] for i in r["items"]],
                        columns=ITEM_COLUMNS)


def ranks_csv(led: Ledger) -> str:
    return ranks_frame(led).to_csv(index=False)


def items_csv(led: Ledger) -> str:
    return all_items_frame(led).to_csv(index=False)


def ledger_json(led: Ledger) -> str:
    return json.dumps(led.to_dict(), indent=1)


def staircase_frame(led: Ledger) -> pd.DataFrame:
    """Per pipeline rank: its layers, micro-batches in flight, activations and total (GiB)."""
    return pd.DataFrame({
        "pp rank": [r.pp_rank for r in led.ranks],
        "layers": [len(r.layers) for r in led.ranks],
        "micro-batches in flight": [" + ".join(str(n) for _, n in r.in_flight) for r in led.ranks],
        "activations (GiB)": [r.rows["activations"] / GIB for r in led.ranks],
        "static rows (GiB)": [r.static_bytes / GIB for r in led.ranks],
        "peak total (GiB)": [r.peak_total_bytes / GIB for r in led.ranks],
    })


def seed_numbers_frame(examples) -> pd.DataFrame:
    """Seed 2's two printed results (and any other sizes): 16N in GiB, ⌈√L⌉ + 1 checkpoints."""
    return pd.DataFrame({
        "model": [e[0] for e in examples],
        "parameters N": [e[1] for e in examples],
        "static 16N (GiB)": [sum(static_bytes(e[1]).values()) / GIB for e in examples],
        "layers L": [e[2] for e in examples],
        "checkpoints ⌈√L⌉+1": [seed_checkpoints(e[2]) for e in examples],
        "activations kept (≈)": [f"{seed_percent(e[2])}%" for e in examples],
    })
