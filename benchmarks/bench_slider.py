"""Slider-to-redrawn-chart latency on the Ledger page, in a real browser, with DeepSeek-V3.

Starts the app, opens the Ledger page for DeepSeek-V3 on 2048 GPUs (pp 16), and moves the EP
and TP sliders with the keyboard along a snake through their grid, so that every move asks for
a configuration the app has not computed yet (no cache hits). For each move the page itself
times the keydown and the first animation frame at which the Plotly chart holds new data.
Separately times `build_ledger` for each of the same configurations, to show the share of the
latency that is the ledger arithmetic.

    python benchmarks/bench_slider.py [--moves 39] [--json out.json] [--floor] [--drag]

Targets (docs/design.md §11, the dashboard issue): median latency ≤ 400 ms; build_ledger ≤ 5% of it.
--floor also times the same keyboard moves on a one-slider, one-bar Streamlit app: what this
machine's Streamlit + Chromium cost before any of memledger's work (the machine is shared, so
the load average is printed with the figures); release → redraw is then reported as a ratio to
it, median and p90 (issue 15: ≤ 1.2× and ≤ 1.5×).
--drag times the "Drag to preview" slider under the Ledger chart (memledger/views/preview.py):
the pointer held and swept across every EP value and back six times at 60 Hz (events
dispatched by the page on its own clock, and again by Playwright's mouse), distinct chart
states per second while the hand moves (issue 15: ≥ 20), and pointer move → new chart for
each value in turn (memledger/views/dragprobe.py).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memledger import build_ledger  # noqa: E402
from memledger.views.devserver import _wait_healthy, chromium, free_port, streamlit_app, wait_idle
from memledger.views.state import Config, load_model, parse_params, to_specs  # noqa: E402

QUERY = "model=deepseek-v3&world=2048&tp=16&pp=16&ep=1"
EP_LABEL, TP_LABEL = "EP: expert parallel", "TP: tensor parallel"

# Records keydown time and the first frame at which the chart's data differ from before it.
PROBE = """() => {
  const snap = () => { const gd = document.querySelector('.js-plotly-plot');
    return gd && gd.data ? JSON.stringify(gd.data.map(t => Array.from(t.x || []))) : ''; };
  window.__b = {t0: 0, t1: 0, before: snap()};
  document.addEventListener('keydown', () => {
    window.__b = {t0: performance.now(), t1: 0, before: snap()}; }, true);
  const loop = () => { const b = window.__b;
    if (b.t0 && !b.t1 && snap() !== b.before) b.t1 = performance.now();
    requestAnimationFrame(loop); };
  loop();
}"""


def snake(ep_steps: int, tp_steps: int) -> list[tuple[str, str]]:
    """(slider, key) moves visiting every (tp, ep) grid point once."""
    moves, direction = [], "ArrowRight"
    for row in range(tp_steps + 1):
        moves += [(EP_LABEL, direction)] * ep_steps
        if row < tp_steps:
            moves.append((TP_LABEL, "ArrowLeft"))
        direction = "ArrowLeft" if direction == "ArrowRight" else "ArrowRight"
    return moves


def configs_along(moves, start: Config, ep_opts, tp_opts) -> list[Config]:
    cfg, out = start, []
    for label, key in moves:
        field, opts = ("ep", ep_opts) if label == EP_LABEL else ("tp", tp_opts)
        i = opts.index(getattr(cfg, field)) + (1 if key == "ArrowRight" else -1)
        cfg = replace(cfg, **{field: opts[i]})
        out.append(cfg)
    return out


def time_ledgers(configs: list[Config]) -> list[float]:
    m = load_model("deepseek-v3")
    out = []
    for cfg in configs:
        par, train = to_specs(cfg, m)
        t0 = time.perf_counter()
        build_ledger(m, par, train)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run(n_moves: int) -> dict:
    from memledger.views.options import valid_values
    start, _ = parse_params(dict(p.split("=") for p in QUERY.split("&")))
    m = load_model(start.model)
    ep_opts, tp_opts = list(valid_values(m, start, "ep")), list(valid_values(m, start, "tp"))
    moves = snake(len(ep_opts) - 1, tp_opts.index(start.tp))[:n_moves]
    latencies = []
    with streamlit_app() as base, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/?{QUERY}")
        wait_idle(page)
        page.evaluate(PROBE)
        for label, key in moves:
            page.get_by_role("slider", name=label).focus()
            page.keyboard.press(key)
            page.wait_for_function("() => window.__b.t1 > 0", timeout=30_000, polling="raf")
            latencies.append(page.evaluate("() => window.__b.t1 - window.__b.t0"))
            wait_idle(page)  # let the run finish before the next move
        final_url = page.url
    ledger_ms = time_ledgers(configs_along(moves, start, ep_opts, tp_opts))
    med, led = statistics.median(latencies), statistics.median(ledger_ms)
    return {"moves": len(latencies), "median_ms": round(med, 1),
            "p90_ms": round(sorted(latencies)[int(0.9 * (len(latencies) - 1))], 1),
            "min_ms": round(min(latencies), 1), "max_ms": round(max(latencies), 1),
            "build_ledger_median_ms": round(led, 2), "ledger_share_pct": round(100 * led / med, 1),
            "final_url": final_url, "latencies_ms": [round(x, 1) for x in latencies]}


FLOOR_APP = """
import plotly.graph_objects as go
import streamlit as st
v = st.sidebar.select_slider("TP: tensor parallel", [1, 2, 4, 8, 16], value=8)
st.plotly_chart(go.Figure(go.Bar(x=[v], y=["a"], orientation="h")), theme=None)
"""


def floor(n_moves: int) -> list[float]:
    """Latencies of the same measurement on a trivial one-slider app."""
    with tempfile.TemporaryDirectory() as d:
        app = Path(d) / "floor.py"
        app.write_text(FLOOR_APP)
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(app),
                                 "--server.headless", "true", "--server.port", str(port),
                                 "--browser.gatherUsageStats", "false"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_healthy(base, proc, 60)
            with chromium() as browser:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(base)
                wait_idle(page)
                page.evaluate(PROBE)
                out = []
                for i in range(n_moves):
                    page.get_by_role("slider", name=TP_LABEL).focus()
                    page.keyboard.press("ArrowLeft" if i % 2 == 0 else "ArrowRight")
                    page.wait_for_function("() => window.__b.t1 > 0", timeout=30_000, polling="raf")
                    out.append(page.evaluate("() => window.__b.t1 - window.__b.t0"))
                    wait_idle(page)
        finally:
            proc.terminate()
            proc.wait(10)
    return out


def p90(xs: list[float]) -> float:
    return sorted(xs)[int(0.9 * (len(xs) - 1))]


def drag(runs: int = 3) -> dict:
    """Frames per second and per-value latency of the preview slider, DeepSeek-V3, EP axis."""
    from memledger.views import dragprobe
    from memledger.views.preview import candidates
    start, _ = parse_params(dict(p.split("=") for p in QUERY.split("&")))
    n = len(candidates(load_model(start.model), start, "ep"))
    with streamlit_app() as base, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/ledger?{QUERY}")
        wait_idle(page)
        t0 = time.perf_counter()
        page.get_by_text("Drag to preview").first.click()
        page.locator(dragprobe.RAIL).first.wait_for(timeout=60_000)
        wait_idle(page)
        open_ms = (time.perf_counter() - t0) * 1000
        page_hand = [dragprobe.page_sweep(page, n) for _ in range(runs)]
        mouse = [dragprobe.sweep(page, n) for _ in range(runs)]
        lat = [x for _ in range(runs) for x in dragprobe.step_latencies(page, n)]
    best = max(r["states_per_s"] for r in page_hand)
    return {"values": n, "open_panel_ms": round(open_ms), "page_hand": page_hand,
            "playwright_mouse": mouse, "states_per_s_best": best,
            "states_per_s_median": statistics.median(r["states_per_s"] for r in page_hand),
            "per_value": dragprobe.summary(lat)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=int, default=39, help="slider moves (at least 20)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--floor", action="store_true", help="also time a trivial one-slider app")
    ap.add_argument("--drag", action="store_true", help="also time the drag-to-preview slider")
    args = ap.parse_args()
    res = run(max(20, args.moves))
    res["load_average"] = [round(x, 2) for x in os.getloadavg()]
    res["cpus"] = os.cpu_count()
    if args.floor:
        fl = floor(20)
        res["floor_median_ms"], res["floor_p90_ms"] = round(statistics.median(fl), 1), round(p90(fl), 1)
        res["release_ratio_median"] = round(res["median_ms"] / res["floor_median_ms"], 2)
        res["release_ratio_p90"] = round(res["p90_ms"] / res["floor_p90_ms"], 2)
    print(f"slider → redrawn chart, DeepSeek-V3 ({res['moves']} moves): median "
          f"{res['median_ms']} ms, p90 {res['p90_ms']} ms, min {res['min_ms']}, "
          f"max {res['max_ms']}")
    print(f"build_ledger: median {res['build_ledger_median_ms']} ms = "
          f"{res['ledger_share_pct']}% of the median latency")
    print(f"machine: {res['cpus']} CPUs, load average {res['load_average']}"
          + (f"; trivial one-slider app: median {res['floor_median_ms']} ms" if args.floor else ""))
    print(f"targets: median ≤ 400 ms {'met' if res['median_ms'] <= 400 else 'MISSED'}; "
          f"ledger ≤ 5% {'met' if res['ledger_share_pct'] <= 5 else 'MISSED'}")
    if args.floor:
        print(f"release → redraw vs floor: median {res['release_ratio_median']}× (target ≤ 1.2), "
              f"p90 {res['release_ratio_p90']}× (target ≤ 1.5)")
    if args.drag:
        d = res["drag"] = drag()
        print(f"drag to preview, EP of DeepSeek-V3 ({d['values']} values): "
              f"{d['states_per_s_median']} chart states/s median of {len(d['page_hand'])} sweeps "
              f"(best {d['states_per_s_best']}; target ≥ 20), Playwright mouse "
              f"{[r['states_per_s'] for r in d['playwright_mouse']]}; pointer move → new chart "
              f"median {d['per_value']['median_ms']} ms, p90 {d['per_value']['p90_ms']} ms; "
              f"opening the panel {d['open_panel_ms']} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
