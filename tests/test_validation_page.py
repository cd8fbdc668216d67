"""The Validation page under AppTest, and its data: stored measurements re-predicted by the current
ledger, a summary against the accuracy bar, a parity plot, a filterable table whose filters
round-trip through the URL, and errors (not exceptions) for bad links and missing files."""
import json
import shutil

import pytest

from conftest import ROOT, figures
from memledger.validation.report import TOLERANCE, rescore
from memledger.views.palette import PEAK_COLOR, ROW_COLORS
from memledger.views.validation import data as vd

PAGE = "pages/validation.py"
RESULTS = ROOT / "validation"
DOCS = [json.loads((RESULTS / f"validation-{d}.json").read_text()) for d in ("cuda", "cpu")]
N_RECORDS = sum(len(rescore(d)) for d in DOCS)


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def parity(at) -> list[dict]:
    """The parity plot(s) of the page (the engine section below it draws its own charts)."""
    return [f for f in figures(at) if f["layout"]["title"]["text"].startswith("Predicted vs measured")]


@pytest.fixture
def results(tmp_path, monkeypatch):
    """A private copy of the stored results that a test may damage."""
    folder = tmp_path / "validation"
    shutil.copytree(RESULTS, folder)
    monkeypatch.setenv(vd.ENV_VAR, str(folder))
    return folder


def test_page_renders_with_defaults_every_record_and_a_clean_link(app_test):
    at = ok(app_test(PAGE).run())
    assert at.error == [] and at.query_params == {}
    assert "All 110 predictions are within the accuracy bar" in at.success[0].value
    assert [m.label.removesuffix(": worst") for m in at.metric] == ["Weights", "Gradients", "Optimizer states",
                                            "Activations", "Peak allocated"]
    assert [m.delta for m in at.metric] == ["bar ±0.5%"] * 3 + ["bar ±3%", "bar ±10%"]
    assert len(at.dataframe[0].value) == N_RECORDS == 110
    assert any("NVIDIA H200" in c.value for c in at.caption)
    assert at.code[0].value == "http://localhost:8501/"


def test_parity_plot_has_log_axes_the_band_and_one_marker_per_case_and_row(app_test):
    (fig,) = parity(ok(app_test(PAGE).run()))
    assert fig["layout"]["xaxis"]["type"] == "log" and fig["layout"]["yaxis"]["type"] == "log"
    band = next(t for t in fig["data"] if t.get("name") == "±3% band")
    assert band["y"][0] == pytest.approx(band["x"][0] * 1.03)
    top = [t for t in fig["data"] if t.get("mode") == "markers" and t.get("yaxis", "y") == "y"]
    assert sum(len(t["x"]) for t in top) == 110
    colors = {t["name"]: t["marker"]["color"] for t in top}
    assert colors["Peak allocated · GPU"] == PEAK_COLOR
    assert colors["Activations · CPU"] == ROW_COLORS["activations"]
    assert "Peak allocated · CPU" not in colors  # the CPU has no allocator peak


def test_predictions_come_from_the_ledger_not_from_the_file(results, app_test):
    doc = json.loads((results / "validation-cuda.json").read_text())
    for r in doc["records"]:
        r["predicted_bytes"], r["rel_error"], r["ok"] = 1, -1.0, False  # stale, wrong
    (results / "validation-cuda.json").write_text(json.dumps(doc))
    at = ok(app_test(PAGE).run())
    table = at.dataframe[0].value
    expected = {(r["case"], r["row"]): r["predicted_bytes"] for r in rescore(DOCS[0])}
    gpu = table[table["environment"] == "GPU · NVIDIA H200"]
    assert len(gpu) == len(expected) == 90
    for case, label, gib in zip(gpu["case"], gpu["row"], gpu["predicted GiB"]):
        row = next(k for k, v in vd.LABELS.items() if v == label)
        assert gib * 2**30 == pytest.approx(expected[(case, row)])
    assert at.success  # re-predicted, everything is within the bar again


def test_filters_change_the_table_and_the_link_and_the_link_restores_them(app_test):
    at = ok(app_test(PAGE).run())
    at.button_group(key="pg_rows").set_value(["activations"]).run()
    assert len(ok(at).dataframe[0].value) == 23 and at.query_params == {"rows": "activations"}
    at.radio(key="pg_env").set_value("cpu").run()
    assert len(ok(at).dataframe[0].value) == 5
    at.selectbox(key="pg_case").set_value("llama-tiny bf16").run()
    ok(at)
    assert at.query_params == {"rows": "activations", "env": "cpu", "case": "llama-tiny bf16"}
    table = at.dataframe[0].value
    assert list(table["row"]) == ["Activations"] and list(table["environment"]) == ["CPU"]
    assert len(figures(at)[0]["data"]) > 0
    link = "&".join(f"{k}={v}" for k, v in at.query_params.items())
    fresh = ok(app_test(PAGE, link).run())
    assert fresh.error == [] and fresh.dataframe[0].value.equals(table)
    at.button_group(key="pg_rows").set_value([]).run()  # none picked: all rows, clean link
    assert len(ok(at).dataframe[0].value) == 4 and "rows" not in at.query_params  # no CPU peak


@pytest.mark.parametrize("query,key", [("rows=weights,banana", "rows"), ("env=gpu", "env"),
                                       ("case=gpt-9 bf16", "case"), ("rows=", "rows"),
                                       ("tp=banana", "tp")])
def test_a_bad_link_shows_an_error_and_the_page_still_works(app_test, query, key):
    at = ok(app_test(PAGE, query).run())
    assert any(f"`{key}=" in e.value for e in at.error)
    assert len(parity(at)) == 1 and len(at.dataframe[0].value) == 110
    assert key not in at.query_params  # rewritten to the default


def test_a_missing_results_folder_is_an_error_not_an_exception(tmp_path, monkeypatch, app_test):
    monkeypatch.setenv(vd.ENV_VAR, str(tmp_path / "nowhere"))
    at = ok(app_test(PAGE).run())
    assert any("does not exist" in e.value for e in at.error)
    assert parity(at) == [] and len(at.dataframe[0].value) == 0
    assert at.expander[0].label == "How it was measured"  # the rest of the page is there


def test_a_corrupt_file_is_named_and_the_other_environment_still_shows(results, app_test):
    (results / "validation-cuda.json").write_text("{not json")
    at = ok(app_test(PAGE).run())
    assert any("validation\\-cuda\\.json could not be used" in e.value for e in at.error)
    assert set(at.dataframe[0].value["environment"]) == {"CPU"}
    assert len(parity(at)) == 1


def test_summary_is_the_worst_error_per_row_against_its_bar():
    scored = vd.score(vd.load_results(RESULTS))
    worst = {s.row: s for s in vd.summary(scored.frame)}
    records = [r for d in DOCS for r in rescore(d)]
    for row, tol in TOLERANCE.items():
        mine = [abs(r["rel_error"]) for r in records if r["row"] == row]
        assert worst[row].worst_pct == pytest.approx(100 * max(mine))
        assert worst[row].bar_pct == pytest.approx(100 * tol) and worst[row].ok
    assert worst["peak_allocated"].count == 18  # GPU cases only


def test_a_prediction_outside_the_bar_turns_the_verdict(tmp_path):
    doc = json.loads(json.dumps(DOCS[1]))
    doc["measurements"][0]["activations"] = int(doc["measurements"][0]["activations"] * 1.2)
    (tmp_path / "validation-cpu.json").write_text(json.dumps(doc))
    scored = vd.score(vd.load_results(tmp_path))
    good, sentence = vd.verdict(scored.frame)
    assert not good and sentence.startswith("1 of 20 predictions are outside")
    act = next(s for s in vd.summary(scored.frame) if s.row == "activations")
    assert not act.ok and act.worst_pct == pytest.approx(100 / 6, rel=1e-3)  # 1/1.2 − 1


def test_downloads_carry_exact_bytes_of_the_rows_shown():
    scored = vd.score(vd.load_results(RESULTS))
    shown = vd.select(scored.frame, ("weights",), "cuda", "all")
    lines = vd.to_csv(shown).splitlines()
    assert len(lines) == 1 + 18 and lines[0].startswith("case,row,measured_on")
    body = json.loads(vd.to_json(shown, scored.environments))
    assert {r["row"] for r in body["records"]} == {"weights"}
    assert all(isinstance(r["measured_bytes"], int) for r in body["records"])
    assert body["environments"][0]["environment"].startswith("GPU: NVIDIA H200")


def test_the_timeline_overlay_opens_on_demand(app_test):
    at = ok(app_test(PAGE).run())
    before = len(figures(at))  # no timeline figure until the expander opens
    at.session_state["timeline_open"] = True
    figs = figures(ok(at.run()))
    assert len(figs) == before + 1
    (tl,) = [f for f in figs if "measured" in {tr.get("name") for tr in f["data"]}
             and any(str(tr.get("name")).startswith("peak ") for tr in f["data"])]
    assert "Gradients" in {tr["name"] for tr in tl["data"]}
    at.selectbox(key="pg_tl_run").set_value(3).run()
    titles = [f["layout"]["title"]["text"] for f in figures(ok(at))]
    assert any("persistent foreach" in t for t in titles)


def test_the_page_says_its_figures_are_worst_errors_and_what_the_cases_ran_on(app_test):
    """Issue 32 #8: 'Weights 0.04 %' is a worst error; GPU cases are single-GPU shrunk HF models
    with the hf profile; the multi-rank cases run on CPU (gloo) or fake tensors."""
    at = app_test("pages/validation.py").run()
    assert not at.exception
    assert all(m.label.endswith(": worst") for m in at.metric) and at.metric
    text = " ".join(c.value for c in at.caption)
    for words in ("worst", "single-GPU", "`hf`", "gloo", "fake tensors"):
        assert words in text, words
