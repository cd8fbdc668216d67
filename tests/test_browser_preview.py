"""Drag to preview in a real browser (system Chromium via Playwright): the pointer drags the
preview component's slider under the Ledger chart across every EP value of DeepSeek-V3 on 2,048
GPUs; the chart changes with the hand and the browser sends the server nothing meanwhile; three
intermediate values draw exactly the bytes `memledger ledger --json` prints; an invalid value
shows no number; releasing sets the value in the sidebar and the link, and so do the arrow
keys. Skipped without Chromium (MEMLEDGER_REQUIRE_BROWSER=1 fails)."""
import json
import re
import subprocess
import sys

import pytest

from memledger.ledger.items import ROWS
from memledger.views import dragprobe
from memledger.views.devserver import wait_idle

pytestmark = pytest.mark.browser
QUERY = "model=deepseek-v3&world=2048&tp=16&pp=16&ep=1"
EP_STEPS = ("1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "2048")
SIDEBAR_EP = "EP: expert parallel"


def cli_rows(ep: str) -> tuple[int, list[int]]:
    """The busiest rank and its six rows as the CLI prints them for the page's configuration."""
    out = subprocess.run([sys.executable, "-m", "memledger", "ledger", "--model", "deepseek-v3",
                          "--world", "2048", "--tp", "16", "--pp", "16", "--ep", ep,
                          "--layout", "balanced", "--micro-batches", "8", "--zero", "1",
                          "--json"], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    return d["most_loaded_rank"], [d["ranks"][d["most_loaded_rank"]]["rows"][r] for r in ROWS]


def drawn(page) -> tuple[int, list[int]]:
    (rank, rows), = dragprobe.shown(page)["rows"].items()
    assert [r for r, _ in rows] == list(ROWS)
    return int(rank), [b for _, b in rows]


def let_go_where_it_was(page) -> None:
    """Move back to the committed value and release: no change, so nothing is set."""
    _, _, y = dragprobe.track(page)
    cur = EP_STEPS.index(page.locator(dragprobe.ROOT).first.get_attribute("data-current"))
    page.mouse.move(dragprobe.value_x(page, cur, len(EP_STEPS)), y, steps=3)
    page.mouse.up()


@pytest.fixture(scope="module")
def preview_page(served_app):
    base, browser = served_app
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sent = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(payload)))
    page.goto(f"{base}/ledger?{QUERY}")
    wait_idle(page)
    page.get_by_text("Drag to preview").first.click()
    page.locator(dragprobe.RANGE).first.wait_for(timeout=60_000)
    wait_idle(page)
    yield page, sent
    page.close()


def test_dragging_shows_every_value_without_a_message_to_the_server(preview_page):
    page, sent = preview_page
    url, before = page.url, len(sent)
    got = dragprobe.sweep(page, len(EP_STEPS), passes=2)
    print("drag across EP:", got)
    assert len(sent) == before  # no round trip: the browser draws each value itself
    assert got["distinct_states"] == len(EP_STEPS)  # each value, valid or greyed, its own state
    assert got["states_per_s"] > 5
    assert page.url == url
    assert page.get_by_role("slider", name=SIDEBAR_EP).get_attribute("aria-valuetext") == "1"


@pytest.mark.parametrize("ep", ["4", "16", "64"])
def test_an_intermediate_value_draws_the_bytes_the_cli_prints(preview_page, ep):
    page, _ = preview_page
    dragprobe.hold_at(page, EP_STEPS.index(ep), len(EP_STEPS))
    try:
        got = dragprobe.shown(page)
        assert got["value"] == ep and got["ok"]
        assert drawn(page) == cli_rows(ep)
        assert re.search(r"needs peak total [\d,]+\.\d\d GiB", got["title"]) and got["head"]
    finally:
        let_go_where_it_was(page)


def test_an_invalid_value_shows_no_number_and_releasing_there_sets_nothing(preview_page):
    page, sent = preview_page
    url = page.url
    dragprobe.hold_at(page, EP_STEPS.index("512"), len(EP_STEPS))
    got = dragprobe.shown(page)
    page.mouse.up()
    assert got["value"] == "512" and not got["ok"] and got["rows"] == {}
    assert got["title"] == "EP = 512: not valid here" and got["sub"]
    assert not re.search(r"\d", got["legend"] + got["head"])
    # the chart keeps its axis and the GPU's capacity line; no bar, rank or total of its own
    rest = got["svg"].replace("H100 SXM capacity 79.6 GiB", "")
    assert "pp rank" not in rest and not re.search(r"\d\.\d", rest) and "✕ EP = 512" in rest
    page.wait_for_timeout(500)
    assert page.url == url and "not valid here: nothing set" in page.locator(
        ".mlp-status").text_content()
    assert page.get_by_role("slider", name=SIDEBAR_EP).get_attribute("aria-valuetext") == "1"
    # issue 32 #12: the panel is back on the set value, not left on the invalid one
    back = dragprobe.shown(page)
    assert back["value"] == "1" and back["ok"] and back["rows"]


def test_releasing_on_a_value_sets_it_in_the_sidebar_and_the_link(preview_page):
    page, _ = preview_page
    dragprobe.hold_at(page, EP_STEPS.index("16"), len(EP_STEPS))
    page.mouse.up()
    page.wait_for_function("() => location.search.includes('ep=16')", timeout=30_000)
    wait_idle(page)
    assert page.get_by_role("slider", name=SIDEBAR_EP).get_attribute("aria-valuetext") == "16"
    assert page.locator(dragprobe.ROOT).first.get_attribute("data-current") == "16"
    assert drawn(page) == cli_rows("16")  # the preview now starts from the committed value


def test_the_arrow_keys_move_the_preview_and_set_the_value_on_key_up(preview_page):
    page, _ = preview_page
    start = page.locator(dragprobe.ROOT).first.get_attribute("data-current")
    nxt = EP_STEPS[EP_STEPS.index(start) + 1]
    page.locator(dragprobe.RANGE).first.focus()
    page.keyboard.down("ArrowRight")
    assert dragprobe.shown(page)["value"] == nxt  # drawn on key down, before any server reply
    assert page.locator(dragprobe.RANGE).first.get_attribute("aria-valuetext") == nxt
    page.keyboard.up("ArrowRight")
    page.wait_for_function(f"() => location.search.includes('ep={nxt}')", timeout=30_000)
    wait_idle(page)
    assert page.get_by_role("slider", name=SIDEBAR_EP).get_attribute("aria-valuetext") == nxt
    assert drawn(page) == cli_rows(nxt)
