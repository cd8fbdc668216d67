"""Drive the "Drag to preview" slider with a real pointer and time what the chart does (for the
browser test and benchmarks/bench_slider.py). Works on a Playwright page; imports nothing of
Playwright itself.

The page records, at every animation frame, whether the preview chart's title or data changed,
and the time of every pointer move; `sweep` (Playwright's mouse) and `page_sweep` (events the
page dispatches on its own 60 Hz clock) drag the grip across the whole rail and back and report
chart states per second while the hand moves; `step_latencies` moves the grip to each step
once and times pointer move → first frame with the new chart; `at_step` reads what one step
draws.
"""
from __future__ import annotations

import statistics
import time

# The preview figure is the Plotly chart that has a slider (class `slider-container`).
PROBE = """() => {
  const chart = () => [...document.querySelectorAll('.js-plotly-plot')]
      .find(gd => gd.querySelector('.slider-container'));
  const snap = () => { const gd = chart();
    return gd && gd.data ? JSON.stringify([gd.layout.title.text,
                                           gd.data.map(t => [t.x, t.y, t.customdata])]) : ''; };
  window.__d = {last: snap(), states: [], moves: []};
  window.__dsnap = snap;
  document.addEventListener('mousemove', () => window.__d.moves.push(performance.now()), true);
  const loop = () => { const s = snap();
    if (s !== window.__d.last) { window.__d.last = s; window.__d.states.push([performance.now(), s]); }
    requestAnimationFrame(loop); };
  loop();
}"""
RAIL = ".js-plotly-plot .slider-container .slider-rail-rect"
GRIP = ".js-plotly-plot .slider-container .slider-grip-rect"
CUSTOMDATA = """() => { const gd = [...document.querySelectorAll('.js-plotly-plot')]
    .find(gd => gd.querySelector('.slider-container'));
  return [gd.layout.sliders[0].active, gd.data.map(t => [t.name, t.customdata])]; }"""


def rail(page) -> tuple[float, float, float]:
    """(left x, right x, centre y) of the slider's rail, in page pixels."""
    page.locator(RAIL).first.evaluate("e => e.scrollIntoView({block: 'center'})")
    box = page.locator(RAIL).first.bounding_box()
    return box["x"], box["x"] + box["width"], box["y"] + box["height"] / 2


def step_x(page, index: int, n_steps: int) -> float:
    """Where step `index` of `n_steps` sits on the rail (Plotly spaces steps evenly and insets
    the rail by half the grip's width at both ends)."""
    left, right, _ = rail(page)
    inset = 10
    return left + inset + (right - left - 2 * inset) * index / max(1, n_steps - 1)


def sweep(page, n_steps: int, passes: int = 6, moves_per_step: int = 1, hz: float = 60) -> dict:
    """Hold the grip and move across the whole rail `passes` times (there and back), one
    pointer event every 1/`hz` s as a mouse reports them (Plotly's slider acts once per
    animation frame on the latest position, so an unpaced burst would only show its last):
    distinct chart states per second while dragging, from the first to the last change."""
    page.evaluate(PROBE)
    _, _, y = rail(page)
    xs = [step_x(page, 0, n_steps), step_x(page, n_steps - 1, n_steps)]
    page.mouse.move(xs[0], y)
    page.mouse.down()
    t0, k_all = time.perf_counter(), 0
    for p in range(passes):
        a, b = (xs[0], xs[1]) if p % 2 == 0 else (xs[1], xs[0])
        n = moves_per_step * (n_steps - 1)  # a quick hand: the chart, not the pointer, limits
        for k in range(1, n + 1):
            k_all += 1
            time.sleep(max(0.0, t0 + k_all / hz - time.perf_counter()))
            page.mouse.move(a + (b - a) * k / n, y)
    page.mouse.up()
    page.wait_for_timeout(300)
    return _rates(page)


# The same sweep with the pointer events dispatched by the page itself, exactly every 1/hz s
# (what a mouse reports), so the hand's pace does not depend on the automation's round trips.
PAGE_SWEEP = """async ([x0, x1, y, passes, n, hz]) => {
  const gd = [...document.querySelectorAll('.js-plotly-plot')]
      .find(gd => gd.querySelector('.slider-container'));
  const fire = (el, type, x) => el.dispatchEvent(new MouseEvent(type, {bubbles: true,
      cancelable: true, clientX: x, clientY: y, button: 0, buttons: 1, view: window}));
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  // on the slider itself, not whatever is at that point: a toast may be passing over it
  fire(gd.querySelector('.slider-rail-touch-rect') || gd.querySelector('.slider-container'),
       'mousedown', x0);
  const t0 = performance.now(); let k = 0;
  for (let p = 0; p < passes; p++) {
    const [a, b] = p % 2 ? [x1, x0] : [x0, x1];
    for (let i = 1; i <= n; i++) {
      k++; await sleep(Math.max(0, t0 + k * 1000 / hz - performance.now()));
      fire(gd, 'mousemove', a + (b - a) * i / n);
    }
  }
  fire(gd, 'mouseup', passes % 2 ? x1 : x0);
  return performance.now() - t0;
}"""


def page_sweep(page, n_steps: int, passes: int = 6, moves_per_step: int = 1,
               hz: float = 60) -> dict:
    """`sweep` with the page dispatching the pointer events on its own clock."""
    page.wait_for_timeout(500)  # let Streamlit finish drawing the figure
    page.evaluate(PROBE)
    _, _, y = rail(page)
    xs = [step_x(page, 0, n_steps), step_x(page, n_steps - 1, n_steps)]
    hand_ms = page.evaluate(PAGE_SWEEP, [xs[0], xs[1], y, passes,
                                         moves_per_step * (n_steps - 1), hz])
    page.wait_for_timeout(300)
    return _rates(page) | {"hand_s": round(hand_ms / 1000, 3)}


def _rates(page) -> dict:
    states = page.evaluate("() => window.__d.states.map(s => s[0])")
    distinct = page.evaluate("() => new Set(window.__d.states.map(s => s[1])).size")
    span_s = (states[-1] - states[0]) / 1000 if len(states) > 1 else float("inf")
    return {"changes": len(states), "distinct_states": distinct, "drag_s": round(span_s, 3),
            "states_per_s": round((len(states) - 1) / span_s, 1) if len(states) > 1 else 0.0}


def step_latencies(page, n_steps: int) -> list[float]:
    """Drag the grip to each step in turn (from the first): pointer move → new chart, in ms."""
    page.evaluate(PROBE)
    _, _, y = rail(page)
    page.mouse.move(step_x(page, 0, n_steps), y)
    page.mouse.down()
    out = []
    for i in range(1, n_steps):
        before = page.evaluate("() => window.__d.states.length")
        page.mouse.move(step_x(page, i, n_steps), y)
        page.wait_for_function(f"() => window.__d.states.length > {before}", timeout=10_000,
                               polling="raf")
        out.append(page.evaluate(
            f"() => window.__d.states[{before}][0] - window.__d.moves[window.__d.moves.length - 1]"))
    page.mouse.up()
    return out


def at_step(page, index: int, n_steps: int) -> tuple[int, list]:
    """Drag the grip to step `index` and hold it there: the active step and each trace's
    (name, customdata) the chart then draws."""
    _, _, y = rail(page)
    page.mouse.move(page.locator(GRIP).first.bounding_box()["x"] + 5, y)
    page.mouse.down()
    page.mouse.move(step_x(page, index, n_steps), y, steps=5)
    page.wait_for_timeout(200)
    found = page.evaluate(CUSTOMDATA)
    page.mouse.up()
    return found[0], found[1]


def summary(latencies: list[float]) -> dict:
    s = sorted(latencies)
    return {"median_ms": round(statistics.median(s), 1),
            "p90_ms": round(s[int(0.9 * (len(s) - 1))], 1), "max_ms": round(s[-1], 1)}
