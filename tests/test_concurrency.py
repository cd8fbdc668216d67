"""Many viewers on one hosted server: 8 browser sessions open 8 different share links at once,
and each shows its own configuration (model in the header, tensor-parallel degree in the
slider, world size), never another session's. Real server, system Chromium; skipped without
Chromium unless MEMLEDGER_REQUIRE_BROWSER=1."""

import pytest

pytestmark = pytest.mark.browser

LINKS = [  # (query, model name in the header, tp, world)
    ("model=llama3-8b&world=8&tp=1&pp=1", "Llama-3 8B", "1", "8"),
    ("model=llama3-8b&world=16&tp=2&pp=1", "Llama-3 8B", "2", "16"),
    ("model=llama3-8b&world=32&tp=4&pp=2", "Llama-3 8B", "4", "32"),
    ("model=llama3-70b&world=64&tp=8&pp=4", "Llama-3 70B", "8", "64"),
    ("model=llama3-70b&world=128&tp=4&pp=8", "Llama-3 70B", "4", "128"),
    ("model=llama3.2-1b&world=4&tp=2&pp=1", "Llama-3.2 1B", "2", "4"),
    ("model=gpt3-175b&world=256&tp=8&pp=8", "GPT-3 175B", "8", "256"),
    ("model=mixtral-8x7b&world=16&tp=2&pp=1&ep=8", "Mixtral 8x7B", "2", "16"),
]




def test_eight_sessions_with_distinct_links_each_show_their_own_configuration(served_app):
    base, browser = served_app
    contexts = [browser.new_context(viewport={"width": 1280, "height": 900}) for _ in LINKS]
    pages = [c.new_page() for c in contexts]
    try:
        for page, (query, *_) in zip(pages, LINKS):  # every session starts before any is read
            page.goto(f"{base}/ledger?{query}", wait_until="commit")
        for page, (query, name, tp, world) in zip(pages, LINKS):
            heading = page.locator("h3", has_text="Memory ledger:").first
            heading.wait_for(timeout=90_000)  # the run reached the header; no need for the chart
            header = heading.inner_text()
            assert header.startswith(f"Memory ledger: {name} on {int(world):,} ×"), (query, header)
            slider = page.get_by_role("slider", name="TP: tensor parallel")
            # the sidebar is drawn last in the same run: the header's budget, not the default
            # 30 s (eight runs at once on a shared two-core machine under load: a CI run
            # timed out here once, with the header already shown)
            assert slider.get_attribute("aria-valuetext", timeout=90_000) == tp, query
            assert f"tp={tp}" in page.url or tp == "8" and "tp=" not in page.url, page.url
    finally:
        for c in contexts:
            c.close()
