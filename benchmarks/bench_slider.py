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
--drag times the "Drag to preview" component under the Ledger chart (memledger/views/
preview_panel.py, dragbar.js), with memledger/views/dragprobe.py: the pointer held on its range
input and swept across every EP value and back six times at 60 Hz (Playwright's mouse: trusted
events, which a native range input needs), and an arrow key held (auto-repeat at 30 Hz) across
them: distinct chart states per second while the hand moves (issue 15: ≥ 20) and pointer move /
key down → the first animation frame with the new chart. Then release → redraw for the
component: pointer up (or key up) on a new valid value → the first animation frame at which
the page's main Plotly chart holds the released configuration's data (so the app's state has
changed: the server reran the page with the committed value), against the same floor.

"Release → redraw" is, throughout: the user's release (keydown on the sidebar slider, which
Streamlit commits at once; pointer up or key up on the component) → the first animation frame
at which the page's main chart (the first Plotly chart) draws different data. It includes the
websocket round trip, the page's rerun on the server and the browser's re-render.
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
from memledger.views.devserver import (ROOT, _wait_healthy, chromium, free_port,  # noqa: E402
                                       streamlit_app, wait_idle)
from memledger.views.state import Config, load_model, parse_params, to_specs  # noqa: E402

QUERY = "model=deepseek-v3&world=2048&tp=16&pp=16&ep=1"
EP_LABEL, TP_LABEL = "EP: expert parallel", "TP: tensor parallel"

def change_probe(snap: str, var: str) -> str:
    """JS that records, in window[var], each keydown's time (t0) and the first animation frame
    at which `snap()` (a JS expression of the page's state) differs from before it (t1)."""
    return ("() => {\n"
            f"  const snap = {snap};\n"
            f"  window.{var} = {{t0: 0, t1: 0, before: snap()}};\n"
            "  document.addEventListener('keydown', () => {\n"
            f"    window.{var} = {{t0: performance.now(), t1: 0, before: snap()}}; }}, true);\n"
            f"  const loop = () => {{ const b = window.{var};\n"
            "    if (b.t0 && !b.t1 && snap() !== b.before) b.t1 = performance.now();\n"
            "    requestAnimationFrame(loop); };\n"
            "  loop();\n}")


# keydown time and the first frame at which the chart's data differ from before it
PROBE = change_probe("() => { const gd = document.querySelector('.js-plotly-plot');\n"
                     "    return gd && gd.data ? JSON.stringify(gd.data.map(t => "
                     "Array.from(t.x || []))) : ''; }", "__b")


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
        # run from the repository root: the same .streamlit/config.toml (theme, toolbar, no
        # file watcher) as the app, whatever directory the benchmark is started from
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(app),
                                 "--server.headless", "true", "--server.port", str(port),
                                 "--browser.gatherUsageStats", "false"], cwd=ROOT,
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


def drag(runs: int = 3, releases: int = 12) -> dict:
    """The preview component on the Ledger page, DeepSeek-V3, EP axis: chart states per second
    and per-value latency while the pointer sweeps the slider and while an arrow key is held,
    then release → the page's main chart redrawn with the released value (pointer and key)."""
    from memledger.views import dragprobe
    from memledger.views.preview import candidates
    start, _ = parse_params(dict(p.split("=") for p in QUERY.split("&")))
    m = load_model(start.model)
    values = list(candidates(m, start, "ep"))
    valid = [values.index(v) for v in valid_values_of(m, start, "ep")]
    n = len(values)
    with streamlit_app() as base, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/ledger?{QUERY}")
        wait_idle(page)
        t0 = time.perf_counter()
        page.get_by_text("Drag to preview").first.click()
        page.locator(dragprobe.RANGE).first.wait_for(timeout=60_000)
        wait_idle(page)
        open_ms = (time.perf_counter() - t0) * 1000
        mouse = [dragprobe.sweep(page, n) for _ in range(runs)]
        keys = [dragprobe.key_sweep(page, n) for _ in range(runs)]
        wait_idle(page)  # a held key's release at the end commits: let that run finish
        lat = [x for _ in range(runs) for x in dragprobe.step_latencies(page, n)]
        pointer, keyboard = [], []
        for k in range(releases):  # to a different valid value each time
            cur = values.index(int(page.locator(dragprobe.ROOT).first.get_attribute("data-current")))
            target = valid[(valid.index(cur) + 1 + k % 2) % len(valid)]
            dragprobe.arm_release(page)
            dragprobe.hold_at(page, target, n)
            page.mouse.up()
            pointer.append(dragprobe.release_ms(page))
            wait_idle(page)
        for k in range(releases):
            cur = values.index(int(page.locator(dragprobe.ROOT).first.get_attribute("data-current")))
            key = "ArrowRight" if valid.index(cur) < len(valid) - 1 else "ArrowLeft"
            key = "ArrowLeft" if k % 4 >= 2 and valid.index(cur) > 0 else key
            page.locator(dragprobe.RANGE).first.focus()
            dragprobe.arm_release(page)
            page.keyboard.press(key)
            keyboard.append(dragprobe.release_ms(page))
            wait_idle(page)
    rate = [r["states_per_s"] for r in mouse]
    return {"values": n, "open_panel_ms": round(open_ms), "pointer_sweeps": mouse,
            "key_sweeps": keys, "states_per_s_median": statistics.median(rate),
            "key_states_per_s_median": statistics.median(r["states_per_s"] for r in keys),
            "per_value": dragprobe.summary(lat),
            "key_per_value": dragprobe.summary([x for r in keys for x in r["latencies_ms"]]),
            "release_pointer_ms": [round(x, 1) for x in pointer],
            "release_key_ms": [round(x, 1) for x in keyboard]}


def valid_values_of(m, cfg, axis):
    from memledger.views.options import valid_values
    return valid_values(m, cfg, axis)


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
        print(f"drag to preview, EP of DeepSeek-V3 ({d['values']} values): pointer sweep "
              f"{d['states_per_s_median']} chart states/s median of {len(d['pointer_sweeps'])} "
              f"(each {[r['states_per_s'] for r in d['pointer_sweeps']]}; target ≥ 20); "
              f"pointer move → new chart median {d['per_value']['median_ms']} ms, p90 "
              f"{d['per_value']['p90_ms']} ms; held arrow key "
              f"{d['key_states_per_s_median']} states/s, key down → new chart median "
              f"{d['key_per_value']['median_ms']} ms, p90 {d['key_per_value']['p90_ms']} ms; "
              f"opening the panel "
              f"{d['open_panel_ms']} ms")
        for what in ("pointer", "key"):
            xs = d[f"release_{what}_ms"]
            line = (f"component release ({what}) → main chart redrawn: median "
                    f"{statistics.median(xs):.1f} ms, p90 {p90(xs):.1f} ms")
            if args.floor:
                d[f"release_{what}_ratio_median"] = round(statistics.median(xs) / res["floor_median_ms"], 2)
                d[f"release_{what}_ratio_p90"] = round(p90(xs) / res["floor_p90_ms"], 2)
                line += (f" = {d[f'release_{what}_ratio_median']}× / "
                         f"{d[f'release_{what}_ratio_p90']}× the floor")
            print(line)
        print(f"load average after: {[round(x, 2) for x in os.getloadavg()]}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
