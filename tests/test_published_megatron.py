"""Claims against published measurements of real multi-GPU Megatron-Core runs
(validation/published-megatron.json: Megatron-LM functional-test golden values on DGX H100): per
row, the ledger's peak allocated of the last rank is within 10 % of the published
`mem-max-allocated-bytes`, or the row is a strict xfail with its cause; the ledger's model states
never exceed what the run holds between steps; each row's memledger spelling agrees with its
Megatron flags."""
from __future__ import annotations

import re

import pytest

from memledger.validation.published_megatron import BAR, load, predict, specs, summary

ROWS = load()
MISSES = {
    "M2 gpt 12x512 8-expert ep8 allgather": (
        "small model, fixed costs dominate: between steps the run holds 0.788 GB, 0.270 GB above "
        "the ledger's model states (ledger −18.3 % with its default hidden dropout's masks) — "
        "Transformer Engine's cuBLAS workspaces on Hopper (one of "
        "32 MiB plus one per cuBLAS stream for grouped GEMM, 4 × 32 MiB: transformer_engine/"
        "pytorch/module/base.py get_workspace, get_multi_stream_cublas_workspace) and torch's "
        "cuBLAS workspace under CUBLAS_WORKSPACE_CONFIG :4096:8 (32 MiB) make about 0.2 GB of it, "
        "not itemised; the peak rises 3.12 → 3.36 GB over the steps at constant persistent "
        "memory (routing imbalance under the aux loss with the allgather dispatcher; the ledger "
        "routes evenly); not verified further"),
    "M3 qwen3-proxy ep8 dropless": (
        "dropless routing imbalance (ledger 25.98 GB, −24.4 %; −7.1 % of step 1): the peak is 27.97 GB at step 1 and 34.37 GB from step 3 on "
        "while the memory held between steps stays 5.84 GB and the logged global load-balancing "
        "loss rises from 1.23 to 2.0-2.7 — the last rank's experts receive more than the even "
        "share T·K/ep the ledger routes (alltoall without a capacity factor; the capacity-capped "
        "M1 is within 2 %); the ledger has no routing-skew input"),
}


def _param(row):
    cause = MISSES.get(row["id"])
    marks = [pytest.mark.xfail(strict=True, reason=cause)] if cause else []
    return pytest.param(row, id=row["id"], marks=marks)


@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_published_row_within_ten_percent(row):
    r = predict(row)
    assert abs(r["error"]) <= BAR, (f"{row['id']}: published {r['published_bytes']:,} B, "
                                    f"predicted {r['peak_bytes']:,} ({100 * r['error']:+.1f} %)")


def test_aggregate_accuracy():
    """3 of 5 rows within 10 % (the DeepSeek-V3-shaped EP8 proxy −1.7 %, the dense 7B runs
    −0.4 % (PP 4 × VPP 8) and −0.5 % (TP 4 without SP)), median |error| 1.7 %."""
    s = summary([predict(r) for r in ROWS])
    assert s["rows"] == 5 and s["within_bar"] >= 3, s
    assert s["median_abs_error"] <= 0.02, s
    assert s["within_bar"] == len(ROWS) - len(MISSES), "MISSES must name exactly the misses"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_model_states_fit_in_what_the_run_holds_between_steps(row):
    """Weights, gradients and optimizer states are part of `mem-allocated-bytes` after a step;
    above 10 GB the rest is under 1 % (workspaces), except the 7B PP 4 × VPP 8 run's last stage:
    it holds 1.18 GB (4.8 %) more than its model states between steps — not identified (its
    peak is within 0.4 %; the TP 4 run of the same model holds 0.12 GB more)."""
    r = predict(row)
    assert r["static_bytes"] <= r["between_steps_bytes"]
    if r["between_steps_bytes"] > 10**10:
        floor = 0.95 if row["id"].startswith("G1") else 0.99
        assert r["static_bytes"] >= floor * r["between_steps_bytes"], r


def test_rows_carry_source_and_agree_with_their_megatron_flags():
    for r in ROWS:
        src, mg, ml = r["source"], r["megatron"], r["memledger"]
        assert src["repo"] == "NVIDIA/Megatron-LM" and src["kind"] == "megatron-functional-test"
        for f, c in (("config_file", "config_commit"), ("golden_file", "golden_commit"),
                     ("runtime_file", "runtime_commit")):
            if f in src:
                assert src[f].startswith("tests/functional_tests/test_cases/"), (r["id"], f)
                assert re.fullmatch(r"[0-9a-f]{40}", src[c]), (r["id"], c)
        assert f"/{src['test_case']}/" in src["golden_file"], r["id"]
        assert src["golden_file"].endswith("_dgx_h100.json") and r["published_bytes"] > 0
        assert "nodes 1, gpus 8" in src["recipe"] and ml["world"] == 8, r["id"]
        tp, pp = mg["--tensor-model-parallel-size"], mg["--pipeline-model-parallel-size"]
        assert (ml["tp"], ml["pp"], ml["ep"]) == (tp, pp, mg.get("--expert-model-parallel-size", 1))
        assert ml["tp"] * ml["pp"] * ml["cp"] * ml["dp"] == ml["world"], r["id"]
        assert ml["micro_batch"] == mg["--micro-batch-size"] and ml["seq"] == mg["--seq-length"]
        assert ml["micro_batches"] * ml["micro_batch"] * ml["dp"] == mg["--global-batch-size"]
        assert mg["--use-distributed-optimizer"] and mg["--bf16"]
        assert ml.get("vpp", 1) == mg["--num-layers"] // mg.get(
            "--num-layers-per-virtual-pipeline-stage", mg["--num-layers"] // pp) // pp, r["id"]
        # a launch without --hidden-dropout trains at Megatron-LM's 0.1 (arguments.py)
        assert ml["hidden_dropout_pct"] == round(100 * mg.get("--hidden-dropout", 0.1)), r["id"]
        m = specs(ml)[0]
        if "--num-experts" in mg:
            assert m.moe.n_experts == mg["--num-experts"]
            assert m.moe.top_k == mg["--moe-router-topk"]
            assert m.moe.expert_ffn == mg["--moe-ffn-hidden-size"]
        else:
            assert m.moe is None and m.n_kv_heads == mg["--num-query-groups"]
        assert (m.n_layers, m.hidden, m.n_heads) == (
            mg["--num-layers"], mg["--hidden-size"], mg["--num-attention-heads"])
