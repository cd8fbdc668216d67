"""The Where-memory-goes page's table: 16N in GiB and ⌈√L⌉ + 1 checkpoints per model size."""
from __future__ import annotations

import pandas as pd

from memledger.costs.checkpointing import seed_checkpoints, seed_percent
from memledger.costs.textbook import static_bytes
from memledger.units import GIB


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
