"""One way to name a peak on every page: peak allocated (bytes in live tensors,
torch.cuda.max_memory_allocated), peak reserved (the caching allocator's segments,
memledger.ledger.reserved) or peak total (allocated + allocator slack + CUDA context: what the
GPU must hold, the figure fits / over is decided on), always GiB (2^30 bytes) with two decimals."""
from __future__ import annotations

from memledger.units import gib

KINDS = {
    "allocated": "bytes in live tensors (torch.cuda.max_memory_allocated)",
    "reserved": "the caching allocator's segments (torch.cuda.max_memory_reserved, docs/allocator.md)",
    "total": "peak allocated + allocator slack + CUDA context",
}


def gib_text(n_bytes: int) -> str:
    return f"{gib(n_bytes):,.2f} GiB"


def peak_label(kind: str, n_bytes: int) -> str:
    """'peak total 38.50 GiB'."""
    if kind not in KINDS:
        raise ValueError(f"peak kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return f"peak {kind} {gib_text(n_bytes)}"


def peak_help(kind: str) -> str:
    return f"Peak {kind}: {KINDS[kind]}."
