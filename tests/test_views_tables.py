"""Downloads carry the CLI's numbers: the JSON is `Ledger.to_dict()`, the CSVs flatten it."""
import io
import json
from dataclasses import replace

import pandas as pd

from memledger.ledger.items import ROWS
from memledger.views import tables
from memledger.views.compute import ledger_for
from memledger.views.staircase import tables as stair_tables
from memledger.views.state import DEFAULT, load_model
from memledger.views.where import tables as where_tables

CFG = replace(DEFAULT, model="deepseek-v3", world=256, tp=4, pp=8, ep=8)
LED = ledger_for(load_model(CFG.model), CFG)


def test_json_download_is_the_cli_json():
    assert json.loads(tables.ledger_json(LED)) == json.loads(json.dumps(LED.to_dict()))


def test_rank_csv_has_the_cli_bytes_per_rank():
    df = pd.read_csv(io.StringIO(tables.ranks_csv(LED)))
    d = LED.to_dict()
    assert len(df) == 8
    for row, r in zip(df.itertuples(index=False), d["ranks"]):
        assert row.pp_rank == r["pp_rank"]
        assert [getattr(row, f"{k}_bytes") for k in ROWS] == [r["rows"][k] for k in ROWS]
        assert row.peak_total_bytes == r["peak_total_bytes"]


def test_items_csv_lists_every_item_of_every_rank_with_exact_bytes():
    df = pd.read_csv(io.StringIO(tables.items_csv(LED)))
    d = LED.to_dict()
    assert len(df) == sum(len(r["items"]) for r in d["ranks"])
    per_rank = df.groupby("pp_rank")["bytes"].sum().tolist()
    assert per_rank == [r["peak_total_bytes"] for r in d["ranks"]]
    assert df["formula"].notna().all()


def test_on_page_table_groups_by_row_largest_first():
    df = tables.items_frame(LED.peak)
    assert df["bytes"].sum() == LED.peak.peak_total_bytes
    weights = df[df["row"] == "Weights"]["bytes"].tolist()
    assert weights == sorted(weights, reverse=True)


def test_seed_numbers_table_prints_the_seed_figures():
    df = where_tables.seed_numbers_frame([("7B", 7 * 10**9, 32), ("70B", 70 * 10**9, 80)])
    assert [f"{v:.1f}" for v in df["static 16N (GiB)"]] == ["104.3", "1043.1"]
    assert df["checkpoints ⌈√L⌉+1"].tolist() == [7, 10]
    assert df["activations kept (≈)"].tolist() == ["22%", "13%"]
