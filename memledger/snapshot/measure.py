"""What a snapshot measured: peak allocated and reserved, the live-bytes timeline, and the
allocations alive at the peak.

Allocated is the running sum over one device's trace of `alloc` (+size) and `free_completed`
(−size); torch records each with the size asked for (CUDACachingAllocator.cpp: `orig_size`,
`block->requested_size`), so this is requested bytes — torch.cuda.memory_allocated() counts
the blocks rounded up to 512 B, at most 511 B more per allocation. A block freed on one stream
but in use on another stays allocated until free_completed. Reserved is the running sum of
`segment_alloc` / `segment_map` (+) and `segment_free` / `segment_unmap` (−). Both start from
what was already there when the trace began: the segments' state at the dump (the
requested_size of blocks active_allocated or pending free; segments' total_size) minus the trace's net change, since
_dump_snapshot takes both together. A trace that does not start from nothing — cut by
`max_entries` (frees of allocations it never saw) or started after allocations were made — is
reported partial, with why.
Ignores: other devices' traces (the device with the most entries is measured), the memory
outside the caching allocator (CUDA context, NCCL's own cudaMalloc), `oom` and `snapshot`
entries (markers, no bytes).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memledger.snapshot.reader import STATES_PENDING

MAX_POINTS = 2_000  # timeline points kept (each the highest of its stretch of events)
_ALLOC, _FREE, _SEG_UP, _SEG_DOWN = "alloc", "free_completed", ("segment_alloc", "segment_map"), \
    ("segment_free", "segment_unmap")


@dataclass(frozen=True)
class Alive:
    size_bytes: int
    frames: list
    alloc_index: int  # -1: allocated before the trace's first entry
    free_index: int  # -1: still allocated at the dump
    from_segments: bool = False  # known only from the segments' state (its alloc stack)


@dataclass(frozen=True, kw_only=True)
class Measured:
    device: int
    n_entries: int
    partial: bool
    partial_reasons: tuple[str, ...]
    base_allocated_bytes: int
    base_reserved_bytes: int
    peak_allocated_bytes: int
    peak_index: int  # entry after which the peak holds (-1: at the start)
    peak_reserved_bytes: int
    end_allocated_bytes: int
    end_reserved_bytes: int
    timeline: tuple  # (entry index, time_us, allocated bytes, reserved bytes) per point
    alive: tuple[Alive, ...]
    entries: list  # the device's trace, as read (attribute.py reads frames and phases)


def device_of(snap: dict) -> int:
    traces = snap["device_traces"]
    return max(range(len(traces)), key=lambda d: (len(traces[d]), -d)) if traces else 0


def _segments(snap: dict, device: int) -> list:
    return [s for s in snap["segments"] if s.get("device", device) == device]


def measure(snap: dict) -> Measured:
    device = device_of(snap)
    entries = snap["device_traces"][device] if snap["device_traces"] else []
    segs = _segments(snap, device)
    end_alloc = sum(_requested(b) for s in segs for b in s["blocks"]
                    if b["state"] == "active_allocated" or b["state"] in STATES_PENDING)
    end_res = sum(s["total_size"] for s in segs)
    n = len(entries)
    d_alloc = np.zeros(n + 1, dtype=np.int64)
    d_res = np.zeros(n + 1, dtype=np.int64)
    open_at: dict[int, int] = {}
    free_of: dict[int, int] = {}
    orphans: list[tuple[int, int, list]] = []  # (free index, size, frames of the free)
    seg_open: set[int] = set()
    seg_orphans = 0
    for k, e in enumerate(entries, 1):
        a = e["action"]
        if a == _ALLOC:
            d_alloc[k] = e["size"]
            open_at[e["addr"]] = k
        elif a == _FREE:
            d_alloc[k] = -e["size"]
            j = open_at.pop(e["addr"], None)
            if j is None:
                orphans.append((k, e["size"], e.get("frames", [])))
            else:
                free_of[j] = k
        elif a in _SEG_UP:
            d_res[k] = e["size"]
            seg_open.add(e["addr"])
        elif a in _SEG_DOWN:
            d_res[k] = -e["size"]
            if e["addr"] not in seg_open:
                seg_orphans += 1
    alloc_run, res_run = np.cumsum(d_alloc), np.cumsum(d_res)
    net_alloc, net_res = int(alloc_run[-1]), int(res_run[-1])
    reasons = []
    base_alloc = end_alloc - net_alloc
    if base_alloc < 0:  # recording stopped before the dump: the segments are later than the trace
        reasons.append(f"the segments' state ({end_alloc:,} B allocated) is older or newer than "
                       "the trace's end; allocated counted from the trace's frees alone")
        base_alloc = sum(sz for _, sz, _ in orphans)
    base_res = max(end_res - net_res, 0)
    if orphans or seg_orphans:
        reasons.append(f"trace cut (max_entries): {len(orphans):,} frees and {seg_orphans:,} "
                       "segment frees of memory allocated before its first entry")
    if base_alloc > 0:
        reasons.append(f"{base_alloc:,} B were allocated before the trace's first entry "
                       "(taken from the segments' state)")
    if n == 0:
        reasons.append("no trace entries (memory history was not recorded): only the state at "
                       "the dump, which is not a peak")
    alloc_run += base_alloc
    res_run += base_res
    peak_k = int(np.argmax(alloc_run))
    alive = _alive_at(peak_k, entries, open_at, free_of, orphans, segs)
    return Measured(device=device, n_entries=n, partial=bool(reasons), partial_reasons=tuple(reasons),
                    base_allocated_bytes=int(base_alloc), base_reserved_bytes=int(base_res),
                    peak_allocated_bytes=int(alloc_run[peak_k]), peak_index=peak_k - 1,
                    peak_reserved_bytes=int(res_run.max()), end_allocated_bytes=end_alloc,
                    end_reserved_bytes=end_res, timeline=_points(entries, alloc_run, res_run),
                    alive=alive, entries=entries)


def _requested(block: dict) -> int:
    """The bytes the trace counts for a block (torch >= 2.1 writes requested_size)."""
    r = block.get("requested_size")
    return r if type(r) is int else block["size"]


def _alive_at(p: int, entries, open_at, free_of, orphans, segs) -> tuple[Alive, ...]:
    """Allocations alive just after entry p (1-based; 0 = before the first)."""
    out = [Alive(size_bytes=entries[j - 1]["size"], frames=entries[j - 1].get("frames", []),
                 alloc_index=j - 1, free_index=free_of.get(j, 0) - 1)
           for j in _alive_allocs(p, free_of, open_at)]
    out += [Alive(size_bytes=sz, frames=[], alloc_index=-1, free_index=k - 1)
            for k, sz, _ in orphans if k > p]
    traced = set(open_at)  # addresses whose live block the trace allocated
    out += [Alive(size_bytes=_requested(b), frames=b.get("frames", []), alloc_index=-1, free_index=-1,
                  from_segments=True)
            for s in segs for b in s["blocks"]
            if (b["state"] == "active_allocated" or b["state"] in STATES_PENDING)
            and b.get("address") not in traced]
    return tuple(out)


def _alive_allocs(p: int, free_of: dict, open_at: dict) -> list[int]:
    live = [j for j, k in free_of.items() if j <= p < k]
    live += [j for j in open_at.values() if j <= p]
    return sorted(live)


def _points(entries, alloc_run, res_run) -> tuple:
    """At most MAX_POINTS points, each the highest allocated of its stretch (so the peak shows)."""
    n = len(alloc_run)
    step = max(1, -(-n // MAX_POINTS))
    idx = np.arange(0, n, step)
    if step > 1:
        pad = np.full(len(idx) * step - n, np.iinfo(np.int64).min, dtype=np.int64)
        idx = idx + np.argmax(np.concatenate([alloc_run, pad]).reshape(-1, step), axis=1)
    out = []
    for k in idx.tolist():
        t = entries[k - 1].get("time_us", 0) if k else (entries[0].get("time_us", 0) if entries else 0)
        out.append((k - 1, t, int(alloc_run[k]), int(res_run[k])))
    return tuple(out)
