"""Remote offload across pipeline ranks (seed 1, the fourth way): level the staircase.

Under 1F1B rank r holds p − r micro-batches, so early ranks are full and late ranks are empty.
Activations may move from a rank to any *later* rank's spare memory (they are needed again in
the sender's backward, which later ranks finish first). Each rank is described by
  phase  bytes at its forward/backward peak, movable bytes included
  movable  the bytes of that peak allowed to leave
  floor  bytes of its other phase (the optimizer step), which no activation move changes
and a level L is reachable when, walking from rank 0 to p − 1, every rank above L can send
phase − L ≤ movable bytes into a pool, and later ranks below L take from the pool up to L − phase.
Taking from the pool early never hurts (any byte may go to any later rank), so this greedy walk
decides feasibility exactly; the smallest reachable L is found by bisection over integers.
Senders are served nearest first (last in, first out), so bytes travel the fewest hops.
Moving conserves bytes and never raises the maximum (L ≤ the current maximum always works).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankLoad:
    phase: int
    movable: int = 0
    floor: int = 0

    @property
    def peak(self) -> int:
        return max(self.phase, self.floor)


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    bytes: int


@dataclass(frozen=True)
class Levelling:
    level: int  # the reached level (bytes), or the target asked for
    feasible: bool
    before: tuple[int, ...]  # peaks before
    after: tuple[int, ...]  # peaks after (= before when infeasible)
    transfers: tuple[Transfer, ...]

    @property
    def moved_bytes(self) -> int:
        return sum(x.bytes for x in self.transfers)

    def sent(self, r: int) -> int:
        return sum(x.bytes for x in self.transfers if x.src == r)

    def received(self, r: int) -> int:
        return sum(x.bytes for x in self.transfers if x.dst == r)


def _walk(loads: list[RankLoad], level: int) -> list[Transfer] | None:
    pool: list[list[int]] = []  # [src, bytes] still looking for a home
    out: list[Transfer] = []
    for r, x in enumerate(loads):
        if x.floor > level:
            return None
        if x.phase > level:
            need = x.phase - level
            if need > x.movable:
                return None
            pool.append([r, need])
            continue
        room = level - x.phase
        while room and pool:
            src = pool[-1]
            take = min(room, src[1])
            out.append(Transfer(src[0], r, take))
            room -= take
            src[1] -= take
            if not src[1]:
                pool.pop()
    return None if pool else out


def _result(loads, level, transfers) -> Levelling:
    before = tuple(x.peak for x in loads)
    if transfers is None:
        return Levelling(level=level, feasible=False, before=before, after=before, transfers=())
    delta = [0] * len(loads)
    for x in transfers:
        delta[x.src] -= x.bytes
        delta[x.dst] += x.bytes
    after = tuple(max(x.phase + d, x.floor) for x, d in zip(loads, delta))
    merged: dict[tuple[int, int], int] = {}
    for x in transfers:
        merged[(x.src, x.dst)] = merged.get((x.src, x.dst), 0) + x.bytes
    return Levelling(level=level, feasible=True, before=before, after=after,
                     transfers=tuple(Transfer(s, d, b) for (s, d), b in sorted(merged.items())))


def level_to(loads: list[RankLoad], target: int) -> Levelling:
    """Bring every rank to ≤ target if the movable bytes allow; infeasible otherwise."""
    return _result(loads, target, _walk(loads, target))


def level_min(loads: list[RankLoad]) -> Levelling:
    """The lowest level reachable (min over moves of the max peak)."""
    if not loads:
        return Levelling(level=0, feasible=True, before=(), after=(), transfers=())
    hi = max(x.peak for x in loads)
    lo = max(max(x.floor, x.phase - x.movable) for x in loads)
    while lo < hi:
        mid = (lo + hi) // 2
        if _walk(loads, mid) is None:
            lo = mid + 1
        else:
            hi = mid
    return _result(loads, hi, _walk(loads, hi))
