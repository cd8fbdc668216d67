"""torchtitan's own code at real scale is the truth for the torchtitan loop (issue 27).

validation/engine-torchtitan.json holds one training step of each case measured by
`memledger validate --engine torchtitan` (torchtitan 0.3.0's model, parallelize and optimizer
code under FakeTensorMode and the fake process group, rank 0). The ledger re-predicts every
stored case on every run: static rows within 0.5 %, activations within 3 %, peak allocated
within 5 %. One case also runs live, so the harness itself is tested against the stored file.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memledger.engine.titan_compare import TOLERANCE, case_from_dict, compare, row_verdict

ROOT = Path(__file__).resolve().parents[1]
STORED = json.loads((ROOT / "validation" / "engine-torchtitan.json").read_text())
ENTRIES = {e["case"]: e for e in STORED["measurements"]}


def test_the_stored_run_is_torchtitans_at_real_scale():
    env = STORED["environment"]
    assert STORED["engine"] == "torchtitan" and env["torchtitan"].startswith("0.3")
    worlds = {e["spec"]["world"] for e in STORED["measurements"]}
    assert {8, 128, 256, 512} <= worlds, worlds
    specs = [e["spec"] for e in STORED["measurements"]]
    assert any(s.get("cp", 1) > 1 and s["seq"] >= 32768 for s in specs), "no CP case"
    assert any(s.get("ep", 1) >= 64 and s["family"] == "deepseek_v3" and s["world"] == 512
               for s in specs), "no DeepSeek-V3 EP case at 512 ranks"


# HSDP (data_parallel_replicate_degree R): each case and the FSDP case whose shard group it copies
HSDP = {"llama3-8b hsdp4 fsdp8 op-ac": "llama3-8b fsdp8 op-ac",
        "qwen3-30b-a3b hsdp2 fsdp64 ep8 op-ac": "qwen3-30b-a3b fsdp64 ep8 op-ac"}


@pytest.mark.parametrize("name", sorted(HSDP))
def test_hsdp_replicas_hold_the_shard_groups_states(name):
    """torchtitan 0.3 applies fully_shard on the (dp_replicate, fsdp) mesh — Replicate over the
    copies, Shard(0) inside one — and MoE experts on (dp_replicate, efsdp, ep)
    (distributed/parallel_dims.py, models/*/parallelize.py): a rank of R copies of an FSDP group
    holds that group's shards. Measured: weights, gradients and optimizer states (and the step's
    activations and peak) equal the FSDP case's to the byte, and the ledger, told
    dp_replicate = R, predicts the same static rows for both."""
    from memledger.engine.titan_compare import predict
    hsdp, fsdp = ENTRIES[name], ENTRIES[HSDP[name]]
    case = case_from_dict(hsdp["spec"])
    assert case.dp_replicate > 1 and case.world == case.dp_replicate * fsdp["spec"]["world"]
    shard = case.dp // case.dp_replicate
    assert hsdp["measured"]["param_meshes"][0] == {
        "axes": ["dp_replicate", "fsdp"], "sizes": [case.dp_replicate, shard],
        "placements": ["R", "S(0)"], "params": hsdp["measured"]["param_meshes"][0]["params"]}
    for key in ("weights", "gradients", "optimizer", "activations", "peak_live"):
        assert hsdp["measured"][key] == fsdp["measured"][key], key
    led = [predict(case_from_dict(e["spec"])).ranks[0].rows for e in (hsdp, fsdp)]
    for row in ("weights", "gradients", "optimizer"):
        assert led[0][row] == led[1][row], row


def test_hsdp4_over_fsdp8_holds_an_eighth_of_llama3_8b():
    """Llama-3-8B (8,030,261,248 parameters, fp32 under FSDP2's mixed precision) on 32 ranks as
    4 copies of an 8-rank shard group: the rank holds 1/8 of the model, not 1/32."""
    got = ENTRIES["llama3-8b hsdp4 fsdp8 op-ac"]["measured"]
    assert got["weights"] == got["gradients"] == 4 * 8_030_261_248 // 8 == 4_015_130_624
    params = got["param_meshes"][0]["params"]  # 227 tensors, each with a 4-byte fp32 `step`
    assert got["optimizer"] == 2 * 4_015_130_624 + 4 * params == 8_030_262_156  # exp_avg(_sq)
    experts = ENTRIES["qwen3-30b-a3b hsdp2 fsdp64 ep8 op-ac"]["measured"]["param_meshes"][1]
    assert experts["axes"] == ["dp_replicate", "efsdp", "ep"] and experts["sizes"] == [2, 8, 8]


PP = {n: e for n, e in ENTRIES.items() if e["spec"].get("pp", 1) > 1}


@pytest.mark.parametrize("name", sorted(PP))
def test_pp_cases_ran_torchtitans_split_and_the_ledger_places_the_same(name):
    """The pp rank built the stages torchtitan's pipeline_llm gives it (rank r: stages r, r + pp)
    with the layers of `_generate_llm_fqn_per_model_part`; the ledger's layout is that split."""
    from memledger.engine.titan_cases import ledger_config
    from memledger.engine.titan_compare import case_model
    from memledger.ledger.pipeline.schedules import torchtitan_layout
    case, meas = case_from_dict(PP[name]["spec"]), PP[name]["measured"]
    n_layers = case_model(case).n_layers
    chunks = 2 if case.schedule == "Interleaved1F1B" else 1
    split = torchtitan_layout(n_layers, case.pp * chunks)
    assert meas["stages"] == [case.pp_rank + c * case.pp for c in range(chunks)]
    assert meas["layers_per_stage"] == [split[s] for s in meas["stages"]]
    assert meas["n_microbatches"] == case.micro_batches
    assert ledger_config(case, n_layers)["parallel"]["layout"] == split


def test_405b_1f1b_peaks_above_interleaved_as_measured_and_published():
    """benchmarks/llama3_h100_202412_torchtitan.md Table 5 (FSDP 8, TP 8, PP 8, local batch 32):
    1F1B 82.5 GiB, Interleaved 1F1B 72.7 GiB. torchtitan's own step on pp rank 0 orders them the
    same: interleaved reduce-scatters its second chunk's gradients before the first chunk's
    backward starts; the ledger's walk, with the unsharded gradients appearing at each stage's
    first backward, does too."""
    from memledger.engine.titan_compare import predict
    one, inter = (ENTRIES[f"llama3.1-405b fsdp8 tp8 pp8 {s} full-ac"] for s in
                  ("1f1b", "interleaved"))
    assert one["measured"]["peak_live"] > inter["measured"]["peak_live"]
    peaks = [max(r.peak_allocated_bytes for r in predict(case_from_dict(e["spec"])).ranks)
             for e in (one, inter)]
    assert peaks[0] > peaks[1]


# Misses, with their cause (docs/torchtitan.md, Limits): none today. A row added here is a
# strict xfail, so a fix turns it into a failure to be removed from this table.
KNOWN_MISSES: dict[tuple[str, str], str] = {}  # (case, row) -> the named cause: none today


@pytest.mark.parametrize("name", sorted(ENTRIES))
@pytest.mark.parametrize("row", list(TOLERANCE))
def test_ledger_row_within_its_bar(name, row, request):
    if (name, row) in KNOWN_MISSES:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[name, row]))
    ok, line = row_verdict(ENTRIES[name], row)
    assert ok, line


@pytest.mark.torch
def test_a_live_run_measures_what_is_stored():
    pytest.importorskip("torchtitan.models.llama3")
    from memledger.engine.titan import run_titan
    name = "llama3.2-1b fsdp4 full-ac lb4 tied"  # the smallest stored case (about 5 s)
    live = run_titan(case_from_dict(ENTRIES[name]["spec"]))
    stored = ENTRIES[name]["measured"]
    for key in ("weights", "gradients", "optimizer", "activations", "peak_live"):
        assert live[key] == stored[key], key


@pytest.mark.torch
def test_a_live_pipeline_run_measures_what_is_stored():
    """torchtitan's pipeline_llm + Schedule1F1B under the fake process group (about 15 s)."""
    pytest.importorskip("torchtitan.models.llama3")
    from memledger.engine.titan import run_titan
    name = "llama3-8b fsdp2 pp4 1f1b full-ac"
    live = run_titan(case_from_dict(ENTRIES[name]["spec"]))
    stored = ENTRIES[name]["measured"]
    for key in ("weights", "gradients", "optimizer", "activations", "peak_live", "events",
                "layers_per_stage"):
        assert live[key] == stored[key], key


def test_without_torchtitan_the_command_says_how_to_install_it():
    code = ("import sys; sys.modules['torchtitan'] = None; sys.modules['torchtitan.models'] = None;"
            "sys.modules['torchtitan.models.llama3'] = None; from memledger.cli import main;"
            "sys.exit(main(['validate', '--engine', 'torchtitan']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install" in lines[0] and "torchtitan" in lines[0], lines


def test_a_case_names_the_bad_replicate_degree_and_the_ledger_is_told_it():
    from memledger.engine.titan_cases import BY_NAME, CASES, TitanCase, ledger_config
    from memledger.errors import SpecError
    with pytest.raises(SpecError, match="dp_replicate"):  # dp = 24 / tp 2 = 12
        TitanCase(name="x", family="llama3", config_fn="llama3_8b", preset="llama3-8b",
                  world=24, tp=2, dp_replicate=5)
    with pytest.raises(SpecError, match="ep"):  # efsdp = dp_shard·cp·tp / ep: 16 / 32
        TitanCase(name="x", family="qwen3", config_fn="qwen3_30b_a3b", preset="qwen3-30b-a3b",
                  world=32, dp_replicate=2, ep=32)
    par = ledger_config(BY_NAME["llama3-8b hsdp4 fsdp8 op-ac"])["parallel"]
    assert (par["dp"], par["dp_replicate"]) == (32, 4)
    assert all(ledger_config(c)["parallel"]["dp_replicate"] == 1 for c in CASES
               if c.dp_replicate == 1 and c.pp == 1)  # (PP cases need the layer count)


def test_merge_replaces_namesakes_and_keeps_the_other_stored_measurements(tmp_path):
    """`--merge`: the measured cases take their namesakes' place or join in the case list's
    order (ad-hoc cases after them); the rest of the stored file is kept as it is; another torch / torchtitan is refused."""
    from memledger.cli.titan_cmd import merged
    from memledger.engine.titan_cases import CASES
    from memledger.errors import SpecError
    path = tmp_path / "engine-torchtitan.json"
    path.write_text(json.dumps(STORED))
    new = {"case": CASES[4].name, "spec": {}, "measured": {"weights": 1}}
    again = {**STORED["measurements"][0], "measured": {"weights": 2}}
    doc = {**STORED, "measurements": [new, again]}
    out = merged(path, doc, CASES)
    names = [e["case"] for e in out["measurements"]]
    named = [n for n in names if any(c.name == n for c in CASES)]
    assert named == [c.name for c in CASES if c.name in names]
    assert names[:len(named)] == named  # ad-hoc (`custom ...`) entries last, as stored
    assert out["measurements"][0] == again and new in out["measurements"]
    assert len(out["measurements"]) == len({*ENTRIES, new["case"]})
    assert [e for e in out["measurements"] if e not in (new, again)] == \
        [e for e in STORED["measurements"] if e["case"] not in (new["case"], again["case"])]
    with pytest.raises(SpecError, match="torchtitan"):
        merged(path, {**doc, "environment": {**STORED["environment"], "torchtitan": "0.4"}},
               CASES)


def test_a_case_names_the_bad_expert_degree():
    from memledger.engine.titan_cases import TitanCase
    from memledger.errors import SpecError
    with pytest.raises(SpecError, match="ep"):
        TitanCase(name="x", family="deepseek_v3", config_fn="deepseek_v3_16b", preset="",
                  world=512, ep=3)



def test_a_moe_full_ac_peak_holds_the_combines_four_fp32_tensors():
    """torchtitan scores the combined rows in fp32; the backward of that product holds its fp32
    operand, the upcast incoming gradient, the rows' gradient and the scores' product at once
    (ledger.activations.titan_moe): measured at the peak of Qwen3-30B-A3B under full AC, the
    mul and _to_copy outputs alive hold at least those four (T·K, h) fp32 tensors."""
    from memledger.engine.titan_cases import ledger_config
    from memledger.ledger.activations.titan_moe import combine_backward_bytes
    from memledger.model.presets import model as preset
    from memledger.specs import ParallelSpec, TrainSpec
    entry = ENTRIES["qwen3-30b-a3b fsdp64 ep8 full-ac"]
    case = case_from_dict(entry["spec"])
    m = preset(case.preset)
    cfg = ledger_config(case, m.n_layers)
    four = combine_backward_bytes(m, TrainSpec(**cfg["train"]), ParallelSpec(**cfg["parallel"]))
    at_peak = entry["measured"]["at_peak"]
    assert four == 4 * 4 * 8192 * 8 * 2048  # 8,192 tokens × top-8 rows × h 2048 × fp32
    assert four <= at_peak["mul.Tensor"] + at_peak["_to_copy.default"] <= 1.2 * four


@pytest.mark.parametrize("name", sorted(n for n, e in ENTRIES.items() if e["spec"]["pp"] == 1))
def test_what_a_rank_holds_before_its_forward_is_its_states_buffers_and_ids(name):
    """torchtitan 0.3 gives every attention layer its own RoPE cache at training.seq_len and
    every MoE layer two expert-load counters (ledger.static.titan_buffers): before the measured
    forward a rank holds its parameters, optimizer states, token ids and labels (positions
    under CP) and exactly those buffers (PP ranks also keep their receive buffers), and under
    0.3's CUDA-graph step (`grads=kept`) its zeroed gradients."""
    from memledger.engine.titan_compare import predict
    from memledger.ledger.static.titan_buffers import NAMES
    entry = ENTRIES[name]
    case, got = case_from_dict(entry["spec"]), entry["measured"]
    r = predict(case).ranks[case.pp_rank]
    rope = sum(i.bytes for i in r.items if i.name in NAMES)
    tokens = case.local_batch * case.seq // case.cp
    ids = 8 * tokens * (3 if case.cp > 1 else 2)
    before = got["marks"].get("before_forward", got["base_live"])
    kept = got["gradients"] if case.keep_grads else 0
    assert before - got["weights"] - got["optimizer"] - kept - rope == ids


def test_interleaved_ranks_hold_every_pending_send_as_nccl_does():
    """torch's interleaved runtime keeps every send's Work to the step's end, and NCCL's Work holds
    the sent tensor until waited (its allocator-safety stash): the harness holds them too
    (titan_pp._sends_held), and the ledger's pending-send item then agrees within 1.5 % on every
    interleaved case (1.7-3.4 % apart when the fake process group's Work held nothing)."""
    cases = [e for e in STORED["measurements"] if e["spec"]["schedule"] == "Interleaved1F1B"
             and e["spec"].get("reshard", "default") == "default"]  # "always": its own test
    assert len(cases) >= 6
    for e in cases:
        rec = next(r for r in compare(case_from_dict(e["spec"]), e["measured"])
                   if r["row"] == "peak_allocated")
        assert abs(rec["rel_error"]) < 0.015, (e["case"], rec["rel_error"])
