"""Small pages for the planner's arrays: numpy's transparent-huge-page hint off while a search
runs (docs/planner-speed.md, Round 6).

numpy asks Linux for 2 MiB pages (`madvise(MADV_HUGEPAGE)`) on every allocation of 4 MiB or
more. On a virtual machine whose balloon driver reports free memory back to the host, freed
2 MiB pages are handed back and the next array is backed afresh by the host: filling 256 MB
measured 1.1–1.6 s the first time in a process with the hint against 0.11–0.15 s without it,
and a DeepSeek-V3 sweep (which allocates and frees a few hundred MB of chunks and kept rows)
1.9–2.1 s median against 1.06–1.29 s (`benchmarks/ab/bench_pages_ab.py`). Small pages cost a
streaming pass little on any machine, so a search runs with the hint off and restores it after.

The hint is process-wide state in numpy (`numpy._core.multiarray._set_madvise_hugepage`, the
switch behind its documented `NUMPY_MADVISE_HUGEPAGE` variable). Concurrent searches (the
app's sessions run in threads) share one count: the first to start turns it off, the last to
finish restores what was there. Without that switch (another numpy) this does nothing.
It changes where memory comes from, never a value.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

try:
    from numpy._core.multiarray import _set_madvise_hugepage as _set_hint
except ImportError:  # numpy without the switch: nothing to turn off
    _set_hint = None

_lock = threading.Lock()
_state = {"depth": 0, "before": None}


@contextmanager
def small_pages():
    """Run the body with numpy's huge-page hint off (re-entrant, thread-safe)."""
    if _set_hint is None:
        yield
        return
    with _lock:
        if _state["depth"] == 0:
            _state["before"] = _set_hint(False)
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0:
                _set_hint(_state["before"])
