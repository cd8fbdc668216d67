"""A training config pasted into the sidebar in a real browser (system Chromium via Playwright):
the sliders and the link follow the file, and the Share popover shows the configuration as
Megatron flags. Skipped without Chromium, unless MEMLEDGER_REQUIRE_BROWSER=1 (CI)."""
from pathlib import Path

import pytest

from memledger.views.devserver import wait_idle

pytestmark = pytest.mark.browser
SCRIPT = (Path(__file__).parent / "fixtures" / "configs" / "llama3_70b_megatron.sh").read_text()


def test_pasted_launch_script_moves_the_sidebar_and_the_link(served_app):
    base, browser = served_app
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{base}/?tp=2&pp=1&world=8&model=llama3-8b")
    wait_idle(page)
    page.get_by_text("Import a training config").click()
    box = page.get_by_label("…or paste it").last
    box.fill(SCRIPT)
    box.press("Control+Enter")  # commit the text area before the click
    page.get_by_role("button", name="Use this training config").click()
    page.wait_for_url("**seq=8192**", timeout=30_000)
    wait_idle(page)
    assert "model=spec" in page.url and "m=64" in page.url and "world=64" not in page.url
    for name, want in (("TP: tensor parallel", "8"), ("PP: pipeline stages", "4")):
        assert page.get_by_role("slider", name=name).get_attribute("aria-valuetext") == want
    page.get_by_role("button", name="Share link").click()
    page.get_by_role("combobox", name="Copy as").click()
    page.get_by_role("option", name="Megatron flags").click()
    code = page.locator("code", has_text="--tensor-model-parallel-size 8")
    code.first.wait_for(timeout=20_000)
    assert "--use-distributed-optimizer" in code.first.inner_text()
    page.close()


CHART_TOTAL = """() => {
  const gd = document.querySelector('.js-plotly-plot');
  return gd && gd.data ? gd.data.reduce((s, t) => s + (t.x && t.x.length ? +t.x[0] : 0), 0)
                       : null;
}"""


def _pick_in_more(page, label: str, option: str) -> None:
    """Open the sidebar's More section and pick `option` in the select named `label`."""
    page.get_by_text("More:").first.click()
    box = page.get_by_role("combobox", name=label, exact=True)
    box.wait_for(timeout=20_000)
    wait_idle(page)
    choice = page.get_by_role("option", name=option, exact=True)
    for _ in range(3):  # a click on a just-built select may only focus it
        box.click()
        try:
            choice.wait_for(timeout=3_000)
            break
        except Exception:
            page.keyboard.press("Escape")
    choice.click()


def test_the_optimizer_step_in_backward_is_picked_in_the_sidebar(served_app):
    """One GPU, 8B in bf16, full AC: turning "Optimizer step in backward" on in the sidebar's
    More section puts it in the link and takes the gradients the end-of-step update would hold
    off the bar (ledger.step_in_backward: 79.1 → 51.9 GiB at this layout)."""
    base, browser = served_app
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{base}/ledger?model=llama3-8b&world=1&tp=1&pp=1&m=1&loop=pytorch"
              "&precision=bf16&recompute=full")
    wait_idle(page)
    page.wait_for_function(f"() => ({CHART_TOTAL})() !== null", timeout=30_000)
    before = page.evaluate(CHART_TOTAL)
    _pick_in_more(page, "Optimizer step in backward", "on")
    page.wait_for_url("**inbwd=1**", timeout=30_000)
    wait_idle(page)
    page.wait_for_function(f"() => ({CHART_TOTAL})() < {before - 20}", timeout=30_000)
    page.close()


def test_torchtitans_cuda_graph_step_is_picked_in_the_sidebar(served_app):
    """torchtitan 0.3 on FSDP 8 (8B, op SAC, 4k tokens): its CUDA-graph step (auto) keeps every
    sharded gradient all step; picking "off" in the sidebar's More section puts graphs=off in
    the link and takes them off the bar at the loss (3.74 GiB of fp32 gradients)."""
    base, browser = served_app
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{base}/ledger?model=llama3-8b&world=8&tp=1&pp=1&m=1&zero=3&loop=torchtitan"
              "&precision=fsdp2-mixed&recompute=op&seq=4096")
    wait_idle(page)
    page.wait_for_function(f"() => ({CHART_TOTAL})() !== null", timeout=30_000)
    before = page.evaluate(CHART_TOTAL)
    _pick_in_more(page, "CUDA-graph step (torchtitan 0.3)", "off")
    page.wait_for_url("**graphs=off**", timeout=30_000)
    wait_idle(page)
    page.wait_for_function(f"() => ({CHART_TOTAL})() < {before - 3}", timeout=30_000)
    page.close()
