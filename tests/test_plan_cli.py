"""`memledger plan`: the same flags as `memledger ledger`, JSON with integer bytes, exit 2 on
bad input with one line."""
import json

import pytest

from memledger.cli import main

BASE = ["plan", "--model", "llama3-8b", "--gpu", "h100", "--seq", "8192", "--global-batch", "64"]


def run(capsys, *extra):
    world = [] if "--world" in extra else ["--world", "8"]
    code = main(BASE + world + list(extra))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_lists_configurations_with_integer_bytes_and_the_counts(capsys):
    code, out, _ = run(capsys, "--json", "--top", "5")
    assert code == 0
    d = json.loads(out)
    assert len(d["configurations"]) == 5
    for row in d["configurations"] + d["pareto"]:
        assert isinstance(row["peak_bytes"], int) and isinstance(row["free_bytes"], int)
        assert isinstance(row["seconds"], float) and row["peak_bytes"] <= d["limit_bytes"]
    c = d["counts"]
    assert c["evaluated"] == c["fits"] + c["over_capacity"] and c["fits"] > 0
    secs = [r["seconds"] for r in d["configurations"]]
    assert secs == sorted(secs)


def test_world_takes_repeats_and_comma_lists(capsys):
    _, a, _ = run(capsys, "--json", "--world", "8", "--world", "16", "--top", "0")
    _, b, _ = run(capsys, "--json", "--world", "8,16", "--top", "0")
    assert json.loads(a)["counts"] == json.loads(b)["counts"]
    assert {r["world"] for r in json.loads(a)["configurations"]} == {8, 16}


def test_fixed_axes_from_the_ledger_flag_names(capsys):
    _, out, _ = run(capsys, "--json", "--tp", "2", "--zero", "1", "--recompute", "full",
                    "--top", "0")
    rows = json.loads(out)["configurations"]
    assert rows and all(r["tp"] == 2 and r["zero"] == 1 and r["recompute"] == "full"
                        for r in rows)


def test_text_output_has_the_counts_and_a_ranked_table(capsys):
    code, out, _ = run(capsys, "--top", "3")
    assert code == 0 and "configurations:" in out and "fit" in out
    assert len([line for line in out.splitlines() if line.strip()[:2] in ("1 ", "2 ", "3 ")]) == 3


def test_impossible_request_prints_the_reason(capsys):
    code, out, _ = run(capsys, "--model", "llama3.1-405b", "--world", "1", "--global-batch", "8")
    assert code == 0 and "nothing fits" in out and "GPUs of this kind" in out


@pytest.mark.parametrize("extra", [["--world", "x"], ["--headroom", "1.5"], ["--gpu", "v100"],
                                   ["--recompute", "every-k"], ["--zero", "7"],
                                   ["--micro-batches", "4"], ["--top", "-1"],
                                   ["--schedule", "gpipe"], ["--policy", "qkv=fp8"],
                                   ["--optimizer-offload"]])
def test_bad_input_exits_2_with_one_line(capsys, extra):
    code, out, err = run(capsys, *extra)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_framework_megatron_2021_rows_run_without_sequence_parallelism(capsys):
    """Sequence parallelism came with Korthikanti et al. 2022: megatron-2021 rows have sp False
    at every tp, megatron-core rows sp True exactly where tp > 1; and at tp = 2 the peak without
    SP is the larger (norm inputs and dropout masks are not split over tp)."""
    _, a, _ = run(capsys, "--json", "--tp", "2", "--top", "0", "--framework", "megatron-2021")
    _, b, _ = run(capsys, "--json", "--tp", "2", "--top", "0")
    old, core = json.loads(a)["configurations"], json.loads(b)["configurations"]
    assert old and core and {r["tp"] for r in old + core} == {2}
    assert {r["sp"] for r in old} == {False} and {r["sp"] for r in core} == {True}
    axes = ("pp", "vpp", "cp", "dp", "zero", "schedule", "layout", "micro_batch", "recompute")
    key = lambda r: tuple(r[k] for k in axes)  # noqa: E731
    peaks = {key(r): r["peak_bytes"] for r in core}
    both = [(r["peak_bytes"], peaks[key(r)]) for r in old if key(r) in peaks]
    assert both and all(o > c for o, c in both)
