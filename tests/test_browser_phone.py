"""Every page on a phone (390 × 844, a common phone viewport) in a real browser: no chart's text
(titles, subtitles, legend entries, labels) reaches past the chart's own box, and no metric is
cut off. Skipped without Chromium, unless MEMLEDGER_REQUIRE_BROWSER=1 (CI)."""

import pytest

from memledger.views.devserver import wait_idle

pytestmark = pytest.mark.browser

PAGES = ("", "ledger?tp=4", "staircase?schedule=zb-v&m=16", "where", "strategies", "planner",
         "validation",
         "?model=deepseek-v3")

OVERFLOW = """() => {
  const out = [];
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const box = gd.getBoundingClientRect();
    if (box.width === 0) continue;
    for (const t of gd.querySelectorAll('.main-svg text, .infolayer text')) {
      const r = t.getBoundingClientRect();
      if (r.width === 0 || !t.textContent.trim()) continue;
      if (r.right > box.right + 2 || r.left < box.left - 2)
        out.push(`${t.textContent.slice(0, 40)} [${Math.round(r.left)}..${Math.round(r.right)}`
                 + ` of ${Math.round(box.left)}..${Math.round(box.right)}]`);
    }
  }
  for (const m of document.querySelectorAll('[data-testid="stMetricValue"] div')) {
    if (m.scrollWidth > m.clientWidth + 1) out.push('metric ' + m.textContent);
  }
  return out;
}"""




@pytest.mark.parametrize("path", PAGES)
def test_no_chart_text_overflows_on_a_phone(served_app, path):
    base, browser = served_app
    page = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2)
    page.goto(f"{base}/{path}")
    wait_idle(page)
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)
    page.wait_for_timeout(500)  # plotly's responsive relayout after the first paint
    assert page.evaluate(OVERFLOW) == []
    page.close()
