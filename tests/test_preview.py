"""Drag to preview: the figure holds one frame per value of the dragged setting, each drawn from
that configuration's own ledger (the CLI's numbers), invalid values greyed with the core's reason
and no number, and the work bounded by the server's budget."""
import re
from dataclasses import replace

import plotly.graph_objects as go
import pytest

from memledger.ledger.items import ROWS
from memledger.views import budget, preview
from memledger.views.compute import ledger_for
from memledger.views.ledger.charts import ledger_bar
from memledger.views.options import problem, valid_values
from memledger.views.staircase.charts import staircase
from memledger.views.state import DEFAULT, hardware, load_model

CFG = replace(DEFAULT, model="deepseek-v3", world=2048, tp=16, pp=16, ep=1)
M = load_model(CFG.model)


@pytest.fixture(scope="module")
def ep_fig():
    return preview.preview_figure(M, CFG, "ep", ledger_bar)


def frames(fig) -> dict:
    return {f.name: f.to_plotly_json() for f in fig.frames}


def test_every_candidate_ep_value_has_a_frame_and_a_slider_step_in_order(ep_fig):
    values = [s["label"].split()[0] for s in ep_fig.layout.sliders[0].steps]
    assert values == ["1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "2048"]
    assert list(frames(ep_fig)) == values
    assert ep_fig.layout.sliders[0].active == 0  # starts at the sidebar's ep = 1


def test_each_valid_frame_draws_the_bytes_of_its_own_ledgers_busiest_rank(ep_fig):
    fr = frames(ep_fig)
    for ep in valid_values(M, CFG, "ep"):
        led = ledger_for(M, replace(CFG, ep=ep))
        drawn = [t["customdata"][0][0] for t in fr[str(ep)]["data"]]
        assert drawn == [led.peak.rows[r] for r in ROWS], ep
        title = fr[str(ep)]["layout"]["title"]
        assert f"{led.peak.peak_total_bytes / 2**30:.1f}" in title["text"].replace("<br>", " ")
        assert ("Fits" if led.peak.peak_total_bytes <= hardware(CFG).hbm_bytes else "Over by") in \
            title["subtitle"]["text"].replace("<br>", " ")


def test_an_invalid_value_is_grey_with_the_core_reason_and_no_number(ep_fig):
    step = next(s for s in ep_fig.layout.sliders[0].steps if s.label.startswith("256"))
    assert step.label == "256 ✕"
    fr = frames(ep_fig)["256"]
    reason = str(problem(M, replace(CFG, ep=256)))
    assert fr["layout"]["title"]["text"] == "EP = 256: not valid here"
    assert fr["layout"]["title"]["subtitle"]["text"].replace("<br>", " ") == reason
    for t in fr["data"]:
        assert t["x"] == [0] and t["customdata"] == [] and t["marker"]["color"] == preview.GREY
        assert not re.search(r"\d", t["name"])
    assert all(not s.get("visible", True) for s in fr["layout"]["shapes"])


def test_a_valid_frame_after_an_invalid_one_shows_its_shapes_again(ep_fig):
    assert all(s["visible"] for s in frames(ep_fig)["8"]["layout"]["shapes"])


def test_staircase_frames_have_one_bar_per_pipeline_rank_of_their_pp():
    fig = preview.preview_figure(M, CFG, "pp", staircase)
    for name, fr in frames(fig).items():
        if fr["layout"]["title"]["text"].endswith("not valid here"):
            continue
        assert fr["data"][0]["x"] == list(range(int(name))), name


@pytest.mark.parametrize("axis", list(preview.AXES))
def test_every_axis_builds_a_figure_plotly_accepts(axis):
    fig = preview.preview_figure(M, CFG, axis, ledger_bar)
    go.Figure(fig.to_dict())  # full property validation: raises on a bad key
    assert str(getattr(CFG, axis)) in [f.name for f in fig.frames]


def test_the_preview_is_refused_over_the_servers_rank_ledger_budget(monkeypatch):
    monkeypatch.setattr(budget, "MAX_RANK_LEDGERS", 16 * 3)  # three pp = 16 ledgers
    with pytest.raises(budget.OverBudget, match="EP preview builds 8 ledgers"):
        preview.steps(M, CFG, "ep")


def test_an_unknown_axis_is_refused_by_name():
    with pytest.raises(ValueError, match="axis 'world'"):
        preview.steps(M, CFG, "world")


def test_the_ledger_page_builds_the_preview_only_when_its_panel_is_open(app_test):
    from conftest import figures
    at = app_test("pages/ledger.py").run()
    assert not at.exception and len(figures(at)) == 1  # closed: the page's own chart only
    at.session_state["preview_open"] = True
    at.run()
    assert not at.exception
    chart, fig = figures(at)
    assert "frames" not in chart and len(fig["frames"]) == len(fig["layout"]["sliders"][0]["steps"])
    assert at.query_params == {}  # previewing changes no setting
