"""The dashboard in a real browser (system Chromium via Playwright): drag a parallelism slider
with the keyboard, watch the URL and the chart change, open the link in a new page and get the
same chart, download the chart as SVG and the ledger as CSV, and keep the settings on another
page. Skipped without Chromium, unless MEMLEDGER_REQUIRE_BROWSER=1 (CI), where that fails."""
import csv
import io
import os
import time

import pytest

from conftest import require_browser
from memledger.views.devserver import chromium, streamlit_app, wait_idle

pytestmark = pytest.mark.browser

CHART_DATA = """() => {
  const gd = document.querySelector('.js-plotly-plot');
  return gd && gd.data ? JSON.stringify(gd.data.map(t => [t.name, Array.from(t.x || [])])) : null;
}"""


@pytest.fixture(scope="module")
def browser_app():
    require_browser()
    os.environ["MEMLEDGER_EXPORT_WARMUP"] = "1"  # the app starts kaleido for the SVG download
    try:
        with streamlit_app() as base, chromium() as browser:
            yield base, browser
    finally:
        os.environ["MEMLEDGER_EXPORT_WARMUP"] = "0"


def wait_for_chart_change(page, before: str, timeout_s: float = 20) -> str:
    page.wait_for_function(f"() => ({CHART_DATA})() !== {before!r}", timeout=timeout_s * 1000)
    wait_idle(page)
    return page.evaluate(CHART_DATA)


def test_a_share_link_as_the_first_request_of_a_fresh_server_opens_inside_the_app(browser_app):
    """Runs first (module order): the server has served nothing yet. Streamlit would route a
    deep link through a top-level pages/ folder before app.py's st.navigation ran, so the pages
    live in pages/; the link must open with the app's navigation and its settings."""
    base, browser = browser_app
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{base}/staircase?tp=4")
    wait_idle(page)
    page.wait_for_function(f"() => ({CHART_DATA})() !== null", timeout=30_000)
    assert page.get_by_role("link", name="Where memory goes", exact=True).count() >= 1  # app menu
    assert page.get_by_role("link", name="app", exact=True).count() == 0  # no auto pages/ menu
    assert page.get_by_role("slider", name="TP: tensor parallel").get_attribute(
        "aria-valuetext") == "4"
    page.close()


def _open_charted(page, url: str) -> None:
    """Open `url` and wait until its two charts are drawn and the app is idle."""
    page.goto(url, wait_until="commit")
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg')"
                           ".length >= 2", timeout=30_000)
    wait_idle(page)


def test_a_hostile_staircase_link_answers_within_3_s_with_its_budget_said(browser_app):
    """Issue 32 #3: m = 65,535 at pp = 64 is 262,142 timeline events (1.6 M points took ~10 s
    on the server and ~20 s in the browser). Over the events budget, the page answers with the
    reason (naming m) and the staircase, and no chart draws more than MAX_DRAWN_EVENTS; the
    whole answer within 3 s on a warm server, or, on a machine loaded enough that an ordinary
    link takes longer, within 1.5x the ordinary link's answer measured just before."""
    from memledger.views.budget import MAX_DRAWN_EVENTS
    base, browser = browser_app
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    _open_charted(page, f"{base}/staircase?m=8&pp=4")  # warm: the page's imports
    t0 = time.monotonic()  # an ordinary link on the same warm server: the machine's pace now
    _open_charted(page, f"{base}/staircase?m=16&pp=4&world=512")
    ordinary = time.monotonic() - t0
    t0 = time.monotonic()
    page.goto(f"{base}/staircase?m=65535&pp=64&world=512", wait_until="commit")
    page.get_by_text("more than this server builds for one request").wait_for(timeout=30_000)
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg')"
                           ".length >= 1", timeout=30_000)
    wait_idle(page)
    elapsed = time.monotonic() - t0
    points = page.evaluate("() => Math.max(...[...document.querySelectorAll('.js-plotly-plot')]"
                           ".map(gd => (gd.data || []).reduce((n, t) => n + (t.x || []).length,"
                           " 0)))")
    assert points <= 7 * MAX_DRAWN_EVENTS, points
    assert elapsed <= max(3.0, 1.5 * ordinary), \
        f"{elapsed:.1f} s (an ordinary link: {ordinary:.1f} s)"
    page.close()


COPY_SHOWN = """() => {
  const b = document.querySelector("[data-testid='stPopoverBody'] button[aria-label='Copy to clipboard']");
  if (!b) return null;
  let shown = true;
  for (let e = b; e; e = e.parentElement) {
    const s = getComputedStyle(e);
    shown = shown && s.opacity !== '0' && s.visibility !== 'hidden';
  }
  return [shown, getComputedStyle(b, '::after').content];
}"""


def test_the_share_popover_shows_a_labelled_copy_button_without_hovering(browser_app):
    """Issue 32 #12: Streamlit shows a code block's copy button only under the pointer."""
    base, browser = browser_app
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{base}/ledger")
    wait_idle(page)
    page.get_by_role("button", name="Share link").click()
    page.wait_for_selector("[data-testid='stPopoverBody'] [data-testid='stCode']")
    page.mouse.move(2, 2)  # the pointer away from the box
    assert page.evaluate(COPY_SHOWN) == [True, '"Copy"']
    page.close()


def test_slider_url_share_link_and_downloads(browser_app, tmp_path):
    base, browser = browser_app
    t0 = time.monotonic()
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = ctx.new_page()
    page.goto(base)
    wait_idle(page)
    before = page.evaluate(CHART_DATA)
    assert before and "Weights" in before

    slider = page.get_by_role("slider", name="TP: tensor parallel")
    slider.focus()
    page.keyboard.press("ArrowLeft")  # tp 8 → 4
    page.wait_for_url("**tp=4**", timeout=20_000)
    after = wait_for_chart_change(page, before)
    assert after != before

    other = ctx.new_page()  # the share link in a fresh page reproduces the chart
    other.goto(page.url)
    wait_idle(other)
    other.wait_for_function(f"() => ({CHART_DATA})() === {after!r}", timeout=20_000)
    assert other.get_by_role("slider", name="TP: tensor parallel").get_attribute(
        "aria-valuetext") == "4"
    other.close()

    page.get_by_text("Downloads: PNG, SVG, HTML, CSV, JSON").click()  # built only when shown
    page.get_by_role("button", name="SVG").wait_for(timeout=20_000)
    wait_idle(page)
    with page.expect_download(timeout=60_000) as dl:
        page.get_by_role("button", name="SVG").click()
    svg = (tmp_path / "chart.svg")
    dl.value.save_as(svg)
    text = svg.read_text()
    assert text.lstrip().startswith("<svg") and "tp 4" in text
    assert "64 × H100 SXM · memledger " in text  # what produced the chart, and when
    assert dl.value.suggested_filename.endswith("_tp4_pp4_ep1_cp1_dp4_zero1_mb1x4096.svg")

    with page.expect_download(timeout=30_000) as dl:
        page.get_by_role("button", name="Rows per rank (CSV)").click()
    rows = list(csv.DictReader(io.StringIO(open(dl.value.path()).read())))
    assert [r["pp_rank"] for r in rows] == ["0", "1", "2", "3"]
    assert all(int(r["peak_total_bytes"]) > 0 for r in rows)

    page.get_by_role("link", name="Pipeline staircase").click()  # settings follow to other pages
    page.wait_for_url("**/staircase?**tp=4**", timeout=20_000)
    wait_idle(page)

    page.get_by_role("link", name="Validation").click()  # a page without the model sidebar
    page.wait_for_url("**/validation?**tp=4**", timeout=20_000)
    wait_idle(page)
    assert "Peak allocated · GPU" in page.evaluate(CHART_DATA)
    ctx.close()
    assert time.monotonic() - t0 < 90
