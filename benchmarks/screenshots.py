"""Screenshots of every dashboard page in headless Chromium, wide (1280×800) and narrow.

    python benchmarks/screenshots.py [--out out/screenshots] [--readme]

--readme also writes assets/ledger.png and assets/validation.png (the Ledger and Validation
pages at 1280×800, the README's pictures). --phone writes assets/phone/: each page of
PHONE_VIEWS at 390×844 (its first screen) and each of its charts on its own (<page>-chart<N>.png),
to look at after a layout change (tests/test_browser_phone.py checks the text boxes). Views: every page with defaults, the staircase
comparing schedules for DeepSeek-V3, a policy on the Strategies page, an over-capacity ledger,
and a link with bad values (the error banners).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memledger.views.devserver import chromium, streamlit_app, wait_idle  # noqa: E402

VIEWS = {
    "ledger": "",
    "staircase": "staircase",
    "where": "where",
    "where-seed-70b": "where?size=seed-70b",
    "strategies": "strategies",
    "strategies-policy": "strategies?seq=16384&policy=mlp_fc1:fp8;qkv:offload-cpu",
    "planner": "planner",
    "validation": "validation",
    "compare-dsv3": "staircase?model=deepseek-v3&world=2048&pp=16&ep=64&compare=1",
    "ledger-over": "?model=llama3.1-405b&tp=8&pp=2&world=64&zero=0&mb=2",
    "ledger-bad-link": "?model=llama3-8b&tp=3&pp=banana&world=99999999999",
}
SIZES = {"wide": (1280, 800), "narrow": (420, 900)}
README_VIEWS = ("ledger", "validation")
PHONE_VIEWS = ("ledger", "ledger-over", "staircase", "where", "strategies", "planner",
               "validation")


def shoot_phone(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = []
    with streamlit_app() as base, chromium() as browser:
        page = browser.new_page(viewport={"width": 390, "height": 844})
        for name in PHONE_VIEWS:
            page.goto(f"{base}/{VIEWS[name]}")
            wait_idle(page, 120_000)
            time.sleep(1.0)
            files.append(out / f"{name}.png")
            page.screenshot(path=str(files[-1]))
            for i, chart in enumerate(page.query_selector_all(".js-plotly-plot"), start=1):
                files.append(out / f"{name}-chart{i}.png")
                chart.screenshot(path=str(files[-1]))
        page.close()
    return files


def shoot(out: Path, readme: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = []
    with streamlit_app() as base, chromium() as browser:
        for size, (w, h) in SIZES.items():
            page = browser.new_page(viewport={"width": w, "height": h})
            for name, path in VIEWS.items():
                page.goto(f"{base}/{path}")
                wait_idle(page)
                time.sleep(1.0)  # let fonts and the chart's transition settle
                f = out / f"{name}-{size}.png"
                page.screenshot(path=str(f))
                files.append(f)
                if readme and name in README_VIEWS and size == "wide":
                    page.screenshot(path=str(ROOT / "assets" / f"{name}.png"))
            page.close()
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "out" / "screenshots"))
    ap.add_argument("--readme", action="store_true", help="also write assets/ledger.png and assets/validation.png")
    ap.add_argument("--phone", action="store_true", help="only write assets/phone/ (390 px)")
    args = ap.parse_args()
    files = (shoot_phone(ROOT / "assets" / "phone") if args.phone
             else shoot(Path(args.out), args.readme))
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
