"""The Validation page's "Your run" section under AppTest: a snapshot uploaded is measured and
compared with the sidebar's configuration (two exportable charts, a table); a hostile or
broken file is one st.error and the page, its other sections and the next upload still work."""
import gzip
import pickle
from pathlib import Path

from conftest import figures

PAGE = "pages/validation.py"
FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"
GOOD = (FIXTURES / "dense_python.pickle.gz").read_bytes()
LINK = "model=llama3.2-1b&world=1&tp=1&pp=1&seq=1024"


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def _opened(app_test):
    at = app_test(PAGE, LINK)
    at.session_state["snapshot_open"] = True
    return ok(at.run())


def _snapshot_titles(at):
    return [f["layout"]["title"]["text"] for f in figures(at) if "Your run" in
            f["layout"]["title"]["text"]]


def test_closed_section_costs_nothing(app_test):
    at = ok(app_test(PAGE, LINK).run())
    assert not at.file_uploader and not _snapshot_titles(at)
    assert not at.sidebar.selectbox  # the page draws no sidebar while the section is closed


def test_upload_shows_rows_timeline_and_table_against_the_sidebar(app_test):
    at = _opened(app_test)
    assert at.sidebar.selectbox  # the configuration comes from the sidebar
    at.file_uploader(key="snapshot_file").set_value(("run.pickle.gz", GOOD, "application/gzip"))
    ok(at.run())
    assert not at.error
    titles = _snapshot_titles(at)
    assert any("row by row" in t for t in titles) and any("by phase" in t for t in titles)
    rows = next(f for f in figures(at) if "row by row" in f["layout"]["title"]["text"])
    measured = dict(zip(rows["data"][0]["x"], rows["data"][0]["y"]))
    assert abs(measured["Activations"] - 364_953_604 / 2**30) < 1e-9  # the generator's bytes
    assert "Unattributed" in measured
    assert {"snapshot_rows_dl", "snapshot_timeline_dl"} <= {t.key for t in at.toggle}  # exports
    table = at.dataframe[-1].value
    assert list(table["row"])[-2:] == ["peak_allocated", "peak_reserved"]


def test_hostile_file_is_an_error_and_the_page_stays_usable(app_test, tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            import os
            return (os.system, (f"touch {marker}",))

    at = _opened(app_test)
    at.file_uploader(key="snapshot_file").set_value(("evil.pickle", pickle.dumps([Evil()]), "x"))
    ok(at.run())
    assert any("names a Python object" in e.value for e in at.error)
    assert not marker.exists()
    assert any(f["layout"]["title"]["text"].startswith("Predicted vs measured") for f in figures(at))
    for name, data in (("empty.pickle", b""), ("cfg.pickle", b'{"segments": []}'),
                       ("cut.pickle", gzip.decompress(GOOD)[:5000])):
        at.file_uploader(key="snapshot_file").set_value((name, data, "x"))
        ok(at.run())
        assert len(at.error) == 1 and name.split(".")[0] in at.error[0].value  # md-escaped
    at.file_uploader(key="snapshot_file").set_value(("run.pickle.gz", GOOD, "application/gzip"))
    ok(at.run())
    assert not at.error and _snapshot_titles(at)


def test_an_upload_over_the_server_limit_is_an_error(app_test, monkeypatch):
    """Streamlit refuses a body over server.maxUploadSize while it streams; the reader checks
    the same limit again (here lowered to 1 MB)."""
    from memledger.views.validation import snapshot_section
    monkeypatch.setattr(snapshot_section, "upload_limit_mb", lambda: 1)
    at = _opened(app_test)
    at.file_uploader(key="snapshot_file").set_value(("big.pickle", b"\x80\x04" + b"N" * (2 << 20), "x"))
    ok(at.run())
    assert len(at.error) == 1 and "larger than the limit of 1,048,576 bytes" in at.error[0].value
