"""Where release → redraw goes: one keyboard move on the Ledger page (and on the one-slider
floor app, and on any other tree's Ledger page), split into phases the page itself times.

    python benchmarks/ab/bench_release_phases.py [--moves 10] [--tree DIR ...] [--chart-only]
                                              [--json out.json]

Per move, in the page's clock (performance.now, keydown = 0): the widget's new value sent on
the websocket; the first server message handled; the chart's message handled (the largest
message before the chart frame); the first animation frame at which the first Plotly chart
draws different data (the release → redraw of `bench_slider.py`); the first frame at which the
metrics (`st.metric` values) differ (the page has followed; absent on the floor); the messages
handled before the chart frame and in the whole run; and the renderer main thread's busy time
per move (Chromium's Performance.getMetrics TaskDuration and ScriptDuration, which include the
benchmark's own polling, alike on every page). A message is timed when the page's main thread
handles it, not when it reaches the socket: a busy main thread shows as a late message.

`--tree DIR` (repeatable) adds another tree's Ledger page, e.g. an experiment or a base commit
(`git archive <commit> | tar -x -C DIR`); `--chart-only` adds the Ledger page's own chart
(`charts.ledger_bar` of the same DeepSeek-V3 configuration, built by the core) under its EP
slider and nothing else: what a page costs the browser beyond its chart. All pages are moved in
turn in one browser, so they see the same machine load. docs/drag-preview.md ("Third round",
"Fourth round") reads these numbers.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_release_ab import server  # noqa: E402
from bench_slider import (EP_LABEL, FLOOR_APP, PROBE, QUERY, TP_LABEL, change_probe,  # noqa: E402
                          p90)
from memledger.views.devserver import ROOT, chromium, wait_idle  # noqa: E402

# Installed before the page's own scripts: every websocket message handled (+ bytes) or sent
# (− bytes), with the time the main thread got to it.
SOCKET = """(() => { window.__ws = []; const Native = window.WebSocket;
  window.WebSocket = function (...args) { const ws = new Native(...args);
    ws.addEventListener('message', ev => window.__ws.push(
      [performance.now(), ev.data.byteLength || ev.data.size || ev.data.length || 0]));
    const send = ws.send.bind(ws);
    ws.send = d => { window.__ws.push([performance.now(), -(d.byteLength || d.length || 0)]);
                     return send(d); };
    return ws; };
  window.WebSocket.prototype = Native.prototype; Object.assign(window.WebSocket, Native); })()"""

# The first frame at which the metrics' values differ from before the keydown.
METRICS = change_probe("() => Array.from(document.querySelectorAll("
                       "'[data-testid=\"stMetricValue\"]')).map(e => e.innerText).join('|')",
                       "__m")
BUSY = ("TaskDuration", "ScriptDuration")

# the Ledger page's chart of QUERY's configuration under the same EP slider, nothing else
CHART_ONLY_APP = """
import streamlit as st
from memledger.views.compute import ledger_for
from memledger.views.ledger import charts
from memledger.views.state import hardware, load_model, parse_params
ep = st.sidebar.select_slider("EP: expert parallel", [1, 2, 4, 8, 16, 32, 64, 128], value=1)
cfg, _ = parse_params({"model": "deepseek-v3", "world": "2048", "tp": "16", "pp": "16",
                       "ep": str(ep)})
st.plotly_chart(charts.ledger_bar(ledger_for(load_model(cfg.model), cfg), hardware(cfg)),
                theme=None, width="stretch", key="ledger_chart")
"""
PHASES = ("sent", "first_message", "chart_message", "chart_frame", "metrics_frame",
          "messages_before_frame", "messages")


def phases(t0: float, t1: float, m1: float, socket: list) -> dict:
    """One move's phases (ms after keydown) from the probes' times and the socket log."""
    sent = [t - t0 for t, n in socket if n < 0]
    got = [(t - t0, n) for t, n in socket if n > 0]
    before = [(t, n) for t, n in got if t <= t1 - t0]
    return {"sent": sent[0] if sent else None, "first_message": got[0][0] if got else None,
            "chart_message": max(before, key=lambda x: x[1])[0] if before else None,
            "chart_frame": t1 - t0, "metrics_frame": m1 - t0 if m1 else None,
            "messages_before_frame": len(before), "messages": len(got)}


def one_move(page, cdp, label: str, key: str) -> dict:
    page.get_by_role("slider", name=label).focus()
    page.evaluate("() => { window.__ws = []; }")
    busy0 = _busy(cdp)
    page.keyboard.press(key)
    page.wait_for_function("() => window.__b.t1 > 0", timeout=30_000, polling="raf")
    wait_idle(page)
    page.wait_for_timeout(250)  # the page's last messages and the metrics' frame
    wait_idle(page)
    t0, t1, m1, socket = page.evaluate(
        "() => [window.__b.t0, window.__b.t1, window.__m.t1, window.__ws]")
    busy1 = _busy(cdp)
    return phases(t0, t1, m1, socket) | {k: 1000 * (busy1[k] - busy0[k]) for k in BUSY}


def _busy(cdp) -> dict:
    got = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {k: got.get(k, 0.0) for k in BUSY}


def run(moves: int, trees: list[Path], chart_only: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        floor_app, chart_app = Path(d) / "floor.py", Path(d) / "chart_only.py"
        floor_app.write_text(FLOOR_APP)
        chart_app.write_text(CHART_ONLY_APP)
        apps = [("floor", ROOT, floor_app, "/", TP_LABEL),
                ("this tree", ROOT, ROOT / "app.py", "/ledger?" + QUERY, EP_LABEL)]
        if chart_only:
            apps.append(("chart only", ROOT, chart_app, "/", EP_LABEL))
        apps += [(t.name, t, t / "app.py", "/ledger?" + QUERY, EP_LABEL) for t in trees]
        browser = stack.enter_context(chromium())
        pages = []
        for name, root, script, path, label in apps:
            url = stack.enter_context(server(root, script))
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.add_init_script(SOCKET)
            page.goto(url + path)
            wait_idle(page)
            page.evaluate(PROBE)
            page.evaluate(METRICS)
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            pages.append((name, page, cdp, label))
        out = {name: [] for name, *_ in pages}
        for i in range(moves):
            for name, page, cdp, label in pages:
                page.bring_to_front()
                right = (i % 2 == 0) != (name == "floor")  # the floor starts at its top end
                out[name].append(one_move(page, cdp, label, "ArrowRight" if right else "ArrowLeft"))
    return out


def summary(rows: list[dict]) -> dict:
    """Median of every phase over the moves (None where a page has no such phase)."""
    out = {}
    for k in PHASES + BUSY:
        xs = [r[k] for r in rows if r[k] is not None]
        out[k] = round(statistics.median(xs), 1) if xs else None
    frames = [r["chart_frame"] for r in rows]
    out["chart_frame_p90"] = round(p90(frames), 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=int, default=10)
    ap.add_argument("--tree", type=Path, action="append", default=[],
                    help="another tree whose Ledger page is timed as well")
    ap.add_argument("--chart-only", action="store_true",
                    help="also time the Ledger page's chart alone under its EP slider")
    ap.add_argument("--json", help="also write every move's phases to this file")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    res = run(args.moves, args.tree, args.chart_only)
    load1 = os.getloadavg()[0]
    print(f"{args.moves} moves each, interleaved; load average {load0:.2f} → {load1:.2f}; "
          "medians in ms after keydown")
    print(f"{'':10s} {'sent':>6s} {'1st msg':>7s} {'chart msg':>9s} {'chart frame':>11s} "
          f"{'(p90)':>7s} {'metrics':>7s} {'msgs before/all':>15s} {'main thread':>11s} "
          f"{'(JS)':>6s}  chart frame: median / p90 (bar ≤ 1.2× / ≤ 1.5×)")
    floor = summary(res["floor"])
    for name, rows in res.items():
        s = summary(rows)
        ratio = (f"{s['chart_frame'] / floor['chart_frame']:.2f}× / "
                 f"{s['chart_frame_p90'] / floor['chart_frame_p90']:.2f}×")
        print(f"{name[:10]:10s} {s['sent']:6.1f} {s['first_message']:7.1f} "
              f"{s['chart_message']:9.1f} {s['chart_frame']:11.1f} {s['chart_frame_p90']:7.1f} "
              f"{s['metrics_frame'] if s['metrics_frame'] is not None else '-':>7} "
              f"{s['messages_before_frame']:7.0f}/{s['messages']:<7.0f} "
              f"{s['TaskDuration']:11.1f} {s['ScriptDuration']:6.1f}  {ratio} the floor")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
