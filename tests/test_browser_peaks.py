"""What a person reads on the Staircase page in a real browser (issue 32 item 4): the chart's
'most loaded' note, the fits banner and the timeline sentence name the same peak total, and the
timeline's own peak says it is allocated, all in GiB with two decimals."""
import re

import pytest

from conftest import require_browser
from memledger.views.compute import ledger_for
from memledger.views.devserver import chromium, streamlit_app, wait_idle
from memledger.views.peaks import peak_label
from memledger.views.state import load_model, parse_params

pytestmark = pytest.mark.browser

NOTES = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
  .map(gd => (gd.layout.annotations || []).map(a => a.text).concat(
     (gd.data || []).filter(t => (t.name || '').startsWith('peak allocated')).map(t => t.name)))"""


def test_staircase_peaks_read_the_same_in_the_browser():
    require_browser()
    led = ledger_for(load_model("llama3-70b"), parse_params({})[0])
    total = peak_label("total", led.peak.peak_total_bytes)
    with streamlit_app() as base, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/staircase")
        wait_idle(page)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2",
                               timeout=30_000)
        notes = page.evaluate(NOTES)
        body = page.inner_text("body")
        page.close()
    assert f"most loaded: {total}" in notes[0]
    assert any(re.fullmatch(r"peak allocated [\d,]+\.\d\d GiB", t or "") for t in notes[1])
    assert f"Fits: {total}" in body
    assert peak_label("allocated", led.peak.peak_allocated_bytes) in body
    assert body.count(total) >= 2  # the banner and the timeline sentence
