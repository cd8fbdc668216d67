"""Every page on a phone (390 × 844, a common phone viewport) in a real browser: no chart's text
(titles, subtitles, legend entries, labels) reaches past the chart's own box, no metric is cut
off, and no two text boxes of a chart overlap (annotations, legend entries, axis titles, tick
labels, the title, text on the data: what a person sees as labels piled up). The pages with
the longest labels are checked on a desktop too. Skipped without Chromium, unless
MEMLEDGER_REQUIRE_BROWSER=1 (CI). Look at them: `python benchmarks/screenshots.py --phone`."""

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


# Pairs of SVG text boxes of one chart that overlap by more than 2 px both ways. Tick labels
# among themselves and text on the data among itself are Plotly's own to thin out; a legend
# entry's text against another entry's symbol is not checked (see docs: known limits).
OVERLAP = """() => {
  const out = [];
  const kinds = [['annotation', 'g.annotation text'], ['legend', '.legend text'],
                 ['xtitle', '.g-xtitle text, .g-x2title text'],
                 ['ytitle', '.g-ytitle text, .g-y2title text'],
                 ['tick', '.xtick text, .ytick text, .x2tick text, .y2tick text'],
                 ['title', '.g-gtitle text'], ['label', '.textpoint text, .bartext']];
  let n = 0;
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    n += 1;
    const items = [];
    for (const [kind, sel] of kinds)
      for (const t of gd.querySelectorAll(sel)) {
        const r = t.getBoundingClientRect();
        if (r.width < 1 || r.height < 1 || (kind !== 'symbol' && !t.textContent.trim())) continue;
        if (getComputedStyle(t).opacity === '0') continue;
        const entry = t.closest('.traces');
        items.push([kind, (t.textContent || '').trim().slice(0, 30) || kind, r, entry]);
      }
    for (let i = 0; i < items.length; i++)
      for (let j = i + 1; j < items.length; j++) {
        const [ka, ta, a, ea] = items[i], [kb, tb, b, eb] = items[j];
        if (ka === kb && (ka === 'label' || ka === 'tick')) continue;
        if (ea && ea === eb) continue;  // one legend entry's own symbol and text
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 2 && h > 2) out.push(`chart ${n}: ${ka} "${ta}" × ${kb} "${tb}"`);
      }
  }
  return out;
}"""


def _open(served_app, path: str, width: int, height: int):
    base, browser = served_app
    page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=2)
    page.goto(f"{base}/{path}")
    wait_idle(page)
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)
    page.wait_for_timeout(500)  # plotly's responsive relayout after the first paint
    return page


@pytest.mark.parametrize("path", PAGES)
def test_no_chart_text_overflows_or_overlaps_on_a_phone(served_app, path):
    page = _open(served_app, path, 390, 844)
    assert page.evaluate(OVERFLOW) == []
    assert page.evaluate(OVERLAP) == []
    page.close()


@pytest.mark.parametrize("path", ("staircase", "validation"))
def test_no_chart_text_overlaps_on_a_desktop(served_app, path):
    """'peak 36.07 GiB' sat on 'steady state'; the Validation timeline read 'optimpeak'."""
    page = _open(served_app, path, 1280, 900)
    assert page.evaluate(OVERLAP) == []
    page.close()
