"""Hostile share links against a running server: CPU per link, memory after, bystander delay.

Starts `streamlit run app.py` on a free port, warms it up, then
  1. loads a bystander link alone (median of 3) — the baseline page load;
  2. fires each hostile link (issue 14's list) in its own browser session and measures the
     server process's CPU time (utime + stime from /proc) until the page has settled;
  3. loads the bystander link while all hostile links run at once — the bystander's ratio;
  4. reports the server's RSS (VmRSS) at baseline and after the hostile links.
Bars (issue 14): each hostile link <= 2 s of server CPU, RSS back within 100 MiB of baseline,
bystander page loads <= 1.5x. Prints one JSON object. Needs Chromium (/usr/bin/chromium).

    .venv/bin/python benchmarks/bench_hostile.py
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import zlib
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memledger.presets import model  # noqa: E402
from memledger.views.devserver import _wait_healthy, chromium, free_port  # noqa: E402
from memledger.views.model_codec import encode_model  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
BYSTANDER = "ledger?model=llama3-70b&world=64&tp=8&pp=4"


def _raw_spec(**fields) -> str:
    """A spec: link whose fields may be outside the bounds (the decoder must refuse it)."""
    d = asdict(replace(model("llama3-8b"), name="hostile"))
    d.update(fields)
    text = json.dumps(d, separators=(",", ":"))
    return "spec:" + base64.urlsafe_b64encode(zlib.compress(text.encode(), 9)).decode().rstrip("=")


def hostile_links() -> dict[str, str]:
    deep = encode_model(replace(model("llama3-70b"), name="deep", n_layers=1280))
    name = encode_model(replace(model("llama3-8b"),
                                name="**BOLD** [sign in](http://evil.example) <a href=x>y</a>"))
    worlds = ",".join(str(8 * k) for k in range(1, 17))
    return {
        "prime ffn_hidden ~1e12 (spec)": f"ledger?model={_raw_spec(ffn_hidden=999_999_999_989)}",
        "1e7 layers (spec)": f"ledger?model={_raw_spec(n_layers=10_000_000)}",
        "1e6 layers on Where memory goes": f"where?model={_raw_spec(n_layers=1_000_000)}",
        "Planner, 16 world sizes": f"planner?model=llama3-70b&worlds={worlds}",
        "Planner, DeepSeek-V3 on 2048, all axes open":
            "planner?model=deepseek-v3&world=2048&gb=15360&seq=4096",
        "Strategies, micro-batch 1024": "strategies?model=llama3-70b&world=64&tp=8&pp=4&mb=1024",
        "1280 layers, pp=1024, Ledger": f"ledger?model={deep}&world=8192&tp=8&pp=1024",
        "1280 layers, pp=512, Strategies": f"strategies?model={deep}&world=4096&tp=8&pp=512",
        "hostile name, Ledger": f"ledger?model={name}&world=8&tp=2&pp=1",
        "hostile name, Planner": f"planner?model={name}&world=8&tp=2&pp=1&gb=8",
    }


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


SETTLED = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const s = document.querySelector('[data-testid="stStatusWidget"]');
  return !!main && main.innerText.length > 40 && (!s || !s.innerText.includes('Running'));
}"""


def settle(page, timeout_ms: int = 120_000) -> None:
    """Until the run has finished: no 'Running' indicator for 1 s in a row."""
    deadline = time.monotonic() + timeout_ms / 1000
    quiet_since = None
    while time.monotonic() < deadline:
        if page.evaluate(SETTLED):
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= 1.0:
                return
        else:
            quiet_since = None
        time.sleep(0.1)
    raise TimeoutError("page did not settle")


def load(browser, url: str) -> float:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    t0 = time.perf_counter()
    page.goto(url, wait_until="commit")
    settle(page)
    dt = time.perf_counter() - t0 - 1.0  # minus settle's quiet second
    ctx.close()
    return dt


def main() -> dict:
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless",
           "true", "--browser.gatherUsageStats", "false", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.fileWatcherType", "none"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=os.environ | {"PYTHONPATH": str(ROOT),
                                              "MEMLEDGER_EXPORT_WARMUP": "0"})
    base = f"http://127.0.0.1:{port}"
    out: dict = {}
    try:
        _wait_healthy(base, proc, 60)
        with chromium() as browser:
            for path in ("ledger", "staircase", "where", "strategies", "planner", BYSTANDER):
                load(browser, f"{base}/{path}")  # warm: imports, caches of the normal pages
            out["rss_baseline_mib"] = round(rss_mib(proc.pid), 1)
            alone = sorted(load(browser, f"{base}/{BYSTANDER}&seq={4096 + 8 * i}")
                           for i in range(3))
            out["bystander_alone_s"] = round(alone[1], 2)
            per_link = {}
            for label, path in hostile_links().items():
                c0 = cpu_s(proc.pid)
                load(browser, f"{base}/{path}")
                per_link[label] = round(cpu_s(proc.pid) - c0, 2)
            out["server_cpu_s_per_hostile_link"] = per_link
            out["max_cpu_s"] = max(per_link.values())
            out["bystander_under_attack_s"] = round(_bystander_under_attack(browser, base), 2)
            out["bystander_ratio"] = round(out["bystander_under_attack_s"]
                                           / out["bystander_alone_s"], 2)
            time.sleep(3)
            out["rss_after_mib"] = round(rss_mib(proc.pid), 1)
            out["rss_growth_mib"] = round(out["rss_after_mib"] - out["rss_baseline_mib"], 1)
    finally:
        proc.terminate()
        proc.wait(10)
    out["bars_met"] = {"cpu <= 2 s": out["max_cpu_s"] <= 2.0,
                       "rss growth <= 100 MiB": out["rss_growth_mib"] <= 100,
                       "bystander <= 1.5x": out["bystander_ratio"] <= 1.5}
    return out


def _bystander_under_attack(browser, base: str) -> float:
    """A bystander's page load (median of 3) while an attacker, in its own process and
    browser, opens the hostile links one after another without pause."""
    attacker = subprocess.Popen([sys.executable, __file__, "--attack", base],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(8)  # the attacker's browser is up and its links are running
        times = sorted(load(browser, f"{base}/{BYSTANDER}&seq={8192 + 8 * i}") for i in range(3))
        return times[1]
    finally:
        attacker.terminate()
        attacker.wait(10)


def attack(base: str) -> None:
    """Open the hostile links in a loop, each in a fresh session, until terminated."""
    with chromium() as browser:
        while True:
            for path in hostile_links().values():
                try:
                    load(browser, f"{base}/{path}")
                except TimeoutError:
                    pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["--attack"]:
        attack(sys.argv[2])
    else:
        print(json.dumps(main(), indent=1))
