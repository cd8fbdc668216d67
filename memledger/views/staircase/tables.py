"""The Pipeline staircase page's table: per rank, layers, micro-batches in flight and GiB."""
from __future__ import annotations

import pandas as pd

from memledger.ledger import Ledger
from memledger.units import GIB


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
