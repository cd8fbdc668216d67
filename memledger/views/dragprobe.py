"""Drive the "Drag to preview" component (memledger/views/dragbar.js) with a real pointer and
the keyboard and time what it draws (for the browser tests and benchmarks/bench_slider.py).
Works on a Playwright page; imports nothing of Playwright itself.

The page records, at every animation frame, whether the component's chart changed (its title
and every bar's bytes and geometry), the time of every pointer move and key press, and the
first frame at which the page's own Plotly chart (the first on the page) shows new data after a
release. `sweep` holds the pointer on the range input and moves it across the whole track and
back; `key_sweep` holds an arrow key (auto-repeat) across it; both report distinct chart states
per second while the hand moves. `step_latencies` moves to each value once and times pointer
move → first frame with the new chart. `release` times release → the page's main chart
redrawn with the committed configuration.
"""
from __future__ import annotations

import statistics
import time

ROOT = ".mlp-root"
RANGE = ".mlp-root input.mlp-range"
PROBE = """() => {
  const root = () => document.querySelector('.mlp-root');
  const snap = () => { const r = root(); if (!r) return '';
    const bars = [...r.querySelectorAll('rect')].map(e => [e.getAttribute('data-bytes'),
        e.getAttribute('width'), e.getAttribute('height')].join(':'));
    return r.querySelector('.mlp-title').textContent + '|' + bars.join(','); };
  const main = () => { const gd = document.querySelector('.js-plotly-plot');
    return gd && gd.data ? JSON.stringify(gd.data.map(t => [t.x, t.y])) : ''; };
  if (window.__d) { window.__d.last = snap(); window.__d.states = [];
                    window.__d.moves = []; window.__d.keys = []; return; }
  window.__d = {last: snap(), states: [], moves: [], keys: [], rel: null};
  document.addEventListener('pointermove', () => window.__d.moves.push(performance.now()), true);
  document.addEventListener('keydown', () => window.__d.keys.push(performance.now()), true);
  const up = () => { const d = window.__d;
    if (d.armed) d.rel = {t0: performance.now(), t1: 0, before: main()}; };
  document.addEventListener('pointerup', up, true);
  document.addEventListener('keyup', up, true);
  const loop = () => { const d = window.__d, s = snap();
    if (s !== d.last) { d.last = s; d.states.push([performance.now(), s]); }
    if (d.rel && !d.rel.t1 && main() !== d.rel.before) d.rel.t1 = performance.now();
    requestAnimationFrame(loop); };
  loop();
}"""
# Resolves once the element has kept its place for three animation frames (a scroll settled).
STILL = """e => new Promise(done => { let last = null, same = 0;
  const tick = () => { const y = e.getBoundingClientRect().top;
    same = y === last ? same + 1 : 0; last = y;
    if (same >= 3) done(y); else requestAnimationFrame(tick); };
  tick(); })"""
# Chromium's range thumb is 16 px wide: values sit evenly between half a thumb from each end.
THUMB_PX = 16


def track(page) -> tuple[float, float, float]:
    """(x of the first value, x of the last value, centre y) of the range input, in pixels."""
    inp = page.locator(RANGE).first
    box, height = inp.bounding_box(), page.viewport_size["height"]
    for _ in range(5):  # the page may still be growing under the first scroll: again
        if 120 < box["y"] < height - 120:  # clear of the header and of anything at the bottom
            break
        inp.evaluate("e => e.scrollIntoView({block: 'center', behavior: 'instant'})")
        page.evaluate(STILL, inp.element_handle())
        before, box = box, inp.bounding_box()
        if box["y"] == before["y"] and 0 < box["y"] < height - box["height"]:
            break  # as far as the page scrolls
    return (box["x"] + THUMB_PX / 2, box["x"] + box["width"] - THUMB_PX / 2,
            box["y"] + box["height"] / 2)


def value_x(page, index: int, n_values: int) -> float:
    a, b, _ = track(page)
    return a + (b - a) * index / max(1, n_values - 1)


def probe(page) -> None:
    page.evaluate(PROBE)


def _rates(page, hand_s: float) -> dict:
    states = page.evaluate("() => window.__d.states.map(s => s[0])")
    distinct = page.evaluate("() => new Set(window.__d.states.map(s => s[1])).size")
    span_s = (states[-1] - states[0]) / 1000 if len(states) > 1 else float("inf")
    return {"changes": len(states), "distinct_states": distinct, "drag_s": round(span_s, 3),
            "hand_s": round(hand_s, 3),
            "states_per_s": round((len(states) - 1) / span_s, 1) if len(states) > 1 else 0.0}


def sweep(page, n_values: int, passes: int = 6, hz: float = 60) -> dict:
    """Hold the pointer on the track and move across all of it `passes` times (there and back),
    one move per value at `hz` (a quick hand: the chart, not the pointer, must keep up), then
    let go where it started: distinct chart states per second while the hand moves."""
    probe(page)
    a, b, y = track(page)
    page.mouse.move(a, y)
    page.mouse.down()
    t0, k_all, n = time.perf_counter(), 0, n_values - 1
    for p in range(passes):
        x0, x1 = (a, b) if p % 2 == 0 else (b, a)
        for k in range(1, n + 1):
            k_all += 1
            time.sleep(max(0.0, t0 + k_all / hz - time.perf_counter()))
            page.mouse.move(x0 + (x1 - x0) * k / n, y)
    hand = time.perf_counter() - t0
    page.mouse.up()
    page.wait_for_timeout(300)
    return _rates(page, hand)


def key_sweep(page, n_values: int, passes: int = 2, hz: float = 30) -> dict:
    """Hold ArrowRight, then ArrowLeft (key auto-repeat at `hz`, as an OS repeats a held key)
    across every value `passes` times: chart states per second and keydown → new chart, ms."""
    probe(page)
    page.locator(RANGE).first.focus()
    page.keyboard.press("Home")
    page.wait_for_timeout(200)
    probe(page)
    t0, k_all = time.perf_counter(), 0
    for p in range(passes):
        key = "ArrowRight" if p % 2 == 0 else "ArrowLeft"
        for _ in range(n_values - 1):
            k_all += 1
            time.sleep(max(0.0, t0 + k_all / hz - time.perf_counter()))
            page.keyboard.down(key)  # a held key: Playwright marks repeats as auto-repeat
        page.keyboard.up(key)
    hand = time.perf_counter() - t0
    page.wait_for_timeout(300)
    lat = page.evaluate("""() => { const d = window.__d, out = [];
      for (const [t] of d.states) { const k = d.keys.filter(x => x <= t).pop();
        if (k !== undefined) out.push(t - k); } return out; }""")
    return _rates(page, hand) | {"per_value": summary(lat) if lat else {},
                                 "latencies_ms": [round(x, 1) for x in lat]}


def step_latencies(page, n_values: int) -> list[float]:
    """Hold the pointer at the first value and move to each next one: pointer move → new
    chart, in ms. Lets go where it started."""
    probe(page)
    _, _, y = track(page)
    page.mouse.move(value_x(page, 0, n_values), y)
    page.mouse.down()
    out = []
    for i in range(1, n_values):
        before = page.evaluate("() => window.__d.states.length")
        page.mouse.move(value_x(page, i, n_values), y)
        page.wait_for_function(f"() => window.__d.states.length > {before}", timeout=10_000,
                               polling="raf")
        out.append(page.evaluate(
            f"() => window.__d.states[{before}][0] - window.__d.moves[window.__d.moves.length - 1]"))
    page.mouse.move(value_x(page, 0, n_values), y)
    page.mouse.up()
    return out


SHOWN = """() => { const r = document.querySelector('.mlp-root'), rows = {};
  for (const e of r.querySelectorAll('rect[data-row]'))
    (rows[e.getAttribute('data-rank')] ??= []).push([e.getAttribute('data-row'),
                                                    Number(e.getAttribute('data-bytes'))]);
  return {value: r.dataset.value, ok: r.dataset.ok === '1', rows,
          title: r.querySelector('.mlp-title').textContent,
          sub: r.querySelector('.mlp-sub').textContent,
          head: r.querySelector('.mlp-head').textContent,
          legend: r.querySelector('.mlp-legend').textContent,
          svg: r.querySelector('svg').textContent}; }"""


def hold_at(page, index: int, n_values: int) -> None:
    """Press the pointer on the track at the current value and drag to value `index`, held."""
    _, _, y = track(page)
    cur = int(page.locator(ROOT).first.get_attribute("data-idx"))
    page.mouse.move(value_x(page, cur, n_values), y)
    page.mouse.down()
    page.mouse.move(value_x(page, index, n_values), y, steps=5)
    page.wait_for_timeout(150)


def shown(page) -> dict:
    """What the component draws now: its value, bars (bytes per row per rank) and texts."""
    return page.evaluate(SHOWN)


def arm_release(page) -> None:
    """Time the next release (pointer up or key up) → the page's main chart redrawn."""
    probe(page)
    page.evaluate("() => { window.__d.armed = true; window.__d.rel = null; }")


def release_ms(page, timeout_ms: int = 30_000) -> float:
    page.wait_for_function("() => window.__d.rel && window.__d.rel.t1 > 0", timeout=timeout_ms,
                           polling="raf")
    ms = page.evaluate("() => window.__d.rel.t1 - window.__d.rel.t0")
    page.evaluate("() => { window.__d.armed = false; }")
    return ms


def summary(latencies: list[float]) -> dict:
    s = sorted(latencies)
    return {"median_ms": round(statistics.median(s), 1),
            "p90_ms": round(s[int(0.9 * (len(s) - 1))], 1), "max_ms": round(s[-1], 1)}
