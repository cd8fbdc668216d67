"""Memory snapshots (docs/snapshots.md): read as torch writes them, measured to the byte,
attributed to the ledger's rows, and every fixture readable by torch's own memory_viz."""
import copy
import gzip
import pickle
from pathlib import Path

import pytest

from memledger.snapshot.attribute import ATTRIBUTED_ROWS, attribute
from memledger.snapshot.generate import StepModel, generate
from memledger.snapshot.measure import MAX_POINTS, measure
from memledger.snapshot.reader import SnapshotError, read_bytes, read_file
from memledger.snapshot.rules import RULES, match

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"
ROWS_AT_PEAK = ("weights", "gradients", "optimizer", "activations", "communication", "runtime")


def _pickle(obj) -> bytes:
    return pickle.dumps(obj, protocol=4)


@pytest.mark.parametrize("stacks", ["python", "all"])
@pytest.mark.parametrize("tokens, micro_batches", [(512, 1), (8192, 1), (8192, 3)])
def test_peak_and_rows_match_what_the_generator_allocated(stacks, tokens, micro_batches):
    """The generator tracks, independently of the reader, each row's bytes at its peak: the
    measured peak is that to the byte and every row is attributed, frameless backward included
    — also under gradient accumulation, where a micro-batch's frameless backward is followed by
    the next micro-batch's forward, not by the optimizer (the gradients come from the first)."""
    snap, truth = generate(StepModel(stacks=stacks, tokens=tokens, micro_batches=micro_batches))
    m = measure(read_bytes(_pickle(snap)))
    a = attribute(m)
    assert m.peak_allocated_bytes == truth["peak"]
    assert not m.partial
    assert {r: a.rows[r] for r in ROWS_AT_PEAK} == {r: truth[r] for r in ROWS_AT_PEAK}
    assert a.rows["unattributed"] == 0
    assert sum(a.rows.values()) == m.peak_allocated_bytes


def test_frameless_backward_is_decided_by_phase():
    snap, _ = generate(StepModel(stacks="python", tokens=8192))
    a = attribute(measure(snap))
    assert a.phase_at_peak == "backward"
    assert a.by_phase_bytes > 0  # gradients and backward transients without a single frame


def test_peak_reserved_is_the_sum_of_the_segments_at_the_top():
    snap, _ = generate(StepModel(tokens=8192))
    m = measure(snap)
    # the generator never frees a segment, so the top is the end, which is every segment
    assert m.peak_reserved_bytes == sum(s["total_size"] for s in snap["segments"])
    assert m.end_allocated_bytes == m.timeline[-1][2]


def test_a_cut_trace_is_partial_and_still_counts_what_it_lacks():
    full, truth = generate(StepModel(tokens=8192))
    cut, _ = generate(StepModel(tokens=8192, max_entries=150))
    m = measure(cut)
    assert m.partial and any("max_entries" in r for r in m.partial_reasons)
    assert m.n_entries == 150
    # the segments' state fills in what was allocated before the kept entries
    assert m.end_allocated_bytes == measure(full).end_allocated_bytes
    assert m.base_allocated_bytes > 0
    assert sum(attribute(m).rows.values()) == m.peak_allocated_bytes


def test_no_trace_is_partial_and_reports_the_state_at_the_dump():
    snap, _ = generate(StepModel())
    snap["device_traces"] = [[]]
    m = measure(snap)
    assert m.partial and m.peak_allocated_bytes == m.end_allocated_bytes
    a = attribute(m)
    assert a.rows["weights"] > 0 and a.rows["optimizer"] > 0  # from the blocks' own stacks


@pytest.mark.parametrize("state", ["active_pending_free", "active_awaiting_free"])
def test_both_spellings_of_pending_free_count_as_allocated(state):
    snap, _ = generate(StepModel())
    block = next(b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    before = measure(copy.deepcopy(snap)).end_allocated_bytes
    block["state"] = state
    assert measure(read_bytes(_pickle(snap))).end_allocated_bytes == before


def test_timeline_is_bounded_and_keeps_the_peak():
    snap, _ = generate(StepModel(layers=8, steps=40, tokens=2048))
    m = measure(snap)
    assert m.n_entries > MAX_POINTS
    assert len(m.timeline) <= MAX_POINTS + 1
    assert max(p[2] for p in m.timeline) == m.peak_allocated_bytes


def test_rules_cite_a_source_and_name_a_row():
    rows = set(ROWS_AT_PEAK) | {"backward"}
    for r in RULES:
        assert r.row in rows and r.source and r.name


@pytest.mark.parametrize("frames, row", [
    ([{"filename": "/x/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", "line": 1,
       "name": "foreach_all_gather"},
      {"filename": "/x/torch/nn/modules/module.py", "line": 2, "name": "_call_impl"}], "communication"),
    ([{"filename": "/x/torch/nn/modules/linear.py", "line": 1, "name": "forward"},
      {"filename": "/x/torch/utils/checkpoint.py", "line": 2, "name": "recompute_fn"}], "runtime"),
    ([{"filename": "/x/torch/optim/adamw.py", "line": 1, "name": "_init_group"}], "optimizer"),
    ([{"filename": "??", "line": 0, "name": "torch::autograd::AccumulateGrad::apply()"}], "gradients"),
    ([{"filename": "/work/mine.py", "line": 3, "name": "helper"}], None),
])
def test_the_innermost_rule_decides_and_contexts_win(frames, row):
    r = match(frames)
    assert (r.row if r else None) == row


@pytest.mark.torch
@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.pickle.gz")), ids=lambda p: p.name)
def test_every_fixture_is_read_by_torchs_own_memory_viz(path):
    """torch.cuda._memory_viz's text views walk every segment, block and trace entry (segsum
    asserts that the blocks tile each segment); a fixture torch cannot read fails here."""
    mv = pytest.importorskip("torch.cuda._memory_viz")
    with gzip.open(path, "rb") as f:
        data = f.read()
    snap = pickle.loads(data)  # noqa: S301 - our own fixture, to compare with the safe reader
    assert read_file(path) == snap
    assert "total_reserved" in mv.segsum(snap)
    assert "TOTAL MEM" in mv.trace(snap)
    assert mv.segments(snap, format_flamegraph=lambda s: s)
    assert mv.memory(snap, format_flamegraph=lambda s: s)
    assert "snapshot.pickle" in mv.trace_plot(copy.deepcopy(snap))
    assert mv.filter_alloc_free_pairs(copy.deepcopy(snap))["device_traces"]


def test_every_attributed_row_is_reported():
    snap, _ = generate(StepModel())
    assert set(attribute(measure(snap)).rows) == set(ATTRIBUTED_ROWS)


def test_the_reader_refuses_globals_without_running_them(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            import os
            return (os.system, (f"touch {marker}",))

    with pytest.raises(SnapshotError, match="names a Python object"):
        read_bytes(pickle.dumps({"segments": [], "device_traces": [Evil()]}))
    assert not marker.exists()


def test_the_trace_counts_requested_bytes_and_the_segments_fill_in_the_same_unit():
    """torch traces `alloc`/`free_completed` with the size asked for (CUDACachingAllocator.cpp:
    orig_size, block->requested_size), blocks are rounded to 512 B: the state before a cut
    trace is taken from requested_size, so a cut and a whole trace agree to the byte."""
    snap, truth = generate(StepModel(tokens=8192))
    blocks = [b for s in snap["segments"] for b in s["blocks"] if b["state"] != "inactive"]
    assert any(e["size"] % 512 for e in snap["device_traces"][0] if e["action"] == "alloc")
    m = measure(snap)
    assert m.end_allocated_bytes == sum(b["requested_size"] for b in blocks)
    cut = measure(generate(StepModel(tokens=8192, max_entries=150))[0])
    assert cut.partial and cut.end_allocated_bytes == m.end_allocated_bytes
    assert cut.timeline[-1][2] == m.timeline[-1][2]
    assert cut.peak_allocated_bytes == truth["peak"]  # the kept 150 of 219 entries hold the peak


def test_the_docs_show_the_code_s_rules_and_limits():
    from memledger.snapshot import reader
    doc = (Path(__file__).resolve().parents[1] / "docs" / "snapshots.md").read_text()
    for r in RULES:
        assert f"| `{r.name}` | {f'`{r.file}`' if r.file else 'any'} | {r.row} |" in doc, r.name
    assert f"| 256 MiB (`--max-snapshot-mb`" in doc and reader.MAX_FILE_BYTES == 256 << 20
    assert "| gzip, decompressed | 1 GiB |" in doc and reader.MAX_PICKLE_BYTES == 1 << 30
    assert f"{reader.MAX_EXPANSION} x bytes read + {reader._RSS_SLACK >> 20} MiB" in doc
    limits = (f"| {reader.MAX_TRACE_ENTRIES // 10**6} M, {reader.MAX_BLOCKS // 10**6} M, "
              f"{reader.MAX_FRAMES:,} |")
    assert limits in doc
