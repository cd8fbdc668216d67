"""What a memory snapshot measured: peaks, the live-bytes timeline, the allocations at the peak.

Over one device's trace (`device_traces[d]`, the allocator's actions in order):
  allocated  += size at `alloc`, −= size at `free_completed` (a `free_requested` block is still
             allocated until its stream's work is done; torch writes that state
             `active_pending_free`, its docstring says `active_awaiting_free`: both count)
  reserved   += size at `segment_alloc` / `segment_map` (expandable segments), −= at
             `segment_free` / `segment_unmap`
A trace cut by `max_entries` starts mid-run: frees of blocks it never saw allocated mark it
partial, and what it lacks comes from the segments' state at the dump — the bytes alive then
(active blocks) minus the trace's net change is what was alive before the trace began, and
the same for reserved (sum of segment sizes). Peaks are that base plus the trace's highest
running sum. Ignores: other devices (the busiest is measured unless one is named), the `oom`
and `snapshot` markers (no bytes move).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from memledger.errors import SpecError

ACTIVE = ("active_allocated", "active_pending_free", "active_awaiting_free")
RESERVE = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
TIMELINE_POINTS = 400


@dataclass(frozen=True, kw_only=True)
class Alloc:
    index: int  # position of its `alloc` in the trace (-1: before the trace began)
    size: int
    freed: int  # position of its `free_completed` (len(trace): still alive at the dump)
    frames: tuple = ()
    stream: int = 0


@dataclass(frozen=True, kw_only=True)
class Measured:
    device: int
    entries: int
    partial: bool
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_index: int  # trace position where allocated peaks (-1: before the trace)
    base_allocated_bytes: int  # alive before the trace began (0 for a whole trace)
    allocs: tuple = field(repr=False, default=())
    timeline: tuple = field(repr=False, default=())  # (trace position, allocated bytes)


def _device(doc: dict, device: int | None) -> int:
    traces = doc.get("device_traces", [])
    if device is None:
        return max(range(len(traces)), key=lambda d: len(traces[d])) if traces else 0
    if not 0 <= device < max(len(traces), 1):
        raise SpecError("device", f"the snapshot has traces for devices 0..{len(traces) - 1}, "
                                  f"not {device}")
    return device


def _frames(e) -> tuple:
    fr = e.get("frames") or ()
    return tuple((f.get("filename", ""), f.get("name", "")) for f in fr[:256]
                 if isinstance(f, dict))


def _end_state(doc: dict, device: int) -> tuple[int, int]:
    alive = reserved = 0
    for s in doc.get("segments", []):
        if s.get("device", device) != device:
            continue
        reserved += s["total_size"]
        alive += sum(b.get("size", 0) for b in s.get("blocks", ()) if b.get("state") in ACTIVE)
    return alive, reserved


def measure(doc: dict, device: int | None = None) -> Measured:
    d = _device(doc, device)
    trace = doc.get("device_traces", [[]])[d] if doc.get("device_traces") else []
    n = len(trace)
    open_: dict[int, tuple[int, int, tuple, int]] = {}
    allocs: list[Alloc] = []
    live = res = 0
    best, best_at, res_best = 0, -1, 0
    partial = False
    samples: list[int] = []
    for i, e in enumerate(trace):
        a, size = e["action"], e.get("size", 0)
        if a == "alloc":
            live += size
            open_[e.get("addr", i)] = (i, size, _frames(e), e.get("stream", 0))
        elif a == "free_completed":
            live -= size
            hit = open_.pop(e.get("addr"), None)
            if hit is None:
                partial = True  # allocated before the trace began
                allocs.append(Alloc(index=-1, size=size, freed=i, stream=e.get("stream", 0)))
            else:
                allocs.append(Alloc(index=hit[0], size=hit[1], freed=i, frames=hit[2],
                                    stream=hit[3]))
        elif a == "free_requested" and e.get("addr") not in open_:
            partial = True
        elif a in RESERVE:
            res += RESERVE[a] * size
            res_best = max(res_best, res)
        if live > best:
            best, best_at = live, i
        samples.append(live)
    seen = set(open_)
    for i, size, frames, stream in open_.values():
        allocs.append(Alloc(index=i, size=size, freed=n, frames=frames, stream=stream))
    end_alive, end_reserved = _end_state(doc, d)
    if end_alive > live:  # blocks alive at the dump that the trace never allocated
        allocs += _pre_trace_blocks(doc, d, seen, n)
    base = max(0, end_alive - live)
    base_res = max(0, end_reserved - res)
    if base and not partial and n:
        partial = True  # blocks alive at the dump that the trace never allocated
    return Measured(device=d, entries=n, partial=partial,
                    peak_allocated_bytes=base + best, peak_reserved_bytes=base_res + res_best,
                    peak_index=best_at if best else -1, base_allocated_bytes=base,
                    allocs=tuple(sorted(allocs, key=lambda a: a.index)),
                    timeline=_downsample(samples, base))


def _pre_trace_blocks(doc: dict, device: int, seen: set, n: int) -> list[Alloc]:
    out = []
    for s in doc.get("segments", []):
        if s.get("device", device) != device:
            continue
        for b in s.get("blocks", ()):
            if b.get("state") in ACTIVE and b.get("address") not in seen:
                out.append(Alloc(index=-1, size=b.get("size", 0), freed=n, frames=_frames(b),
                                 stream=s.get("stream", 0)))
    return out


def _downsample(samples: list[int], base: int) -> tuple:
    """At most TIMELINE_POINTS (position, bytes) pairs, each its stretch's maximum (peaks kept)."""
    n = len(samples)
    if not n:
        return ()
    step = max(1, -(-n // TIMELINE_POINTS))
    out = []
    for s in range(0, n, step):
        chunk = samples[s:s + step]
        j = max(range(len(chunk)), key=chunk.__getitem__)
        out.append((s + j, base + chunk[j]))
    return tuple(out)


def alive_at(m: Measured, index: int) -> list[Alloc]:
    """Allocations alive just after trace position `index` (pre-trace ones included)."""
    return [a for a in m.allocs if a.index <= index < a.freed]
