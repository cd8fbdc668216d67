"""The Validation page's engine section under AppTest: per-rank parity for the chosen engine
case, the measured staircase over the predicted one for pipeline cases, FSDPMemTracker next to
memledger and the measured peak, a table, and a clear line when no engine run is stored."""
import json
import shutil

import pytest

from conftest import ROOT, figures
from memledger.engine.compare import rescore
from memledger.views.validation import data as vd

PAGE = "pages/validation.py"
DOCS = [json.loads((ROOT / "validation" / f"engine-{s}.json").read_text()) for s in ("cpu", "fake")]
N = sum(len(rescore(d)) for d in DOCS)


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def by_title(at, start):
    return [f for f in figures(at) if f["layout"]["title"]["text"].startswith(start)]


def test_section_renders_parity_per_rank_trackers_and_the_table(app_test):
    at = ok(app_test(PAGE).run())
    assert "Per rank: PyTorch's distributed engine" in [h.value for h in at.subheader]
    box = next(s for s in at.selectbox if s.label == "Engine case")
    assert box.value == "fsdp2 zero-3 dp=2" and len(box.options) == 14 + 6  # cpu + fake cases
    (parity,) = by_title(at, "Per rank")
    measured = [t for t in parity["data"] if t["name"].startswith("measured")]
    assert len(measured) == 5 and all(t["x"] == [0, 1] for t in measured)
    (trackers,) = by_title(at, "Peak per FSDP2 case")
    assert [t["name"] for t in trackers["data"]] == ["measured", "memledger", "FSDPMemTracker"]
    assert len(trackers["data"][0]["x"]) >= 6
    assert not by_title(at, "Pipeline staircase")  # not a pipeline case
    table = next(d.value for d in at.dataframe if "pp rank" in d.value.columns)
    assert set(table["case"]) == {"fsdp2 zero-3 dp=2"} and len(table) == 10
    assert any("of " + str(N) + " per-rank predictions" in w.value
               for w in list(at.success) + list(at.warning))


def test_a_pipeline_case_draws_the_measured_staircase_over_the_ledgers(app_test):
    at = ok(app_test(PAGE).run())
    next(s for s in at.selectbox if s.label == "Engine case").select("pp=4 1f1b m=6").run()
    ok(at)
    (stairs,) = by_title(at, "Pipeline staircase")
    measured, predicted = stairs["data"]
    assert measured["x"] == predicted["x"] == [0, 1, 2, 3]
    assert measured["y"] == predicted["y"] == [4, 3, 2, 1]


def test_without_engine_runs_the_section_says_how_to_make_them(tmp_path, monkeypatch, app_test):
    folder = tmp_path / "validation"
    shutil.copytree(ROOT / "validation", folder)
    for p in folder.glob("engine-*.json"):
        p.unlink()
    monkeypatch.setenv(vd.ENV_VAR, str(folder))
    at = ok(app_test(PAGE).run())
    assert any("memledger validate --engine torch" in i.value for i in at.info)


def test_a_damaged_engine_file_is_an_error_line_not_an_exception(tmp_path, monkeypatch, app_test):
    folder = tmp_path / "validation"
    shutil.copytree(ROOT / "validation", folder)
    (folder / "engine-cpu.json").write_text("{not json")
    monkeypatch.setenv(vd.ENV_VAR, str(folder))
    at = ok(app_test(PAGE).run())
    assert any("cannot be read as an engine run" in e.value and "cpu" in e.value for e in at.error)


@pytest.mark.parametrize("doc", DOCS, ids=["cpu", "fake"])
def test_every_stored_case_is_offered(doc, app_test):
    at = ok(app_test(PAGE).run())
    options = next(s for s in at.selectbox if s.label == "Engine case").options
    assert {m["case"] for m in doc["measurements"]} <= set(options)


def test_per_rank_panels_share_a_scale_from_zero_and_tick_every_rank(app_test):
    """Issue 32 #8: autoscaled panels made a 0.001 % difference between ranks look like 3 %;
    every panel starts at 0 MiB, ticks name ranks on every panel, titles have room."""
    at = ok(app_test(PAGE).run())
    (parity,) = by_title(at, "Per rank")
    lay = parity["layout"]
    yaxes = [v for k, v in lay.items() if k.startswith("yaxis")]
    xaxes = [v for k, v in lay.items() if k.startswith("xaxis")]
    assert len(yaxes) >= 3 and all(y.get("rangemode") == "tozero" for y in yaxes)
    assert all(x.get("tickprefix") == "rank " and x.get("showticklabels") for x in xaxes)
    legend = [t["name"] for t in parity["data"] if t.get("showlegend", True)]
    assert legend == ["memledger (line)", "measured (open diamonds)"]
