"""Memory snapshots in: read safely, measured to the byte, attributed to the ledger's rows,
put beside the ledger (issue 29). Fixtures are written by memledger.snapshot.synth in torch's
own format (torch records snapshots only on CUDA) and must load in torch's own viewer code."""
from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memledger.errors import SpecError
from memledger.snapshot import synth
from memledger.snapshot.attribute import UNATTRIBUTED, at_peak
from memledger.snapshot.measure import measure
from memledger.snapshot.reader import loads, read

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "snapshots"
TRUTH = json.loads((FIX / "truth.json").read_text())
FIXTURES = sorted(FIX.glob("*.pickle.gz"))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_fixture_is_readable_by_torchs_own_viewer(path):
    viz = pytest.importorskip("torch.cuda._memory_viz")
    doc = pickle.loads(gzip.decompress(path.read_bytes()))  # our own fixture: trusted here
    assert "Summary of segments" in viz.segsum(doc)
    assert viz.trace(doc)
    assert viz.segments(doc, format_flamegraph=lambda lines: lines)


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_peaks_to_the_byte_and_rows_attributed(name):
    m = measure(read(FIX / name))
    truth = TRUTH[name]
    assert m.peak_allocated_bytes == truth["peak_allocated_bytes"]
    assert m.peak_reserved_bytes == truth["peak_reserved_bytes"]
    assert not m.partial
    rows = at_peak(m)
    assert rows.get(UNATTRIBUTED, 0) == 0
    assert rows == truth["rows"]


def test_a_trace_cut_by_max_entries_is_partial_and_the_segments_fill_the_peaks():
    whole = measure(read(FIX / "step-python-stacks.pickle.gz"))
    cut = measure(read(FIX / "step-cut-by-max-entries.pickle.gz"))
    assert cut.partial and not whole.partial
    assert cut.peak_allocated_bytes == whole.peak_allocated_bytes
    assert cut.peak_reserved_bytes == whole.peak_reserved_bytes
    rows = at_peak(cut)
    assert sum(rows.values()) == cut.peak_allocated_bytes and rows[UNATTRIBUTED] > 0


@pytest.mark.parametrize("spelling", ["active_pending_free", "active_awaiting_free"])
def test_both_spellings_of_pending_free_count_as_allocated(spelling):
    doc, _ = synth.training_step(pending_at_dump=2, pending_spelling=spelling)
    cut = synth.cut(doc, 40)
    ref, _ = synth.training_step(pending_at_dump=0)
    assert measure(cut).peak_allocated_bytes == measure(synth.cut(ref, 40)).peak_allocated_bytes


def _deep(n: int):
    out = 1
    for _ in range(n):
        out = [out]
    return out


DEEP = _deep(40)


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/memledger-pwned",))


class Opener:
    def __reduce__(self):
        return (open, ("/etc/passwd",))


@pytest.mark.parametrize("payload,needle", [
    (pickle.dumps(Evil()), "refuses the global"),
    (pickle.dumps(Opener()), "refuses the global"),
    (pickle.dumps({"segments": []})[:-5], "truncated"),
    (b"", "empty"),
    (b'{"segments": []}', "JSON"),
    (gzip.compress(pickle.dumps(Evil())), "refuses the global"),
    (pickle.dumps([1, 2, 3]), "not a memory snapshot"),
    (pickle.dumps({"segments": [DEEP], "device_traces": []}), "nested deeper"),
], ids=["os.system", "open", "truncated", "empty", "json", "gzip-evil", "list", "deep"])
def test_hostile_files_are_refused_and_nothing_runs(payload, needle, tmp_path):
    marker = Path("/tmp/memledger-pwned")
    marker.unlink(missing_ok=True)
    t0 = time.perf_counter()
    with pytest.raises(SpecError) as e:
        loads(payload, "x.pickle")
    assert needle in e.value.message and "x.pickle" in e.value.message
    assert not marker.exists() and time.perf_counter() - t0 < 10


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.pickle"
    big.write_bytes(b"\x80" + b"\0" * 2048)
    with pytest.raises(SpecError, match="over the limit"):
        read(big, limit=1024)
    bomb = gzip.compress(pickle.dumps({"segments": [], "pad": "x" * 4096}))
    with pytest.raises(SpecError, match="decompressed"):
        loads(bomb, "bomb.pickle.gz", limit=1024)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "memledger", "compare", *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_cli_json_has_measured_predicted_and_errors():
    out = _cli("--snapshot", str(FIX / "step-python-stacks.pickle.gz"), "--model", "llama3-8b",
               "--tp", "1", "--pp", "1", "--world", "8", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    m = doc["measured"]
    assert m["peak_allocated_bytes"] == TRUTH["step-python-stacks.pickle.gz"]["peak_allocated_bytes"]
    assert set(m["rows"]) >= {"weights", "gradients", "optimizer", "activations", UNATTRIBUTED}
    assert m["partial"] is False and "peak_reserved_bytes" in m
    assert doc["predicted"]["peak_allocated_bytes"] > 0
    assert set(doc["errors"]) >= {"weights", "peak_allocated"}
    diffs = [abs(x["difference_bytes"]) for x in doc["explain"]]
    assert diffs == sorted(diffs, reverse=True)


def test_cli_hostile_file_exits_2_with_one_line(tmp_path):
    evil = tmp_path / "run.pickle"
    evil.write_bytes(pickle.dumps(Evil()))
    out = _cli("--snapshot", str(evil), "--model", "llama3-8b")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "refuses the global" in out.stderr and not Path("/tmp/memledger-pwned").exists()
