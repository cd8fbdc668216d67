"""A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp): what
`torch.cuda.memory_reserved` holds after a sequence of allocations and frees.

Rules, each from that file (docs/allocator.md has the table):
  round_size            requests round up to a multiple of kMinBlockSize (512 B)
  pools                 size <= kSmallSize (1 MiB) → small pool, else large; one pair of pools
                        per stream: a freed block is reused only by its own stream
  get_allocation_size   a new segment is kSmallBuffer (2 MiB) for small requests, kLargeBuffer
                        (20 MiB) for requests < kMinLargeAlloc (10 MiB), else the request
                        rounded up to kRoundLarge (2 MiB)
  get_free_block        best fit: the smallest cached free block of the stream's pool that
                        holds the request; max_split_size: a request below it never takes an
                        oversize block (>= max_split_size), one above it takes an oversize block
                        only if it wastes < kLargeBuffer
  should_split          the remainder becomes a free block if >= kMinBlockSize (small pool,
                        or expandable segments) or > kSmallSize (large pool), and the block is
                        below max_split_size
  free_block            a freed block merges with its free neighbours of the same segment
  expandable_segments   one segment per (stream, pool) that grows by pages (kSmallBuffer for
                        the small pool, kLargeBuffer for the large one) at its free tail
Ignores: garbage_collection_threshold (off by default), empty_cache and the free-and-retry
on an out-of-memory (a step that fits never triggers it), roundup_power2_divisions (off by
default), events recorded across streams (record_stream delays a free; not modelled), CUDA
graphs' private pools, the 1 B allocation of a zero-size tensor.
"""
from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from memledger.errors import SpecError

# the communication items FSDP2 allocates on its own streams (all-gather, reduce-scatter)
FSDP_UNIT_ITEMS = ("zero-3 gather + prefetch", "zero-3 reduce-scatter input")
# a MoE layer's all-to-all buffers (default stream): alive inside the layer only
MOE_A2A_ITEMS = ("moe all-to-all / dispatch", "moe all-to-all / combine")

K_MIN_BLOCK_SIZE = 512  # kMinBlockSize
K_SMALL_SIZE = 1 << 20  # kSmallSize: largest "small" request
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: segment of the small pool
K_LARGE_BUFFER = 20 << 20  # kLargeBuffer: segment for large requests below kMinLargeAlloc
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
K_ROUND_LARGE = 2 << 20  # kRoundLarge: larger requests round up to this


@dataclass(frozen=True, kw_only=True)
class AllocatorSpec:
    """PYTORCH_CUDA_ALLOC_CONF: the two settings that change what is reserved in a step."""

    expandable_segments: bool = False
    max_split_size_bytes: int = 0  # 0: unlimited (PyTorch's default, SIZE_MAX)

    def __post_init__(self):
        m = self.max_split_size_bytes
        if not isinstance(m, int) or m < 0 or (0 < m <= K_LARGE_BUFFER):
            raise SpecError("max_split_size_bytes", "must be 0 (unlimited) or an integer > 20 MiB "
                            f"({K_LARGE_BUFFER} bytes; PyTorch's minimum), got {m!r}")


def round_size(size: int) -> int:
    return K_MIN_BLOCK_SIZE if size < K_MIN_BLOCK_SIZE else -(-size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE


def allocation_size(size: int) -> int:
    """The segment cudaMalloc'd when no cached block fits a (rounded) request."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


class _Block:
    __slots__ = ("size", "free", "prev", "next", "key", "pool")

    def __init__(self, size, pool, key):
        self.size, self.free, self.prev, self.next, self.pool, self.key = size, False, None, None, pool, key


class CachingAllocator:
    """Replays malloc/free; `reserved`, `allocated` and their maxima in bytes, as torch.cuda's
    memory_reserved / memory_allocated (allocated counts rounded block sizes, like PyTorch)."""

    def __init__(self, spec: AllocatorSpec = AllocatorSpec()):
        self.spec = spec
        self.reserved = self.allocated = self.max_reserved = self.max_allocated = 0
        self._free: dict[tuple, list] = {}  # (stream, small) → sorted [(size, key)]
        self._by_key: dict[int, _Block] = {}
        self._tail: dict[tuple, _Block] = {}  # expandable: last block of the pool's segment
        self._ids = itertools.count()

    def _max_split(self) -> int:
        return self.spec.max_split_size_bytes or (1 << 62)

    def malloc(self, size: int, stream: str = "default") -> _Block:
        size = round_size(size)
        pool = (stream, size <= K_SMALL_SIZE)
        block = self._best_fit(pool, size)
        if block is None:
            block = self._grow(pool, size)
        self._take(block)
        if self._should_split(block, size):
            rest = _Block(block.size - size, pool, next(self._ids))
            block.size = size
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            if self._tail.get(pool) is block:
                self._tail[pool] = rest
            self._put(rest)
        block.free = False
        self.allocated += block.size
        self.max_allocated = max(self.max_allocated, self.allocated)
        return block

    def free(self, block: _Block) -> None:
        self.allocated -= block.size
        block.free = True
        for nb in (block.prev, block.next):
            if nb is not None and nb.free:
                self._take(nb)
                block.size += nb.size
                if nb is block.prev:
                    block.prev = nb.prev
                    if nb.prev is not None:
                        nb.prev.next = block
                else:
                    block.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = block
                    if self._tail.get(block.pool) is nb:
                        self._tail[block.pool] = block
        self._put(block)

    def _best_fit(self, pool, size):
        lst = self._free.get(pool)
        if not lst:
            return None
        i = bisect.bisect_left(lst, (size, -1))
        if i == len(lst):
            return None
        b = self._by_key[lst[i][1]]
        ms = self._max_split()
        if size < ms and b.size >= ms:
            return None
        if size >= ms and b.size >= size + K_LARGE_BUFFER:
            return None
        return b

    def _grow(self, pool, size) -> _Block:
        if self.spec.expandable_segments:
            page = K_SMALL_BUFFER if pool[1] else K_LARGE_BUFFER
            tail = self._tail.get(pool)
            have = tail.size if tail is not None and tail.free else 0
            add = -(-(size - have) // page) * page
            self._map(add)
            if have:
                self._take(tail)
                tail.size += add
                self._put(tail)
                return tail
            b = _Block(add, pool, next(self._ids))
            b.prev = tail
            if tail is not None:
                tail.next = b
            self._tail[pool] = b
            b.free = True
            self._put(b)
            return b
        b = _Block(allocation_size(size), pool, next(self._ids))
        self._map(b.size)
        b.free = True
        self._put(b)
        return b

    def _map(self, n: int) -> None:
        self.reserved += n
        self.max_reserved = max(self.max_reserved, self.reserved)

    def _should_split(self, block, size) -> bool:
        remaining = block.size - size
        if block.pool[1] or self.spec.expandable_segments:
            return remaining >= K_MIN_BLOCK_SIZE
        return block.size < self._max_split() and remaining > K_SMALL_SIZE

    def _put(self, b: _Block) -> None:
        b.free = True
        self._by_key[b.key] = b
        bisect.insort(self._free.setdefault(b.pool, []), (b.size, b.key))

    def _take(self, b: _Block) -> None:
        lst = self._free[b.pool]
        i = bisect.bisect_left(lst, (b.size, b.key))
        del lst[i]
        del self._by_key[b.key]
