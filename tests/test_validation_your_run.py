"""The Validation page's "Your run" section under AppTest: a snapshot fixture is measured and
put beside the link's configuration; a hostile file is an error line and the page stays up."""
from __future__ import annotations

import pickle
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "snapshots"


class _Upload:
    """What st.file_uploader hands the page (name, bytes, file_id)."""
    def __init__(self, name: str, raw: bytes):
        self.name, self._raw, self.file_id = name, raw, f"{name}-{len(raw)}"

    def getvalue(self) -> bytes:
        return self._raw


def _run(app_test, monkeypatch, name: str, raw: bytes):
    import streamlit as st
    real = st.file_uploader

    def uploader(label, *a, key=None, **kw):
        return _Upload(name, raw) if key == "snapshot_file" else real(label, *a, key=key, **kw)
    monkeypatch.setattr(st, "file_uploader", uploader)
    at = app_test("pages/validation.py")
    at.run()
    assert not at.exception, at.exception
    return at


def test_a_snapshot_is_measured_beside_the_prediction(app_test, monkeypatch):
    raw = (FIX / "step-python-stacks.pickle.gz").read_bytes()
    at = _run(app_test, monkeypatch, "step.pickle.gz", raw)
    assert "Your run: a PyTorch memory snapshot beside the ledger" in [h.value for h in at.subheader]
    assert any("Peak allocated: measured 1.06 GiB" in i.value for i in at.info), \
        [i.value for i in at.info]


def test_a_hostile_snapshot_is_an_error_line_and_the_page_stays_up(app_test, monkeypatch):
    class Evil:
        def __reduce__(self):
            import os
            return (os.system, ("touch /tmp/memledger-pwned-app",))
    at = _run(app_test, monkeypatch, "run.pickle", pickle.dumps(Evil()))
    assert any("refuses the global" in e.value for e in at.error)
    assert not Path("/tmp/memledger-pwned-app").exists()
    assert "torchtitan's own code at real scale" in [h.value for h in at.subheader]
