"""Shared test helpers: decoding Plotly figures that Streamlit serialised, and AppTest setup."""
import base64
import json
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Unit tests must not start a browser for kaleido when they run app.py.
os.environ.setdefault("MEMLEDGER_EXPORT_WARMUP", "0")

DTYPES = {"f8": np.float64, "f4": np.float32, "i1": np.int8, "u1": np.uint8, "i2": np.int16,
          "u2": np.uint16, "i4": np.int32, "u4": np.uint32, "i8": np.int64, "u8": np.uint64}


def decode(obj):
    """Plotly ≥ 6 writes numeric arrays as {"dtype": "f8", "bdata": base64}: make them lists."""
    if isinstance(obj, dict):
        if "bdata" in obj and "dtype" in obj:
            arr = np.frombuffer(base64.b64decode(obj["bdata"]), dtype=DTYPES[obj["dtype"]])
            if "shape" in obj:
                arr = arr.reshape([int(n) for n in str(obj["shape"]).split(",")])
            return arr.tolist()
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


def figures(at) -> list[dict]:
    """Every Plotly figure an AppTest run rendered, decoded."""
    return [decode(json.loads(el.proto.spec)) for el in at.get("plotly_chart")]


def chart_numbers(fig: dict) -> list:
    """The numbers a figure draws (x and y of every trace), for 'did the chart change' checks."""
    return [(tr.get("name"), tr.get("x"), tr.get("y")) for tr in fig["data"]]


@pytest.fixture
def app_test():
    from streamlit.testing.v1 import AppTest

    def make(page: str, query: str = ""):
        at = AppTest.from_file(str(ROOT / page), default_timeout=30)
        if query:
            from urllib.parse import parse_qsl
            at.query_params.update(dict(parse_qsl(query, keep_blank_values=True)))
        return at
    return make


def require_browser() -> None:
    """Skip a real-browser test without Chromium, unless MEMLEDGER_REQUIRE_BROWSER=1 (CI),
    where a missing browser fails it."""
    from memledger.views.export import find_browser
    if not find_browser():
        if os.environ.get("MEMLEDGER_REQUIRE_BROWSER") == "1":
            pytest.fail("MEMLEDGER_REQUIRE_BROWSER=1 but no Chromium at /usr/bin/chromium")
        pytest.skip("no Chromium: apt-get install chromium")


@pytest.fixture(scope="module")
def served_app():
    """A fresh dashboard server and a headless Chromium, shared by one test module."""
    require_browser()
    from memledger.views.devserver import chromium, streamlit_app
    with streamlit_app() as base, chromium() as browser:
        yield base, browser


def stored_without(tmp_path, stored: dict, name: str, filename: str):
    """A copy of a stored engine file without case `name` (written to tmp_path/filename), and
    a run's document holding only that case: what `--merge` must put back together."""
    path = tmp_path / filename
    path.write_text(json.dumps({**stored, "measurements": [
        e for e in stored["measurements"] if e["case"] != name]}))
    entry = next(e for e in stored["measurements"] if e["case"] == name)
    return path, {**stored, "measurements": [entry]}
