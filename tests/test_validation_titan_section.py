"""The Validation page's torchtitan section under AppTest: the stored fake-scale runs of
torchtitan's own code, re-predicted, with a chart and a table; a clear line when none is stored
and an error line (page still up) for a damaged file."""
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


def test_the_section_shows_every_stored_torchtitan_case(app_test):
    at = _run(app_test)
    assert "torchtitan's own code at real scale" in [h.value for h in at.subheader]
    box = next(s for s in at.selectbox if s.key == "titan_case")
    assert "llama3-70b fsdp32 tp8 full-ac" in box.options
    assert "llama3-8b hsdp4 fsdp8 op-ac" in box.options  # HSDP: replicas of an FSDP group
    assert any("torchtitan 0.3" in c.value for c in at.caption)


def test_without_a_stored_run_it_says_how_to_make_one(tmp_path, monkeypatch, app_test):
    folder = tmp_path / "v"
    shutil.copytree(ROOT / "validation", folder)
    (folder / "engine-torchtitan.json").unlink()
    at = _run(app_test, folder, monkeypatch)
    assert any("memledger validate --engine torchtitan" in i.value for i in at.info)


def test_a_damaged_file_is_an_error_line(tmp_path, monkeypatch, app_test):
    folder = tmp_path / "v"
    shutil.copytree(ROOT / "validation", folder)
    (folder / "engine-torchtitan.json").write_text("{not json")
    at = _run(app_test, folder, monkeypatch)
    assert any("cannot be read as a torchtitan run" in e.value for e in at.error)


def test_the_gloo_section_shows_the_real_runs_and_their_fake_twins(app_test):
    """validation/engine-torchtitan-gloo.json: the ledger rows of rank 0 and, per rank, the real
    − fake bytes; the two rank rows that differ (TP × PP, pp rank 1's activations) are named."""
    at = _run(app_test)
    assert "torchtitan's own code at small sizes for real (gloo)" in [h.value for h in at.subheader]
    box = next(s for s in at.selectbox if s.key == "titan_gloo_case")
    assert "llama3-debug fsdp2 tp2 op-ac" in box.options
    assert any("Fake mode vs the real gloo run" in w.value and "differing: 2" in w.value
               for w in at.warning)


def test_without_a_gloo_run_it_says_how_to_make_one(tmp_path, monkeypatch, app_test):
    folder = tmp_path / "v"
    shutil.copytree(ROOT / "validation", folder)
    (folder / "engine-torchtitan-gloo.json").unlink()
    at = _run(app_test, folder, monkeypatch)
    assert any("--backend gloo" in i.value for i in at.info)
