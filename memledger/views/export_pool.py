"""Chart exports that do not block each other: one Kaleido browser with several tabs.

kaleido's global sync server answers one request at a time through one queue, so every user's
PNG/SVG export waited behind every other's (a global lock kept the answers from crossing). Here
one background thread runs an asyncio loop with a `kaleido.Kaleido(n=TABS)`: each export takes a
free tab, renders, and gives it back (kaleido's own tab queue), so up to TABS exports render at
once and a request waits only for a tab, with a timeout. Source: kaleido 1.x, kaleido.py
(`Kaleido.calc_fig`, `tabs_ready`).
"""
from __future__ import annotations

import asyncio
import threading

TABS = 4
TIMEOUT_S = 30.0


class Pool:
    def __init__(self, browser: str, tabs: int = TABS):
        self.browser, self.tabs = browser, tabs
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="kaleido-pool")
        self.thread.start()
        self.kaleido = self._call(self._open(), TIMEOUT_S * 2)

    async def _open(self):
        import kaleido
        k = kaleido.Kaleido(n=self.tabs, path=self.browser, mathjax=False)
        await k.open()
        return k

    def _call(self, coro, timeout: float):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def render(self, fig, opts: dict, timeout: float = TIMEOUT_S) -> bytes:
        return self._call(self.kaleido.calc_fig(fig, opts=opts), timeout)


_pool: Pool | None = None
_start = threading.Lock()  # held only while the browser starts, never during a render


def pool(browser: str) -> Pool:
    global _pool
    if _pool is None:
        with _start:
            if _pool is None:
                _pool = Pool(browser)
    return _pool
