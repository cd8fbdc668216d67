"""Hostile snapshot files through `memledger compare`: exit 2 and one line, nothing executed,
work and memory bounded (each run in a process capped at 2 GiB of address space)."""
import gzip
import json
import pickle
import resource
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "snapshots" / "dense_python.pickle.gz"
CONFIG = ["--model", "llama3.2-1b", "--tp", "1", "--pp", "1", "--world", "1", "--seq", "1024"]


def _capped():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _compare(path, *extra):
    return subprocess.run([sys.executable, "-m", "memledger", "compare", "--snapshot", str(path),
                           *CONFIG, *extra], capture_output=True, text=True, timeout=60,
                          preexec_fn=_capped)


def _refused(out) -> str:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("memledger compare: error: --snapshot: "), lines[0]
    assert "out of memory" not in lines[0] and not out.stdout
    return lines[0]


class _System:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        import os
        return (os.system, (self.cmd,))


class _Open:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_that_would_run_a_command_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[_System(f"touch {marker}")]]}))
    assert "names a Python object (posix.system)" in _refused(_compare(path))
    assert not marker.exists()


def test_a_gzipped_pickle_that_would_open_a_file_opens_nothing(tmp_path):
    target = tmp_path / "created"
    path = tmp_path / "evil.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps([_Open(str(target))])))
    assert "names a Python object" in _refused(_compare(path))
    assert not target.exists()


def test_truncated(tmp_path):
    data = gzip.decompress(FIXTURE.read_bytes())
    path = tmp_path / "cut.pickle"
    path.write_bytes(data[:len(data) // 2])
    assert "truncated or corrupt" in _refused(_compare(path))


def test_deeply_nested_and_self_referencing(tmp_path):
    deep = b"\x80\x04" + b"]" * 1_000_000 + b"a" * 999_999 + b"."
    (tmp_path / "deep.pickle").write_bytes(deep)
    assert "not a memory snapshot" in _refused(_compare(tmp_path / "deep.pickle"))
    loop = []
    loop.append(loop)
    (tmp_path / "loop.pickle").write_bytes(pickle.dumps({"segments": loop, "device_traces": []}))
    assert "segments[0] is not a segment" in _refused(_compare(tmp_path / "loop.pickle"))
    laughs = [{"filename": "a", "line": 1, "name": "f"}]
    for _ in range(40):  # 2^40 frames if walked naively; 80 memo references in the file
        laughs = [laughs, laughs]
    entry = {"action": "alloc", "addr": 1, "size": 512, "frames": laughs}
    (tmp_path / "laughs.pickle").write_bytes(pickle.dumps({"segments": [], "device_traces": [[entry]]}))
    assert "frames" in _refused(_compare(tmp_path / "laughs.pickle"))


def test_a_pickle_that_expands_in_memory_is_stopped(tmp_path):
    """40 MB of EMPTY_DICT opcodes would be 40 M dicts (~3 GB): stopped by the expansion bound."""
    path = tmp_path / "dicts.pickle"
    path.write_bytes(b"\x80\x04(" + b"}" * 40_000_000 + b"l.")
    assert "expands to more than" in _refused(_compare(path))


@pytest.mark.parametrize("content, says", [(b"", "is empty"), (json.dumps({"segments": []}).encode(),
                                                                "is JSON"), (b"hello", "not a pickle")])
def test_empty_or_json_named_pickle(tmp_path, content, says):
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(content)
    assert says in _refused(_compare(path))


def test_oversized_and_gzip_bomb(tmp_path):
    big = tmp_path / "big.pickle"
    big.write_bytes(b"\x80\x04" + b"\x00" * (3 << 20))
    assert "larger than the limit of 2,097,152 bytes" in _refused(_compare(big, "--max-snapshot-mb", "2"))
    assert _refused(_compare(tmp_path / "missing.pickle")).endswith("no such file")


def test_gzip_bomb_stops_at_the_decompressed_limit(monkeypatch):
    from memledger.snapshot import reader
    monkeypatch.setattr(reader, "MAX_PICKLE_BYTES", 1 << 20)
    with pytest.raises(reader.SnapshotError, match="decompresses to more than 1,048,576"):
        reader.read_bytes(gzip.compress(b"\x80\x04" + b"N" * (8 << 20)))


def test_compare_json_has_the_contract_keys():
    out = subprocess.run([sys.executable, "-m", "memledger", "compare", "--snapshot", str(FIXTURE),
                          *CONFIG, "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    meas = doc["measured"]
    assert {"peak_allocated_bytes", "peak_reserved_bytes", "rows", "partial"} <= set(meas)
    assert "unattributed" in meas["rows"] and meas["partial"] is False
    assert meas["peak_allocated_bytes"] == 517_521_412  # the generator's peak (test_snapshot)
    assert set(doc["predicted"]["rows"]) == set(meas["rows"])
    assert doc["predicted"]["peak_allocated_bytes"] > 0
    assert set(doc["errors"]) >= set(meas["rows"]) | {"peak_allocated", "peak_reserved"}
    diffs = [abs(x["difference_bytes"]) for x in doc["explaining"]]
    assert diffs == sorted(diffs, reverse=True)


def test_compare_takes_the_configuration_from_a_framework_file():
    """The shared builder gives `compare` the `--config` of every configuration command."""
    cfg = Path(__file__).parent / "fixtures" / "configs" / "llama3_405b_torchtitan.toml"
    flags = subprocess.run([sys.executable, "-m", "memledger", "compare", "--snapshot", str(FIXTURE),
                            "--config", str(cfg), "--json"], capture_output=True, text=True,
                           timeout=120)
    assert flags.returncode == 0, flags.stderr
    doc = json.loads(flags.stdout)
    assert doc["measured"]["peak_allocated_bytes"] == 517_521_412
    assert doc["predicted"]["peak_allocated_bytes"] > 10 * 2**30  # Llama 3 405B, not a default model
