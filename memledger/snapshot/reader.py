"""Reading a memory snapshot file without running anything in it.

The file is a pickle (`torch.cuda.memory._dump_snapshot` pickles the `_snapshot()` dict),
optionally gzip-compressed. `SafeUnpickler` builds only what the pickle opcodes build on their
own — dicts, lists, tuples, sets, str, bytes, int, float, bool, None — and refuses every
global (`find_class`) and persistent id, so no callable can be reached: the REDUCE, BUILD,
NEWOBJ and INST opcodes all need one. Work is bounded: the compressed and uncompressed sizes are
capped (a pickle builds at most one object per opcode, so memory follows the byte count), and
the structure is checked before use: the keys torch writes, entries per list, nesting depth.
Ignores: the snapshot's `allocator_settings` and `external_annotations` (kept, not read).
"""
from __future__ import annotations

import gzip
import io
import pickle

from memledger.errors import SpecError

MAX_FILE_BYTES = 256 * 2 ** 20  # the app's default upload limit (server option)
MAX_ENTRIES = 5_000_000  # trace entries + blocks over all devices
MAX_FRAMES = 256  # frames kept per entry (deeper stacks are cut, not refused)
MAX_DEPTH = 12  # snapshot -> device_traces -> [device] -> entry -> frames -> frame -> value


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # noqa: D401 - pickle's hook
        raise pickle.UnpicklingError(f"refuses the global {module}.{name}: a memory snapshot "
                                     "holds only plain containers")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refuses a persistent id: a memory snapshot has none")


def _decompress(raw: bytes, name: str, limit: int) -> bytes:
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            out = f.read(limit + 1)
    except (OSError, EOFError) as e:
        raise SpecError("snapshot", f"{name}: not a readable gzip file ({e})") from None
    if len(out) > limit:
        raise SpecError("snapshot", f"{name}: more than {limit:,} bytes once decompressed "
                                    f"(limit {limit:,})")
    return out


def loads(raw: bytes, name: str = "snapshot", limit: int = MAX_FILE_BYTES) -> dict:
    """The snapshot dict of a file's bytes; SpecError naming the file for anything else."""
    if len(raw) > limit:
        raise SpecError("snapshot", f"{name}: {len(raw):,} bytes, over the limit of {limit:,}")
    if not raw:
        raise SpecError("snapshot", f"{name}: the file is empty")
    data = _decompress(raw, name, limit)
    if data[:1] != b"\x80":
        kind = "JSON" if data.lstrip()[:1] in (b"{", b"[") else "not a pickle"
        raise SpecError("snapshot", f"{name}: {kind} — expected the pickle that "
                                    "torch.cuda.memory._dump_snapshot writes")
    try:
        doc = SafeUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        raise SpecError("snapshot", f"{name}: {e}") from None
    except (EOFError, ValueError, IndexError, KeyError, TypeError, MemoryError,
            AttributeError, RecursionError) as e:
        raise SpecError("snapshot", f"{name}: truncated or damaged pickle "
                                    f"({type(e).__name__}: {e})") from None
    check(doc, name)
    return doc


def read(path, limit: int = MAX_FILE_BYTES) -> dict:
    from pathlib import Path
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > limit:
            raise SpecError("snapshot", f"{p.name}: {size:,} bytes, over the limit of {limit:,}")
        raw = p.read_bytes()
    except OSError as e:
        raise SpecError("snapshot", f"cannot read {path}: {e.strerror or e}") from None
    return loads(raw, p.name, limit)


def _depth_ok(obj, limit: int) -> bool:
    """Nesting within `limit`, walked iteratively (a deep pickle cannot blow Python's stack)."""
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if d > limit:
            return False
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend((v, d + 1) for v in o)
    return True


def check(doc, name: str) -> None:
    """The shape torch writes: {"segments": [...], "device_traces": [[...], ...]}."""
    if not isinstance(doc, dict) or "segments" not in doc:
        raise SpecError("snapshot", f"{name}: not a memory snapshot (a dict with 'segments' "
                                    "and 'device_traces', as torch.cuda.memory._snapshot())")
    segs, traces = doc["segments"], doc.get("device_traces", [])
    if not isinstance(segs, list) or not isinstance(traces, list) or \
            not all(isinstance(t, list) for t in traces):
        raise SpecError("snapshot", f"{name}: 'segments' and 'device_traces' must be lists")
    n = sum(len(t) for t in traces) + sum(len(s.get("blocks", ())) for s in segs
                                          if isinstance(s, dict))
    if n > MAX_ENTRIES:
        raise SpecError("snapshot", f"{name}: {n:,} trace entries and blocks, over the limit "
                                    f"of {MAX_ENTRIES:,}")
    if not _depth_ok({k: doc[k] for k in ("segments", "device_traces") if k in doc}, MAX_DEPTH):
        raise SpecError("snapshot", f"{name}: nested deeper than a snapshot ({MAX_DEPTH} levels)")
    for i, s in enumerate(segs):
        if not isinstance(s, dict) or not isinstance(s.get("total_size"), int):
            raise SpecError("snapshot", f"{name}: segment {i} has no integer 'total_size'")
    for d, entries in enumerate(traces):
        for j, e in enumerate(entries):
            if not isinstance(e, dict) or not isinstance(e.get("action"), str):
                raise SpecError("snapshot", f"{name}: device {d} trace entry {j} has no "
                                            "'action'")
