"""Export helpers: safe file names, offline HTML, a clear reason when kaleido cannot run, and
(with Chromium present) real PNG and SVG bytes."""
import pytest

from memledger.views import export
from memledger.views.compute import ledger_for
from memledger.views.ledger.charts import ledger_bar
from memledger.views.state import DEFAULT, hardware, load_model

FIG = ledger_bar(ledger_for(load_model(DEFAULT.model), DEFAULT), hardware(DEFAULT))


def test_file_stem_is_safe_and_names_the_configuration():
    stem = export.file_stem("ledger", "llama3-70b", "tp8", "pp4")
    assert stem == "memledger_ledger_llama3-70b_tp8_pp4"
    assert "/" not in export.file_stem("a/../b", "c d")


def test_modebar_saves_a_named_png():
    cfg = export.modebar_config("memledger_x")
    assert cfg["toImageButtonOptions"] == {"format": "png", "filename": "memledger_x", "scale": 2}


def test_html_export_is_standalone():
    html = export.to_html(FIG, "memledger_x")
    assert "<html>" in html[:100] and "Plotly.newPlot" in html
    assert '<script src="http' not in html and len(html) > 1_000_000  # plotly.js inlined


def test_missing_browser_is_explained(monkeypatch):
    monkeypatch.setattr(export, "find_browser", lambda: "")
    st = export.status()
    assert not st.ok and "Chromium" in st.reason


def test_missing_kaleido_is_explained(monkeypatch):
    def missing(name):
        raise export.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(export.metadata, "version", missing)
    st = export.status()
    assert not st.ok and "kaleido" in st.reason


def test_image_formats_are_checked():
    with pytest.raises(ValueError):
        export.to_image(FIG, "gif")


@pytest.mark.browser
@pytest.mark.skipif(not export.status().ok, reason="needs kaleido >= 1 and Chromium")
def test_kaleido_renders_png_and_svg():
    svg = export.to_image(FIG, "svg")
    png = export.to_image(FIG, "png")
    assert svg.lstrip().startswith(b"<svg") and b"Llama-3 70B" in svg
    assert png.startswith(b"\x89PNG")


def test_exported_charts_state_the_setting_the_version_and_the_date():
    from datetime import date

    fig = FIG
    text = export.stamp_text("64 × H100 SXM", today=date(2026, 12, 1))
    assert text.startswith("64 × H100 SXM · memledger ") and text.endswith(" · 2026-12-01")
    out = export.stamped(fig, text)
    assert [a.text for a in out.layout.annotations][-1] == text
    assert len(out.layout.annotations) == len(fig.layout.annotations) + 1  # the original is untouched


def test_html_exports_carry_the_charts_title_and_images_keep_it_inside_the_margin():
    """Issue 32 #11: a <title> (a browser tab, a review's file list), escaped; the exported
    figure gets room above its title instead of a title flush with the image's top edge."""
    import re
    page = export.to_html(FIG, "memledger_x")
    title = re.search(r"<title>(.*?)</title>", page).group(1)
    assert title.startswith("Llama-3 70B on H100 SXM: the most loaded GPU") and "<br>" not in title
    out = export.stamped(FIG, "stamp")
    assert out.layout.height == FIG.layout.height + export.EXPORT_TOP_PX
    assert out.layout.margin.t == FIG.layout.margin.t + export.EXPORT_TOP_PX
    assert out.layout.title.y * out.layout.height == pytest.approx(
        out.layout.height - export.EXPORT_TOP_PX)
    import plotly.graph_objects as go
    assert export.page_title(go.Figure(FIG).update_layout(title_text="<b>a & b</b>"), "x") == "a &amp; b"
