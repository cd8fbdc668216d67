"""Run the dashboard on a free port and drive it with headless Chromium.

Used by the real-browser test, the slider benchmark and the screenshot script; not by the app.
Uses the system Chromium (never `playwright install`) with the flags that keep it quiet in a
container.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from memledger.views.export import find_browser

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def streamlit_app(port: int | None = None, timeout_s: float = 60):
    """Yield the base URL of `streamlit run app.py` on a free port; stop it afterwards."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
           "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--server.port", str(port), "--server.address", "127.0.0.1",
           "--server.fileWatcherType", "none"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=os.environ | {"PYTHONPATH": str(ROOT)})
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, proc, timeout_s)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait_healthy(base: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"streamlit did not become healthy within {timeout_s} s")


@contextlib.contextmanager
def chromium():
    """Yield a Playwright browser on the system Chromium."""
    from playwright.sync_api import sync_playwright
    path = find_browser()
    if not path:
        raise FileNotFoundError("no Chromium found (/usr/bin/chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def wait_idle(page, timeout_ms: int = 30_000) -> None:
    """Wait until Streamlit has finished the current run and a chart is on the page."""
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=timeout_ms)
    page.wait_for_function(
        "() => { const s = document.querySelector('[data-testid=\"stStatusWidget\"]');"
        " return !s || !s.innerText.includes('Running'); }", timeout=timeout_ms)
