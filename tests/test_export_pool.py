"""Exports do not block each other: four PNG exports of four different figures run at once on
the kaleido tab pool and each gets its own picture back (no global lock, no crossed answers).
Skipped without kaleido >= 1 and Chromium."""
import struct
import threading

import plotly.graph_objects as go
import pytest

from memledger.views import export, export_pool


def _png_height(data: bytes) -> int:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">I", data[20:24])[0]


def test_concurrent_exports_each_get_their_own_figure():
    if not export.status().ok:
        pytest.skip(export.status().reason)
    heights = (300, 350, 400, 450)
    figs = [go.Figure(go.Bar(x=[1, 2], y=[h, 1]), layout=dict(height=h)) for h in heights]
    export.to_image(figs[0], "png")  # start the browser outside the timed part
    out = {}
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, export.to_image(figs[i], "png")))
               for i in range(len(figs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [_png_height(out[i]) for i in range(len(figs))] == [h * export.SCALE for h in heights]
    assert export_pool.TABS >= 4 and not hasattr(export, "_lock")
