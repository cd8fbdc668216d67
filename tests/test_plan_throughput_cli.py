"""`memledger plan` shows predicted throughput beside the step time, each row's reason and the
fastest row's step breakdown; --framework picks what overlaps."""
import json

import pytest

from memledger.cli import main

BASE = ["plan", "--model", "mixtral-8x7b", "--gpu", "h100", "--seq", "4096",
        "--global-batch", "64", "--world", "16", "--max-vpp", "2"]


def run(capsys, *extra):
    code = main(BASE + list(extra))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_rows_carry_tokens_per_second_tflops_mfu_a_breakdown_and_a_reason(capsys):
    code, out, _ = run(capsys, "--json", "--top", "3")
    assert code == 0
    rows = json.loads(out)["configurations"]
    assert len(rows) == 3 and rows[0]["why"].startswith("fastest")
    for r in rows:
        assert r["tokens_per_s"] == pytest.approx(64 * 4096 / r["seconds"])
        assert r["mfu_pct"] == pytest.approx(100 * r["tflops_per_gpu"] / 989)
        assert sum(r["breakdown"].values()) == pytest.approx(r["seconds"], rel=1e-9)
    assert [r["tokens_per_s"] for r in rows] == sorted((r["tokens_per_s"] for r in rows),
                                                       reverse=True)


def test_table_has_throughput_columns_and_the_fastest_rows_breakdown(capsys):
    code, out, _ = run(capsys, "--top", "3")
    assert code == 0
    assert "tokens/s" in out and "TFLOP/s" in out and "MFU" in out
    assert "#1 step: compute" in out and "| fastest;" in out


def test_megatron_2021_exposes_what_megatron_core_overlaps(capsys):
    """Without flash, SP and DP overlap, the same fastest configuration can only be slower.
    A dense model (MoE with tp > 1 needs sequence parallelism, which megatron-2021 lacks) at
    ZeRO-0 (Megatron-LM 2021 had no distributed optimizer)."""
    fixed = ["--model", "llama3-8b", "--tp", "2", "--pp", "2", "--zero", "0", "--micro-batch",
             "1", "--recompute", "full", "--schedule", "1f1b", "--json", "--top", "1"]
    core = json.loads(run(capsys, *fixed)[1])["configurations"][0]
    old = json.loads(run(capsys, *fixed, "--framework", "megatron-2021")[1])["configurations"][0]
    assert (core["sp"], old["sp"]) == (True, False)
    assert old["seconds"] > core["seconds"]


def test_an_unknown_framework_exits_2_naming_the_choices(capsys):
    code, _, err = run(capsys, "--framework", "deepspeed")
    assert code == 2 and "megatron-core" in err and len(err.strip().splitlines()) == 1
