"""The Validation page's Megatron-Core section under AppTest: the stored gloo CPU runs of
Megatron-Core's own code, re-predicted rank by rank, with a chart and a table; a clear line when
none is stored and an error line (page still up) for a damaged file."""
from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(app_test, folder=None, monkeypatch=None):
    if folder is not None:
        from memledger.views.validation import data
        monkeypatch.setenv(data.ENV_VAR, str(folder))
    at = app_test("pages/validation.py")
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_section_shows_every_stored_megatron_core_case(app_test):
    at = _run(app_test)
    assert "Megatron-Core's own code on CPU processes" in [h.value for h in at.subheader]
    box = next(s for s in at.selectbox if s.key == "megatron_case")
    assert {"gpt-local tp1 dp1", "gpt-local tp2 dp1", "gpt-local tp1 dp2 distopt"} <= \
        set(box.options)
    assert any("megatron-core 0.16.1" in c.value for c in at.caption)


def test_choosing_a_two_rank_case_lists_both_ranks(app_test):
    at = _run(app_test)
    next(s for s in at.selectbox if s.key == "megatron_case").set_value("gpt-local tp2 dp1").run()
    assert not at.exception, at.exception
    frame = next(d.value for d in at.dataframe if "rank" in d.value.columns)
    assert set(frame["rank"]) == {0, 1}


def test_without_a_stored_run_it_says_how_to_make_one(tmp_path, monkeypatch, app_test):
    folder = tmp_path / "v"
    shutil.copytree(ROOT / "validation", folder)
    (folder / "engine-megatron-core.json").unlink()
    at = _run(app_test, folder, monkeypatch)
    assert any("memledger validate --engine megatron-core" in i.value for i in at.info)


def test_a_damaged_file_is_an_error_line(tmp_path, monkeypatch, app_test):
    folder = tmp_path / "v"
    shutil.copytree(ROOT / "validation", folder)
    (folder / "engine-megatron-core.json").write_text("{not json")
    at = _run(app_test, folder, monkeypatch)
    # the message is Markdown-escaped (ui.md_escape): compare it as shown
    assert any("cannot be read as a Megatron-Core run" in e.value.replace("\\", "")
               for e in at.error)
