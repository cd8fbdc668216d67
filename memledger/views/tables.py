"""Tables of a ledger for the page and for download: the same integers the CLI's --json prints.

`ledger_json` is `Ledger.to_dict()` (the CLI's JSON object); the CSVs flatten that same object:
one line per pipeline rank (six rows and the two peaks, in bytes) or one line per item.
GiB columns are derived for reading and always say so in their name.
"""
from __future__ import annotations

import json

import pandas as pd

from memledger.ledger import Ledger
from memledger.ledger.items import ROW_LABELS, ROWS, RankLedger
from memledger.units import GIB

RANK_COLUMNS = ["pp_rank"] + [f"{r}_bytes" for r in ROWS] + ["peak_allocated_bytes",
                                                           "peak_reserved_bytes", "peak_total_bytes"]
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
                         + [r["peak_allocated_bytes"], r["peak_reserved_bytes"], r["peak_total_bytes"]]
                         for r in d["ranks"]],
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
