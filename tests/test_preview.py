"""Drag to preview: the component's data holds every value of the dragged setting, each from that
configuration's own ledger (the CLI's bytes), invalid values with the core's reason and no
number, the work bounded by the server's budget; a released value is applied as a sidebar move
only when the core accepts it."""
import json
import re
from dataclasses import replace

import pytest

from memledger.ledger.items import ROWS
from memledger.views import budget, preview
from memledger.views.compute import ledger_for
from memledger.views.options import problem, valid_values
from memledger.views.state import DEFAULT, hardware, load_model

CFG = replace(DEFAULT, model="deepseek-v3", world=2048, tp=16, pp=16, ep=1)
M = load_model(CFG.model)
EP_VALUES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]


@pytest.fixture(scope="module")
def ep_data():
    return preview.preview_data(M, CFG, "ep", "ledger")


def by_value(data) -> dict:
    return {v["v"]: v for v in data["values"]}


def test_every_candidate_ep_value_is_listed_in_order_starting_at_the_sidebars(ep_data):
    assert [v["v"] for v in ep_data["values"]] == EP_VALUES
    assert ep_data["current"] == 0 and ep_data["axis"] == "ep" and ep_data["label"] == "EP"
    assert ep_data["capacity"] == hardware(CFG).hbm_bytes


def test_each_valid_value_carries_the_exact_bytes_of_its_own_ledgers_busiest_rank(ep_data):
    vals = by_value(ep_data)
    assert [v for v in EP_VALUES if vals[v]["ok"]] == list(valid_values(M, CFG, "ep"))
    for ep in valid_values(M, CFG, "ep"):
        led = ledger_for(M, replace(CFG, ep=ep))
        (rank, total, rows), = vals[ep]["ranks"]
        assert (rank, total) == (led.peak.pp_rank, led.peak.peak_total_bytes)
        assert rows == [led.peak.rows[r] for r in ROWS], ep
        assert f"needs peak total {total / 2**30:,.2f} GiB" in vals[ep]["title"]
        fits = total <= hardware(CFG).hbm_bytes
        assert vals[ep]["fits"] is fits
        assert vals[ep]["head"].startswith("Fits" if fits else "Over by")


def test_an_invalid_value_carries_the_core_reason_and_no_number(ep_data):
    v = by_value(ep_data)[256]
    assert v == {"v": 256, "ok": False, "reason": str(problem(M, replace(CFG, ep=256)))}


def test_the_data_is_plain_json(ep_data):
    assert json.loads(json.dumps(ep_data)) == ep_data


def test_staircase_values_have_one_bar_per_pipeline_rank_of_their_pp():
    data = preview.preview_data(M, CFG, "pp", "staircase")
    for v in data["values"]:
        if v["ok"]:
            assert [r[0] for r in v["ranks"]] == list(range(v["v"])), v["v"]
            assert v["title"].endswith(f"{CFG.schedule} schedule")


def test_a_model_name_from_a_link_reaches_the_component_as_one_plain_line(monkeypatch):
    led = ledger_for(M, CFG)
    named = replace(led, model=replace(led.model, name="x\n<img src=y onerror=z>"))
    got = preview.title(named, hardware(CFG), "ledger")
    assert "\n" not in got and got.startswith("x <img")  # text: the component sets textContent


@pytest.mark.parametrize("axis", list(preview.AXES))
def test_every_axis_holds_the_sidebars_value(axis):
    data = preview.preview_data(M, CFG, axis, "ledger")
    cur = data["values"][data["current"]]
    assert cur["v"] == getattr(CFG, axis) and cur["ok"]


def test_the_preview_is_refused_over_the_servers_rank_ledger_budget(monkeypatch):
    monkeypatch.setattr(budget, "MAX_RANK_LEDGERS", 16 * 3)  # three pp = 16 ledgers
    with pytest.raises(budget.OverBudget, match="EP preview builds 8 ledgers"):
        preview.steps(M, CFG, "ep")


def test_an_unknown_axis_or_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="axis 'world'"):
        preview.steps(M, CFG, "world")
    with pytest.raises(ValueError, match="kind 'pie'"):
        preview.preview_data(M, CFG, "ep", "pie")


@pytest.mark.parametrize("axis, value, ok", [
    ("ep", 16, True), ("ep", 256, False), ("ep", 3, False), ("ep", "16", False),
    ("ep", True, False), ("ep", 16.0, False), ("world", 1024, False), ("zero", 3, True),
    ("mb", 2, True), (None, 1, False)])
def test_only_a_value_the_core_accepts_is_committed(axis, value, ok):
    assert (preview.committable(M, CFG, axis, value) == value) is ok


def test_the_component_never_puts_data_into_markup():
    js = (preview.__file__.rsplit("/", 1)[0]) + "/dragbar.js"
    src = "\n".join(ln for ln in open(js).read().splitlines() if not ln.lstrip().startswith("//"))
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", src)


def test_the_ledger_page_builds_the_preview_only_when_its_panel_is_open(app_test):
    from conftest import figures
    at = app_test("pages/ledger.py").run()
    assert not at.exception and len(figures(at)) == 1
    assert not at.get("bidi_component")  # closed: nothing of the preview is sent
    at.session_state["preview_open"] = True
    at.run()
    assert not at.exception
    assert len(figures(at)) == 1  # the preview draws itself: no second Plotly figure
    (comp,) = at.get("bidi_component")
    data = json.loads(comp.proto.json)
    assert data["axis"] == "ep" and data["kind"] == "ledger"
    assert at.query_params == {}  # previewing changes no setting


@pytest.mark.parametrize("sent, applied", [
    ({"axis": "ep", "value": 16}, 16), ({"axis": "ep", "value": 256}, None),
    ({"axis": "world", "value": 1024}, None), ({"axis": "ep"}, None), ("ep=16", None)])
def test_a_release_becomes_the_sidebar_widgets_value_only_when_valid(monkeypatch, sent, applied):
    from types import SimpleNamespace

    from memledger.views import preview_panel
    from memledger.views.sync import CFG as CFG_KEY
    ss = {CFG_KEY: CFG, "preview_drag": {"commit": sent}}
    monkeypatch.setattr(preview_panel, "st", SimpleNamespace(session_state=ss))
    preview_panel.apply_commit("preview_drag")
    assert ss.get("sb_ep", ss.get("sb_world")) == applied


def test_the_sidebar_value_a_release_sets_reaches_the_link(app_test):
    at = app_test("pages/ledger.py", "model=deepseek-v3&world=2048&tp=16&pp=16&ep=1").run()
    at.session_state["sb_ep"] = 16  # what apply_commit writes, before the page runs
    at.run()
    assert not at.exception
    assert at.select_slider(key="sb_ep").value == 16 and at.query_params["ep"] == "16"


def test_the_staircase_page_sends_every_ranks_bars_to_the_component(app_test):
    at = app_test("pages/staircase.py", "model=deepseek-v3&world=2048&tp=16&pp=16&ep=1").run()
    at.session_state["preview_open"] = True
    at.session_state["preview_axis"] = "pp"
    at.run()
    assert not at.exception
    (comp,) = at.get("bidi_component")
    data = json.loads(comp.proto.json)
    cur = data["values"][data["current"]]
    assert data["kind"] == "staircase" and cur["v"] == 16 and len(cur["ranks"]) == 16
    led = ledger_for(M, CFG)
    assert cur["ranks"] == [[r.pp_rank, r.peak_total_bytes, [r.rows[k] for k in ROWS]]
                            for r in led.ranks]
