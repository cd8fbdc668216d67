"""What one request may cost the server, and caches bounded by bytes. Pure: no Streamlit.

The dashboard is hosted and driven by share links, so a link is input from anyone, and the
server is one process: a request that takes a core for a minute makes every other user wait.
The plausibility bounds of `memledger.specs.bounds` cap every number a link can carry; within
them, the cost of a page is still the number of ledgers it builds times the pipeline ranks of
each (a ledger is one set of rows per pipeline rank: ~0.25 ms of CPU and ~18 kB per rank,
measured on DeepSeek-V3 stretched to 1,280 layers and ranks), and the Planner's cost is the
number of configurations it evaluates (~9 M per second, numpy). `admit_ledgers` and
`admit_plan` refuse a request over budget before any work, with a message that names the
setting to change; `ByteLRU` keeps results while their estimated size fits a byte budget, and
stores values, never exceptions (a cached exception keeps its traceback and every frame's
locals alive).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from functools import wraps

from memledger.errors import SpecError

# Per request. Ranks: 8,000 pipeline-rank ledgers ~ 2 s of CPU (0.25 ms each).
MAX_RANK_LEDGERS = 8_000
# The Planner: world sizes in one link, and configurations evaluated per request. The README's
# headline job, DeepSeek-V3 on 2,048 H100 (seq 4096, global batch 15,360) with every axis
# open, is 23.5-24.0 M configurations: 1.2 s of CPU and +100 MB resident (8.4 M fitting rows of
# 28 B), measured; a third of them are pruned unassembled (planner.cells). 32 M admits it with
# a margin (~1.7 s); a search where everything fits would keep at most ~900 MB of rows, which
# the page's cache (PLANNER_CACHE_BYTES) then does not keep.
PLANNER_MAX_WORLDS = 4
PLANNER_MAX_CONFIGURATIONS = 32_000_000
# The Planner page's cache of plans (28 B per fitting configuration kept): the largest
# admitted plan, as the st.cache_resource(max_entries=1) it replaces kept.
PLANNER_CACHE_BYTES = 300 << 20
# Process-wide: bytes of ledgers kept between requests.
LEDGER_CACHE_BYTES = 256 << 20
BYTES_PER_ITEM = 256  # one ledger Item with its formula text, measured ~240 B
# The step timeline of one rank: its events are built on the server (~2 µs each: 262,142 for
# m = 65,535 at pp = 64 took 0.5 s, and the page ~2 s with the chart's own work) and drawn in
# the browser, where a stacked chart of 1.6 M points took ~20 s. Events over
# MAX_TIMELINE_EVENTS (~0.25 s) are not built, so such a link answers at once with the reason;
# a chart draws at most MAX_DRAWN_EVENTS of them (6 stacked traces: 24,000 points, ~0.3 s in
# Chromium).
MAX_TIMELINE_EVENTS = 120_000
MAX_DRAWN_EVENTS = 4_000


class OverBudget(SpecError):
    """A request that would cost more than the server gives one request."""


def admit_ledgers(n_ledgers: int, pp: int, what: str) -> None:
    """Refuse `n_ledgers` ledgers of `pp` pipeline ranks each when over MAX_RANK_LEDGERS."""
    cost = n_ledgers * pp
    if cost > MAX_RANK_LEDGERS:
        most = max(1, MAX_RANK_LEDGERS // max(n_ledgers, 1))
        raise OverBudget("pp", f"{what} builds {n_ledgers} ledgers of pp={pp:,} pipeline ranks "
                               f"each ({cost:,} rank ledgers), more than this server computes "
                               f"for one request ({MAX_RANK_LEDGERS:,}); use pp <= {most:,}")


def admit_plan(n_worlds: int, n_configurations: int) -> None:
    """Refuse a Planner request over its world-size or configuration budget. The field named
    is the setting to change: the world list only when it holds more than one size."""
    if n_worlds > PLANNER_MAX_WORLDS:
        raise OverBudget("worlds", f"{n_worlds} world sizes: this server searches at most "
                                   f"{PLANNER_MAX_WORLDS} per request")
    if n_configurations > PLANNER_MAX_CONFIGURATIONS:
        fewer = ", or search fewer world sizes" if n_worlds > 1 else ""
        raise OverBudget("constraints", f"the search covers {n_configurations:,} configurations, "
                                        f"more than this server evaluates for one request "
                                        f"({PLANNER_MAX_CONFIGURATIONS:,}); fix tp, pp or ep, or "
                                        f"bound vpp, cp or the micro-batch in Constraints{fewer}")


def timeline_events(rank) -> int:
    """The events of a rank's step timeline, counted from its shape without building them:
    per micro-batch and stage, a forward and a backward per layer plus at most two more (the
    loss's forward and backward, or a layerless stage's closing backward: an upper bound,
    exact for a stage with the loss), then the optimizer step and zero_grad."""
    sh = rank.shape
    if sh is None:
        return 0
    per_mb = sum(2 * len(s.layers) + 2 for s in sh.stages)
    return sh.micro_batches * per_mb + 2


def admit_timeline(rank, what: str) -> None:
    n = timeline_events(rank)
    if n > MAX_TIMELINE_EVENTS:
        raise OverBudget("m", f"{what} has about {n:,} events, more than this server builds for "
                              f"one request ({MAX_TIMELINE_EVENTS:,}); use fewer micro-batches "
                              f"(m <= {max(1, rank.shape.micro_batches * MAX_TIMELINE_EVENTS // n):,})")


def drawn_events(n: int, most: int = MAX_DRAWN_EVENTS) -> list[int] | None:
    """None when all `n` events are drawn; else bins of ⌈n / most⌉ consecutive events whose
    highest one the chart keeps (the caller picks it), as the bins' starts."""
    if n <= most:
        return None
    k = -(-n // most)
    return list(range(0, n, k))


def ledger_bytes(led) -> int:
    """Estimated resident size of a Ledger: its items dominate."""
    return 4096 + BYTES_PER_ITEM * sum(len(r.items) for r in led.ranks)


class ByteLRU:
    """A thread-safe least-recently-used map whose values' estimated sizes sum to <= max_bytes.
    A value larger than the whole budget is returned but not kept."""

    def __init__(self, max_bytes: int, sizeof: Callable[[object], int]):
        self.max_bytes, self.sizeof = max_bytes, sizeof
        self.data: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()

    def get(self, key, default=None):
        with self.lock:
            if key not in self.data:
                return default
            self.data.move_to_end(key)
            return self.data[key][0]

    def put(self, key, value) -> None:
        size = self.sizeof(value)
        with self.lock:
            if key in self.data:
                self.bytes -= self.data.pop(key)[1]
            if size > self.max_bytes:
                return
            self.data[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                self.bytes -= self.data.popitem(last=False)[1][1]

    def clear(self) -> None:
        with self.lock:
            self.data.clear()
            self.bytes = 0


def byte_lru(max_bytes: int, sizeof: Callable[[object], int]):
    """Like functools.lru_cache, bounded by the estimated bytes of the results (which must not
    be exceptions: a raising call is not cached)."""
    def wrap(fn):
        cache = ByteLRU(max_bytes, sizeof)
        missing = object()

        @wraps(fn)
        def cached(*args):
            value = cache.get(args, missing)
            if value is missing:
                value = fn(*args)
                cache.put(args, value)
            return value
        cached.cache = cache
        cached.cache_clear = cache.clear
        return cached
    return wrap
