"""Release → redraw, interleaved: the Ledger page of this tree, optionally of another tree
(`--base DIR`, e.g. `git archive <commit> | tar -x -C DIR`), and the one-slider floor app of
`bench_slider.py`, one keyboard move on each in turn in one browser, so all of them see the
same machine load (the machine is shared: a floor timed a minute apart is not the same floor).

    python benchmarks/ab/bench_release_ab.py [--moves 16] [--base DIR] [--json out.json]

Same measure as `bench_slider.py`: keydown on the sidebar's EP slider (the floor's only slider)
→ the first animation frame at which the first Plotly chart draws different data. DeepSeek-V3 on
2,048 GPUs; issue 15's bar is ≤ 1.2× the floor's median and ≤ 1.5× its p90.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_slider import EP_LABEL, FLOOR_APP, PROBE, QUERY, TP_LABEL, p90  # noqa: E402
from memledger.views.devserver import ROOT, _wait_healthy, chromium, free_port, wait_idle  # noqa: E402


@contextlib.contextmanager
def server(root: Path, script: Path):
    """`streamlit run script` from `root` (its .streamlit/config.toml), importing root's code."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(script),
                             "--server.port", str(port), "--server.address", "127.0.0.1",
                             "--server.headless", "true"], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=os.environ | {"PYTHONPATH": str(root)})
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(base, proc, 90)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def move(page, label: str, key: str) -> float:
    page.get_by_role("slider", name=label).focus()
    page.keyboard.press(key)
    page.wait_for_function("() => window.__b.t1 > 0", timeout=30_000, polling="raf")
    ms = page.evaluate("() => window.__b.t1 - window.__b.t0")
    wait_idle(page)
    page.wait_for_timeout(150)
    return ms


def run(moves: int, base: Path | None) -> dict:
    apps = [("this tree", ROOT, ROOT / "app.py", "/ledger?" + QUERY, EP_LABEL)]
    if base is not None:
        apps.insert(0, ("base", base, base / "app.py", "/ledger?" + QUERY, EP_LABEL))
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        floor_app = Path(d) / "floor.py"
        floor_app.write_text(FLOOR_APP)
        apps.append(("floor", ROOT, floor_app, "/", TP_LABEL))  # the app's config, a fair floor
        browser = stack.enter_context(chromium())
        pages = []
        for name, root, script, path, label in apps:
            url = stack.enter_context(server(root, script))
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url + path)
            wait_idle(page)
            page.evaluate(PROBE)
            pages.append((name, page, label))
        out = {name: [] for name, _, _ in pages}
        for i in range(moves):
            for name, page, label in pages:
                page.bring_to_front()
                right = (i % 2 == 0) != (name == "floor")  # the floor starts at its top end
                out[name].append(round(move(page, label, "ArrowRight" if right else "ArrowLeft"), 1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=int, default=16)
    ap.add_argument("--base", type=Path, help="another tree's root, timed as well")
    ap.add_argument("--json", help="also write the latencies to this file")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    res = run(args.moves, args.base)
    load1 = os.getloadavg()[0]
    fl = res["floor"]
    print(f"{args.moves} moves each, interleaved; load average {load0:.2f} → {load1:.2f}")
    for name, xs in res.items():
        print(f"{name:9s} median {statistics.median(xs):6.1f} ms, p90 {p90(xs):6.1f} ms = "
              f"{statistics.median(xs) / statistics.median(fl):.2f}× / {p90(xs) / p90(fl):.2f}× "
              f"the floor (bar ≤ 1.2× / ≤ 1.5×)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
