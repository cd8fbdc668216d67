"""Reading a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`) without running it.

The file is a pickle, and `pickle.load` on a user's file runs whatever the file names. The
reader is the C unpickler with `find_class` refusing every global, so only the opcodes that
build dicts, lists, tuples, strings, bytes, numbers, booleans and None can succeed (torch's
snapshot contains nothing else). Bounded before and while it runs:
  - the file's size (MAX_FILE_BYTES, the app passes its upload limit) and, for gzip, the
    decompressed size (MAX_PICKLE_BYTES), read with a limit so a gzip bomb stops there;
  - memory: the unpickler reads through a window that checks the process's resident memory
    every few MiB against MAX_EXPANSION x the bytes consumed (a real snapshot expands ~10x);
  - the shape: the result must be a dict with `segments` and `device_traces` lists; the number
    of trace entries, blocks and frames per stack is bounded, and the walk that checks them
    only follows torch's schema (fixed depth), so nesting or memo self-references cannot
    make it recurse.
Every failure is SnapshotError(file, message): one line for the CLI and the app.
Ignores: fields it does not use (allocator_settings, user_metadata, fx debug fields) are kept
as read and never interpreted.
"""
from __future__ import annotations

import gc
import gzip
import io
import os
import pickle
from pathlib import Path

from memledger.errors import SpecError

MAX_FILE_BYTES = 256 << 20  # the app's default upload limit (server.maxUploadSize, MB)
MAX_PICKLE_BYTES = 1 << 30  # decompressed
MAX_TRACE_ENTRIES = 8_000_000  # all devices; torch's default max_entries is sys.maxsize
MAX_BLOCKS = 4_000_000
MAX_FRAMES = 1_024  # per stack; torch's C++ unwinder keeps every frame, real stacks are < 300
MAX_EXPANSION = 24  # resident bytes per pickle byte consumed, beyond a 256 MiB allowance
_RSS_SLACK = 256 << 20
_CHECK_EVERY = 4 << 20
STATES_PENDING = ("active_pending_free", "active_awaiting_free")  # torch writes / docs say
STATES = ("active_allocated", "inactive") + STATES_PENDING


class SnapshotError(SpecError):
    """A snapshot file that cannot be read; `field` is "snapshot"."""

    def __init__(self, message: str):
        super().__init__("snapshot", message)


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise SnapshotError(f"the pickle names a Python object ({str(module)[:60]}.{str(name)[:60]}); "
                            "a memory snapshot holds only dicts, lists, numbers and strings, so "
                            "nothing in it was loaded or run")

    def persistent_load(self, pid):
        raise SnapshotError("the pickle asks for a persistent object; a memory snapshot has none")


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _Window(io.RawIOBase):
    """The pickle bytes, handed to the unpickler with a memory check every _CHECK_EVERY bytes."""

    def __init__(self, data: bytes):
        self._view, self._pos = memoryview(data), 0
        self._rss0, self._next = _rss_bytes(), _CHECK_EVERY

    def _take(self, n: int) -> bytes:
        if n is None or n < 0:
            n = len(self._view) - self._pos
        out = self._view[self._pos:self._pos + n].tobytes()
        self._pos += len(out)
        if self._pos >= self._next:
            self._next = self._pos + _CHECK_EVERY
            grown = _rss_bytes() - self._rss0
            if self._rss0 and grown > MAX_EXPANSION * self._pos + _RSS_SLACK:
                raise SnapshotError(f"the pickle expands to more than {MAX_EXPANSION}x its size "
                                    f"in memory ({grown >> 20:,} MiB after {self._pos >> 20:,} "
                                    "MiB); not a memory snapshot")
        return out

    def read(self, n=-1):
        return self._take(n)

    def readinto(self, b):
        data = self._take(len(b))
        b[:len(data)] = data
        return len(data)

    def readline(self, limit=-1):
        end = bytes(self._view[self._pos:self._pos + (1 << 16)]).find(b"\n")
        return self._take(end + 1 if end >= 0 else limit)

    def peek(self, n=0):
        return self._view[self._pos:self._pos + max(n, 1 << 16)].tobytes()

    def readable(self):
        return True


def read_file(path, max_bytes: int = MAX_FILE_BYTES) -> dict:
    """The snapshot dict of a file (pickle, or gzip of one); SnapshotError on anything else."""
    p, shown = Path(path), repr(str(path)[:200])
    try:
        if not p.is_file():
            raise SnapshotError(f"{shown}: no such file" if not p.exists() else
                                f"{shown} is not a regular file")
        with p.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise SnapshotError(f"cannot read {shown}: {e.strerror or type(e).__name__}") from None
    return read_bytes(data, p.name, max_bytes)


def read_bytes(data: bytes, name: str = "snapshot", max_bytes: int = MAX_FILE_BYTES) -> dict:
    """The snapshot dict of a file's bytes (as uploaded); SnapshotError on anything else."""
    shown = repr(str(name)[:120])
    if len(data) > max_bytes:
        raise SnapshotError(f"{shown} is larger than the limit of {max_bytes:,} bytes")
    if not data:
        raise SnapshotError(f"{shown} is empty; expected a pickle from "
                            "torch.cuda.memory._dump_snapshot")
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, shown)
    if data[:1] != b"\x80":  # every pickle protocol >= 2 starts with PROTO
        what = "JSON" if data.lstrip()[:1] in (b"{", b"[") else "not a pickle"
        raise SnapshotError(f"{shown} is {what}; expected a pickle from "
                            "torch.cuda.memory._dump_snapshot (optionally gzipped)")
    enabled = gc.isenabled()
    gc.disable()  # millions of new containers: the cyclic collector would rescan them all
    try:
        obj = _NoGlobals(_Window(data)).load()
    except SnapshotError:
        raise
    except MemoryError:
        raise SnapshotError(f"{shown}: out of memory while reading") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, RecursionError, OverflowError) as e:
        raise SnapshotError(f"{shown} is not a readable pickle ({type(e).__name__}: "
                            f"{str(e)[:120]}); truncated or corrupt?") from None
    finally:
        if enabled:
            gc.enable()
    check_shape(obj, shown)
    return obj


def _gunzip(data: bytes, shown: str) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as g:
            out = g.read(MAX_PICKLE_BYTES + 1)
    except (OSError, EOFError, ValueError) as e:
        raise SnapshotError(f"{shown} is not a readable gzip file ({str(e)[:120]})") from None
    if len(out) > MAX_PICKLE_BYTES:
        raise SnapshotError(f"{shown} decompresses to more than {MAX_PICKLE_BYTES:,} bytes")
    return out


def frames_ok(frames) -> bool:
    """A stack as torch writes it: at most MAX_FRAMES dicts with string name and filename."""
    if type(frames) is not list or len(frames) > MAX_FRAMES:
        return False
    return all(type(f) is dict and type(f.get("name", "")) is str
               and type(f.get("filename", "")) is str for f in frames)


def check_shape(obj, shown: str = "snapshot") -> None:
    """torch's schema, to the depth it is used: top dict → segments → blocks → frames, and
    device_traces → entries → frames. Iterative and bounded by the MAX_* counts."""
    if type(obj) is not dict or type(obj.get("segments")) is not list \
            or type(obj.get("device_traces")) is not list:
        raise SnapshotError(f"{shown} is a pickle but not a memory snapshot: expected a dict with "
                            "'segments' and 'device_traces' lists")
    n_entries = sum(len(t) if type(t) is list else 0 for t in obj["device_traces"])
    if n_entries > MAX_TRACE_ENTRIES:
        raise SnapshotError(f"{shown} has {n_entries:,} trace entries; at most "
                            f"{MAX_TRACE_ENTRIES:,} (record with max_entries)")
    n_blocks = 0
    for i, seg in enumerate(obj["segments"]):
        if type(seg) is not dict or type(seg.get("blocks")) is not list \
                or type(seg.get("total_size")) is not int:
            raise SnapshotError(f"{shown}: segments[{i}] is not a segment (dict with an integer "
                                "'total_size' and a 'blocks' list)")
        n_blocks += len(seg["blocks"])
        if n_blocks > MAX_BLOCKS:
            raise SnapshotError(f"{shown} has more than {MAX_BLOCKS:,} blocks")
        for j, b in enumerate(seg["blocks"]):
            if type(b) is not dict or type(b.get("size")) is not int or b.get("state") not in STATES:
                raise SnapshotError(f"{shown}: segments[{i}].blocks[{j}] is not a block (integer "
                                    f"'size', 'state' one of {', '.join(STATES)})")
            _check_frames(b.get("frames", []), shown, f"segments[{i}].blocks[{j}]")
    for d, tr in enumerate(obj["device_traces"]):
        if type(tr) is not list:
            raise SnapshotError(f"{shown}: device_traces[{d}] is not a list")
        for k, e in enumerate(tr):
            if type(e) is not dict or type(e.get("action")) is not str \
                    or type(e.get("size", 0)) is not int or type(e.get("addr", 0)) is not int:
                raise SnapshotError(f"{shown}: device_traces[{d}][{k}] is not a trace entry "
                                    "(dict with 'action', integer 'addr' and 'size')")
            _check_frames(e.get("frames", []), shown, f"device_traces[{d}][{k}]")


def _check_frames(frames, shown: str, where: str) -> None:
    """The list itself; its frames are checked once per distinct stack where they are read
    (attribute._Rules), which is what keeps a million-entry trace fast."""
    if type(frames) is not list or len(frames) > MAX_FRAMES:
        raise SnapshotError(f"{shown}: {where}.frames is not a list of at most {MAX_FRAMES} "
                            "frames (dicts with 'filename', 'line', 'name')")
