"""Every peak on a page says which it is (allocated / reserved / total), in one format: issue 32
item 4 — the Staircase's chart, its timeline and its verdict name the same peak total the Ledger
page does, with two decimals."""
import re

from conftest import figures
from memledger.views.compute import ledger_for
from memledger.views.peaks import peak_label
from memledger.views.state import load_model, parse_params

LABEL = re.compile(r"peak (allocated|reserved|total) [\d,]+\.\d\d GiB")


def default_ledger():
    return ledger_for(load_model("llama3-70b"), parse_params({})[0])


def annotations(fig):
    return [a["text"] for a in fig["layout"].get("annotations", ())]


def test_staircase_labels_its_peaks_and_says_fits(app_test):
    at = app_test("pages/staircase.py").run()
    assert not at.exception
    led = default_ledger()
    total = peak_label("total", led.peak.peak_total_bytes)
    stair, timeline = figures(at)[:2]
    assert f"most loaded: {total}" in annotations(stair)
    banner = at.success[0].value
    assert banner.startswith("**Fits:") and total in banner
    r = led.peak
    sentence = next(m.value for m in at.markdown if "peak allocated" in m.value)
    assert peak_label("allocated", r.peak_allocated_bytes) in sentence and total in sentence
    peak_text = next(tr["name"] for tr in timeline["data"]
                     if tr["name"].startswith("peak allocated"))
    assert LABEL.fullmatch(peak_text) and peak_text.startswith("peak allocated")


def test_staircase_says_over_when_it_does_not_fit(app_test):
    at = app_test("pages/staircase.py", "tp=1&pp=1").run()
    assert not at.exception
    assert any(e.value.startswith("**Over by") and "peak total" in e.value for e in at.error)


def test_ledger_page_names_its_peak_total_the_same_way(app_test):
    at = app_test("pages/ledger.py").run()
    assert not at.exception
    led = default_ledger()
    metric = next(m for m in at.metric if m.label == "Busiest GPU, peak total")
    assert metric.value == f"{led.peak.peak_total_bytes / 2**30:.2f} GiB"
    assert peak_label("total", led.peak.peak_total_bytes) in at.success[0].value


def test_planner_table_says_its_peak_is_the_total(app_test):
    at = app_test("pages/planner.py", "world=64").run(timeout=120)
    assert not at.exception
    x_title = figures(at)[0]["layout"]["xaxis"]["title"]["text"]
    assert x_title.startswith("peak total of the most loaded rank")


def test_strategies_names_the_peak_total(app_test):
    at = app_test("pages/strategies.py").run(timeout=60)
    assert not at.exception
    titles = [f["layout"]["title"]["text"] for f in figures(at)]
    assert any(LABEL.search(t) and "peak total" in t for t in titles), titles
