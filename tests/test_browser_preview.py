"""Drag to preview in a real browser (system Chromium via Playwright): the pointer drags the
preview slider under the Ledger chart across every EP value of DeepSeek-V3 on 2,048 GPUs; the
chart changes with the hand and the browser sends the server nothing meanwhile; three
intermediate values draw exactly the bytes `memledger ledger --json` prints; the sidebar and
the link stay where they were. Skipped without Chromium (MEMLEDGER_REQUIRE_BROWSER=1 fails)."""
import json
import subprocess
import sys

import pytest

from memledger.ledger.items import ROWS
from memledger.views import dragprobe
from memledger.views.devserver import wait_idle

pytestmark = pytest.mark.browser
QUERY = "model=deepseek-v3&world=2048&tp=16&pp=16&ep=1"
EP_STEPS = ("1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "2048")


def cli_rows(ep: str) -> list[int]:
    """The busiest rank's six rows as the CLI prints them for the page's configuration."""
    out = subprocess.run([sys.executable, "-m", "memledger", "ledger", "--model", "deepseek-v3",
                          "--world", "2048", "--tp", "16", "--pp", "16", "--ep", ep,
                          "--layout", "balanced", "--micro-batches", "8", "--zero", "1",
                          "--json"], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    return [d["ranks"][d["most_loaded_rank"]]["rows"][r] for r in ROWS]


@pytest.fixture(scope="module")
def preview_page(served_app):
    base, browser = served_app
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sent = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(payload)))
    page.goto(f"{base}/ledger?{QUERY}")
    wait_idle(page)
    page.get_by_text("Drag to preview").first.click()
    wait_idle(page)
    page.locator(dragprobe.RAIL).first.wait_for(timeout=30_000)
    yield page, sent
    page.close()


def test_dragging_shows_every_value_without_a_message_to_the_server(preview_page):
    page, sent = preview_page
    url = page.url
    before = len(sent)
    got = dragprobe.page_sweep(page, len(EP_STEPS))
    print("drag across EP:", got)
    assert len(sent) == before  # no round trip: the browser switches between frames
    assert got["distinct_states"] == len(EP_STEPS)  # each value, valid or greyed, its own state
    assert got["states_per_s"] > 5
    assert page.url == url
    assert page.get_by_role("slider", name="EP: expert parallel").get_attribute(
        "aria-valuetext") == "1"


@pytest.mark.parametrize("ep", ["4", "16", "64"])
def test_an_intermediate_value_draws_the_bytes_the_cli_prints(preview_page, ep):
    page, _ = preview_page
    active, traces = dragprobe.at_step(page, EP_STEPS.index(ep), len(EP_STEPS))
    assert active == EP_STEPS.index(ep)
    assert [t[1][0][0] for t in traces] == cli_rows(ep)


def test_an_invalid_value_along_the_way_shows_no_number(preview_page):
    page, _ = preview_page
    active, traces = dragprobe.at_step(page, EP_STEPS.index("512"), len(EP_STEPS))
    assert active == EP_STEPS.index("512")
    assert all(t[1] == [] and not any(c.isdigit() for c in t[0]) for t in traces)
    title = page.locator(".js-plotly-plot .gtitle").last.text_content()
    assert "EP = 512: not valid here" in title
