"""torchtitan's own code at small sizes for real checks the fake-mode harness, and the ledger.

validation/engine-torchtitan-gloo.json holds `memledger validate --engine torchtitan --backend
gloo`: torchtitan 0.3.0's llama3 debugmodel trained for one step on 2 and 4 gloo CPU processes
with real tensors (every rank measured), and each case again under FakeTensorMode with the fake
process group at the same world size. Claims: fake mode measures what the real run holds, to
the byte, on every rank and row; the ledger predicts rank 0 within the issue-27 bars. One small
case also runs live (two processes), so the stored file stays what the harness measures.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import stored_without

from memledger.engine.titan_compare import TOLERANCE, case_from_dict, fake_vs_real, row_verdict

ROOT = Path(__file__).resolve().parents[1]
STORED = json.loads((ROOT / "validation" / "engine-torchtitan-gloo.json").read_text())
ENTRIES = {e["case"]: e for e in STORED["measurements"]}


def test_the_stored_runs_are_real_gloo_worlds_of_fsdp_tp_cp_and_fsdp_x_tp():
    from memledger.engine.titan_cases import GLOO_CASES
    assert STORED["engine"] == "torchtitan" and STORED["scale"] == "gloo"
    assert STORED["environment"]["torchtitan"].startswith("0.3")
    assert set(ENTRIES) == {c.name for c in GLOO_CASES}
    layouts = {(e["spec"]["world"], e["spec"]["tp"], e["spec"]["cp"], e["spec"]["ac"])
               for e in ENTRIES.values()}
    assert {(2, 1, 1, "selective"), (2, 1, 1, "full"), (2, 2, 1, "selective"),
            (2, 1, 2, "selective"), (4, 2, 1, "selective"), (4, 2, 1, "full")} <= layouts
    for e in ENTRIES.values():  # every rank of the world measured
        assert [r["rank"] for r in e["ranks"]] == list(range(e["spec"]["world"]))


# (case, rank, row) where fake and real differ, with the cause; strict: a fix fails the test
_TP_PP = ("TP 2 × PP 2, pp rank 1: the real run's activations are 262,144 B above fake "
          "mode's: after the warm-up's forward one more bf16 (1, 512, 256) storage is alive, "
          "made by the `_to_copy` that ends the CPU kernel of aten::_fused_rms_norm (a "
          "composite: fp32 upcast, pow, mean, rsqrt, mul, cast back), a norm's output shard; "
          "fake mode runs the op as one Meta kernel. Unsharded units, stage outputs, receive "
          "buffers and the peak agree; what keeps that output alive only in the real run is "
          "not found")
FAKE_REAL_DIFFS: dict[tuple[str, int, str], str] = {
    ("llama3-debug tp2 pp2 1f1b full-ac", 2, "activations"): _TP_PP,
    ("llama3-debug tp2 pp2 1f1b full-ac", 3, "activations"): _TP_PP,
}


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_fake_mode_measures_what_the_real_run_holds(name, request):
    diffs = [d for d in fake_vs_real(ENTRIES[name]) if d["diff_bytes"]]
    lines = [f"rank {d['rank']} {d['row']}: real − fake {d['diff_bytes']:+,} B" for d in diffs]
    assert not [ln for d, ln in zip(diffs, lines)
                if (name, d["rank"], d["row"]) not in FAKE_REAL_DIFFS], lines  # none unknown
    known = {FAKE_REAL_DIFFS[k] for k in FAKE_REAL_DIFFS if k[0] == name}
    if known:
        request.applymarker(pytest.mark.xfail(strict=True, reason="; ".join(sorted(known))))
    assert not diffs, lines


def test_ranks_of_a_pp_rank_hold_the_same():
    """FSDP2 shards these models evenly, TP splits them evenly and CP's head-tail balancer gives
    every rank as many tokens: the ranks of one pipeline stage alike (meshes are pp-major)."""
    for e in ENTRIES.values():
        per_pp = e["spec"]["world"] // e["spec"].get("pp", 1)
        for row in ("weights", "gradients", "optimizer", "activations", "peak_live"):
            for k in range(e["spec"].get("pp", 1)):
                ranks = e["ranks"][k * per_pp:(k + 1) * per_pp]
                assert len({r[row] for r in ranks}) == 1, (e["case"], k, row)


def test_the_pipeline_ran_for_real_and_checks_the_fake_p2p_stand_ins():
    """torchtitan's pipeline_llm + Schedule1F1B over gloo's real P2P: each pp rank equals fake
    mode's run of that pp rank, whose metadata exchange and warm-up vote are stand-ins
    (titan_pp.py): the stand-ins hand over what the real exchange does."""
    for name in ("llama3-debug pp2 1f1b full-ac", "llama3-debug fsdp2 pp2 1f1b full-ac"):
        e = ENTRIES[name]
        assert [f["stages"] for f in e["fakes"]] == [[0], [1]]
        assert e["measured"]["n_microbatches"] == 2
        assert not [d for d in fake_vs_real(e) if d["diff_bytes"]]


def test_hsdp_on_gloo_holds_the_fsdp2_shard_groups_rows_and_all_reduces_for_real():
    """torchtitan's HSDP for real: replicate 2 × shard 2 on 4 gloo processes builds the
    (dp_replicate, fsdp) mesh — Replicate over the copies, Shard(0) inside one — so every rank
    holds what a rank of the 2-rank FSDP2 case holds: the debug model's 6,163,712 fp32
    parameters over 2, 12,327,424 B of weights and of gradients, Adam's exp_avg, exp_avg_sq and
    45 fp32 `step`s 24,655,028 B; the step's activations and peak equal too. After each
    reduce-scatter FSDP2 all-reduced the fp32 shard over the rank's replica pair: 9 calls (8
    units; the [norm, lm_head] unit twice, lm_head at ChunkedLossWrapper's last chunk, norm after
    the decoder's backward), 3,081,856 elements = the rank's whole gradient shard, each result
    exactly twice the replica's own (same ids and weights on every rank). The ledger, told
    dp_replicate = 2, predicts shard 2's static rows, the same as for FSDP over 2."""
    import dataclasses

    from memledger.engine.titan_compare import predict
    hsdp, fsdp = ENTRIES["llama3-debug hsdp2 fsdp2 op-ac"], ENTRIES["llama3-debug fsdp2 op-ac"]
    case = case_from_dict(hsdp["spec"])
    assert (case.world, case.dp_replicate, case.dp // case.dp_replicate) == (4, 2, 2)
    assert case == dataclasses.replace(case_from_dict(fsdp["spec"]), name=case.name, world=4,
                                       dp_replicate=2)  # the same model, step and AC
    mesh = {"axes": ["dp_replicate", "fsdp"], "sizes": [2, 2], "placements": ["R", "S(0)"],
            "params": 45}
    assert hsdp["fake"]["param_meshes"] == [mesh]
    rows = ("weights", "gradients", "optimizer", "activations", "peak_live")
    want = {k: fsdp["ranks"][0][k] for k in rows}
    assert len({tuple(r[k] for k in rows) for r in fsdp["ranks"]}) == 1
    assert want["weights"] == want["gradients"] == 4 * 6_163_712 // 2 == 12_327_424
    assert want["optimizer"] == 2 * 12_327_424 + 4 * 45 == 24_655_028
    for r in hsdp["ranks"]:
        assert r["param_meshes"] == [mesh], r["rank"]
        assert {k: r[k] for k in rows} == want, r["rank"]
        pair = [r["rank"] % 2, r["rank"] % 2 + 2]  # rank = replica · 2 + shard
        assert r["all_reduces"] == [{"ranks": pair, "dtype": "float32", "calls": 9,
                                     "numel": 12_327_424 // 4, "replica_sum": True}], r["rank"]
    led = [predict(case_from_dict(e["spec"])).ranks[0] for e in (hsdp, fsdp)]
    assert led[0].rows == led[1].rows
    got = compare_rows(hsdp)
    assert got["weights"] == got["gradients"] == (12_327_424, 12_327_424)
    assert got["optimizer"] == (24_654_848, 24_655_028)  # the ledger counts no `step`: −180 B


def compare_rows(entry: dict) -> dict:
    from memledger.engine.titan_compare import compare
    return {r["row"]: (r["predicted_bytes"], r["measured_bytes"])
            for r in compare(case_from_dict(entry["spec"]), entry["measured"])}


def test_merge_adds_a_gloo_case_and_keeps_the_other_stored_runs(tmp_path):
    """`--backend gloo --merge` (how the HSDP case joined): the stored file without it, merged
    with its run, is the stored file; a fake-backend run is not mixed in."""
    from memledger.cli.titan_cmd import merged
    from memledger.engine.titan_cases import GLOO_CASES
    from memledger.errors import SpecError
    path, doc = stored_without(tmp_path, STORED, "llama3-debug hsdp2 fsdp2 op-ac",
                               "engine-torchtitan-gloo.json")
    assert merged(path, doc, GLOO_CASES) == STORED
    fake_env = {**STORED["environment"], "backend": "fake process group + FakeTensorMode"}
    with pytest.raises(SpecError, match="backend"):
        merged(path, {**doc, "environment": fake_env}, GLOO_CASES)


# every case within its bars; a miss is named here, with its cause, as a strict xfail
KNOWN_MISSES: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("name", sorted(ENTRIES))
@pytest.mark.parametrize("row", list(TOLERANCE))
def test_ledger_row_within_its_bar(name, row, request):
    if (name, row) in KNOWN_MISSES:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[name, row]))
    ok, line = row_verdict(ENTRIES[name], row)
    assert ok, line


@pytest.mark.torch
def test_a_live_two_process_run_measures_what_is_stored():
    """Two gloo processes, FSDP2, seq 256, forked from this process's torch and torchtitan
    imports (the import is most of a spawned rank's time)."""
    pytest.importorskip("torchtitan.models.llama3")
    import torchtitan.models.llama3.config_registry  # noqa: F401 - imported once, before fork
    from memledger.engine.titan_gloo import run_gloo
    name = "llama3-debug fsdp2 no-ac seq256"
    ranks = run_gloo(case_from_dict(ENTRIES[name]["spec"]), timeout_s=120, start_method="fork")
    keys = ("weights", "gradients", "optimizer", "activations", "peak_live")
    got = [[r[k] for k in keys] for r in ranks]
    want = [[r[k] for k in keys] for r in ENTRIES[name]["ranks"]]
    if got != want:  # a late free by gloo's worker thread (titan_gloo.quiet_waits): once more
        ranks = run_gloo(case_from_dict(ENTRIES[name]["spec"]), timeout_s=120,
                         start_method="fork")
        got = [[r[k] for k in keys] for r in ranks]
    assert got == want, (keys, got, want)


def test_backend_goes_with_the_torchtitan_engine_only(capsys):
    from memledger.cli import main
    assert main(["validate", "--engine", "torch", "--backend", "gloo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "backend" in err[0] and "torchtitan" in err[0], err


def test_an_unknown_gloo_case_names_the_valid_ones(capsys):
    pytest.importorskip("torchtitan.models.llama3")
    from memledger.cli import main
    assert main(["validate", "--engine", "torchtitan", "--backend", "gloo", "--cases",
                 "llama3-8b fsdp8 op-ac"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "llama3-debug fsdp2 op-ac" in err[0], err
