"""Chart builders: the numbers drawn are the ledger's, titles state the configuration, units are
labelled, the capacity is a line and every row has one colour on every chart."""
import json
from dataclasses import replace
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from conftest import decode
from memledger.costs.textbook import technique_columns
from memledger.ledger.items import ROWS
from memledger.units import GIB
from memledger.views import figures
from memledger.views.compute import ledger_for, schedule_ledgers
from memledger.views.ledger import charts as ledger_charts
from memledger.views.palette import CAPACITY_COLOR, ROW_COLORS
from memledger.views.staircase import charts as stair_charts
from memledger.views.state import DEFAULT, hardware, load_model
from memledger.views.where import charts as seed_charts

M = load_model(DEFAULT.model)
LED, HW = ledger_for(M, DEFAULT), hardware(DEFAULT)


def plain(fig) -> dict:
    """The figure as JSON, after validating every property (builders skip validation)."""
    go.Figure(fig.to_dict())  # raises on any property plotly does not know
    return decode(json.loads(pio.to_json(fig)))


def bar_colors(fig: dict) -> dict:
    return {tr["legendgroup"] if tr.get("legendgroup") else tr["name"]: tr["marker"]["color"]
            for tr in fig["data"] if tr["type"] == "bar"}


def test_ledger_bar_draws_the_six_rows_of_the_most_loaded_rank():
    fig = plain(ledger_charts.ledger_bar(LED, HW))
    peak = LED.peak
    xs = [tr["x"][0] for tr in fig["data"]]
    assert xs == pytest.approx([peak.rows[r] / GIB for r in ROWS])
    assert sum(xs) == pytest.approx(peak.peak_total_bytes / GIB)
    assert [tr["marker"]["color"] for tr in fig["data"]] == [ROW_COLORS[r] for r in ROWS]


def test_ledger_bar_draws_capacity_and_states_the_configuration():
    fig = plain(ledger_charts.ledger_bar(LED, HW))
    lines = [s for s in fig["layout"]["shapes"] if s["line"]["color"] == CAPACITY_COLOR]
    assert lines[0]["x0"] == pytest.approx(HW.hbm_bytes / GIB)
    title = fig["layout"]["title"]
    assert "Llama-3 70B" in title["text"] and "fits" in title["text"]
    for part in ("tp 8", "pp 4", "ep 1", "cp 1", "dp 2", "ZeRO-1", "micro-batch 1 × 4,096"):
        assert part in title["subtitle"]["text"]
    assert "GiB" in fig["layout"]["xaxis"]["title"]["text"]


def test_an_overloaded_configuration_says_so():
    over = replace(DEFAULT, zero=0, m=64, mb=4)
    fig = plain(ledger_charts.ledger_bar(ledger_for(M, over), HW))
    assert "does not fit" in fig["layout"]["title"]["text"]
    assert not figures.fit(ledger_for(M, over), HW).fits
    assert figures.fit(ledger_for(M, over), HW).sentence("H100").startswith("Over by")


def test_staircase_has_one_bar_per_rank_and_the_same_colours():
    fig = plain(stair_charts.staircase(LED, HW))
    acts = next(tr for tr in fig["data"] if tr["name"] == "Activations")
    assert acts["x"] == [0, 1, 2, 3]
    assert acts["y"] == pytest.approx([r.rows["activations"] / GIB for r in LED.ranks])
    assert acts["y"] == sorted(acts["y"], reverse=True)  # 1F1B: the staircase goes down
    assert bar_colors(fig) == ROW_COLORS
    assert "GiB" in fig["layout"]["yaxis"]["title"]["text"]


def test_compare_puts_each_schedule_in_its_own_panel_and_names_invalid_ones():
    cfg = replace(DEFAULT, pp=2, tp=8, world=64)
    ledgers, skipped = schedule_ledgers(M, cfg, ("1f1b", "interleaved", "dualpipe", "gpipe"))
    assert set(ledgers) == {"1f1b", "interleaved", "dualpipe", "gpipe"} and skipped == {}
    m3 = load_model("llama3-8b")  # 32 layers: pp=3 is not possible anyway; use pp odd for dualpipe
    cfg3 = replace(DEFAULT, model="llama3-8b", tp=1, pp=3, world=48, layout="balanced")
    led3, skip3 = schedule_ledgers(m3, cfg3, ("1f1b", "dualpipe"))
    assert "dualpipe" in skip3 and "even" in skip3["dualpipe"]
    fig = plain(stair_charts.staircase_compare(led3, hardware(cfg3), skip3))
    assert "not valid here: dualpipe" in fig["layout"]["title"]["subtitle"]["text"]
    fig = plain(stair_charts.staircase_compare(ledgers, HW, {}))
    panels = {tr["xaxis"] for tr in fig["data"]}
    assert len(panels) == 4
    assert bar_colors(fig) == ROW_COLORS


def test_seed_strip_shows_16n_for_the_seed_7b_example():
    fig = plain(seed_charts.static_strip(7 * 10**9, None, "7B", ""))
    total = sum(tr["x"][0] for tr in fig["data"])
    assert f"{total:.1f}" == "104.3"
    assert "104.3 GiB" in fig["layout"]["title"]["text"]
    assert {tr["marker"]["color"] for tr in fig["data"]} == {
        ROW_COLORS["weights"], ROW_COLORS["gradients"], ROW_COLORS["optimizer"]}


def test_techniques_chart_totals_fall_left_to_right():
    cols = technique_columns(70 * 10**9, 64, 10 * GIB, 20 * GIB, 80)
    fig = plain(seed_charts.techniques(cols, HW.hbm_bytes, HW.name, "70B"))
    totals = [sum(tr["y"][i] for tr in fig["data"]) for i in range(len(cols))]
    assert totals == sorted(totals, reverse=True)
    assert f"{totals[1]:.1f}" == f"{(16 * 70e9 + 10 * GIB) / GIB:.1f}"


def test_checkpoint_curve_marks_the_seed_point_and_sqrt_l():
    fig = plain(seed_charts.checkpoint_curve(80, "70B"))
    texts = " ".join(str(tr.get("text")) for tr in fig["data"])
    assert "10 checkpoints ≈ 13%" in texts
    assert any(abs(s["x0"] - 80**0.5) < 1e-9 for s in fig["layout"]["shapes"])


def test_the_app_follows_the_viewer_theme_and_charts_carry_their_own_background():
    import tomllib
    cfg = tomllib.loads((Path(__file__).resolve().parents[1] / ".streamlit/config.toml").read_text())
    assert "base" not in cfg.get("theme", {})  # light or dark, as the viewer's browser says
    fig = plain(ledger_charts.ledger_bar(LED, HW))
    assert fig["layout"]["paper_bgcolor"] == fig["layout"]["plot_bgcolor"] == "white"
    assert fig["layout"]["font"]["color"] == "#262730"  # dark ink on the chart's own white


@pytest.mark.parametrize("schedule", ["zb-v", "dualpipev", "dualpipe"])
def test_staircase_stages_draws_each_chunk_of_the_v_and_names_the_loss_rank(schedule):
    from memledger.ledger.pipeline.stages import stage_split
    from memledger.views.staircase.stages import staircase_stages
    cfg = replace(DEFAULT, schedule=schedule, pp=4, m=16)
    led = ledger_for(M, cfg)
    fig = plain(staircase_stages(led, hardware(cfg)))
    acts = [tr for tr in fig["data"] if tr["legendgroup"] == "activations"]
    assert len(acts) == 2  # one segment per chunk, nothing rank-wide without a storage policy
    for c, tr in enumerate(acts):
        assert tr["y"] == pytest.approx([x.stages[c].bytes / GIB for x in stage_split(led)])
    total = [sum(tr["y"][r] for tr in fig["data"]) for r in range(4)]
    assert total == pytest.approx([r.peak_total_bytes / GIB for r in led.ranks])
    assert any(a["text"].startswith("loss on rank 0") for a in fig["layout"]["annotations"])
