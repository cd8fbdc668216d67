"""A share link is input from anyone: its text is shown as text, and its work is bounded.

Every page is opened with an imported model whose name is Markdown, HTML and Streamlit
directives; the rendered headers, labels, messages and chart titles must show those characters
literally: no link, image, bold text or colour results. Links over the server's budget are
answered with an error naming the setting, quickly, not with minutes of work."""
import json
import re
import time
from dataclasses import replace

import pytest
from markdown_it import MarkdownIt

from conftest import figures
from memledger.presets import model
from memledger.views import budget, safe_text
from memledger.views.model_codec import encode_model

HOSTILE = ('**BOLD** [sign in again](http://evil.example/login) ![t](http://evil.example/t.png) '
           '<a href="http://evil.example/x">click</a> <img src=http://evil.example/i.png> '
           ':red[ALERT] :material/warning: $x^2$ _em_ `code` # H')
PAGES = ("pages/ledger.py", "pages/staircase.py", "pages/where.py",
         "pages/strategies.py", "pages/planner.py")
MD = MarkdownIt("commonmark")


def _link(name: str, n_layers: int = 32, **cfg) -> str:
    m = replace(model("llama3-8b"), name=name, n_layers=n_layers)
    base = {"world": 8, "tp": 2, "pp": 1, "m": 1, **cfg}
    return "&".join([f"model={encode_model(m)}"] + [f"{k}={v}" for k, v in base.items()])


def _texts(at) -> list[str]:
    """The Markdown source of every element a page shows (main area and sidebar)."""
    out = []
    for kind in ("markdown", "caption", "subheader", "header", "title", "error", "warning",
                 "info", "success", "toast"):
        out += [e.value for e in at.get(kind)]
    for r in at.get("radio"):
        out += [str(o) for o in r.options]
    return out


def _rendered_ok(source: str) -> None:
    html = MD.render(source)
    assert "evil.example" not in " ".join(re.findall(r'(?:href|src)="[^"]*"', html)), html
    assert "<strong>BOLD</strong>" not in html and "<img" not in html
    assert "<a href=\"http://evil" not in html


@pytest.mark.parametrize("page", PAGES)
def test_a_hostile_model_name_is_shown_literally_on_every_page(app_test, page):
    at = app_test(page, _link(HOSTILE, gb=8)).run()
    assert not at.exception, [e.value for e in at.exception]
    texts = _texts(at)
    shown = [t for t in texts if "BOLD" in t]
    if page != "pages/where.py":  # that page's header has no model name
        assert shown, texts  # the name is on the page (so this test can fail)
    for t in texts:
        _rendered_ok(t)
    for t in shown:  # the escaped source renders back to the literal characters
        assert "**BOLD**" in MD.render(t) and ":red[ALERT]" in MD.render(t).replace("\\", "")
    for fig in figures(at):
        spec = json.dumps(fig).replace("<br>", " ")  # titles wrap for phones
        assert "<a href" not in spec and "<img" not in spec
        if "BOLD" in spec:
            assert "&lt;a href=&quot;http://evil.example/x&quot;&gt;" in spec


def test_safe_text_escapes_every_markdown_and_html_construct():
    src = safe_text.md(HOSTILE + "\n\n# second line")
    assert "\n" not in src
    html = MD.render(src)
    assert html.count("<p>") == 1 and "<a " not in html and "<img" not in html
    assert "<strong>" not in html and "<em>" not in html and "<code>" not in html
    assert safe_text.plot('<a href="x">y</a>') == "&lt;a href=&quot;x&quot;&gt;y&lt;/a&gt;"
    assert len(safe_text.plain("x" * 10_000)) == safe_text.MAX_CHARS


def test_a_planner_link_with_many_world_sizes_is_refused_quickly(app_test):
    worlds = ",".join(str(8 * k) for k in range(1, 17))
    t0 = time.process_time()
    at = app_test("pages/planner.py", f"model=deepseek-v3&worlds={worlds}").run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any("worlds" in e and f"at most {budget.PLANNER_MAX_WORLDS}" in e for e in errors)
    assert f"at most {budget.PLANNER_MAX_WORLDS} world sizes" in " ".join(_texts(at))
    assert time.process_time() - t0 < 20  # a page run, not a 16-world search (85 s before)


def test_a_planner_search_over_the_configuration_budget_is_refused_before_evaluating(app_test):
    t0 = time.process_time()
    at = app_test("pages/planner.py",
                  "model=deepseek-v3&world=2048&gb=15360&seq=4096&worlds=2048,4096").run()
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert "50,107,296 configurations" in errors.replace("\\", "")
    assert errors.startswith("constraints:") and "fewer world sizes" in errors
    assert time.process_time() - t0 < 20


def test_a_strategies_link_over_the_rank_budget_names_pp(app_test):
    at = app_test("pages/strategies.py",
                  _link("deep", n_layers=1024, world=512, tp=1, pp=512, mb=1024)).run()
    assert not at.exception
    errors = " ".join(e.value for e in at.error).replace("\\", "")
    assert "pp=512" in errors and "use pp <= 400" in errors
    assert at.sidebar  # the settings stay reachable to fix it


def test_byte_lru_keeps_within_its_byte_budget():
    cache = budget.ByteLRU(100, len)
    for i in range(10):
        cache.put(i, "x" * 30)
    assert cache.bytes <= 100 and list(cache.data) == [7, 8, 9]
    cache.put("big", "x" * 101)
    assert cache.get("big") is None and cache.bytes == 90
