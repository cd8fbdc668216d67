"""Megatron-Core's own code on gloo CPU processes is the truth for the `megatron` profiles
(issue 27, item 3): the cases run the local layer spec (`megatron-local`: Transformer Engine's
`megatron` plus the local spec's unfused RoPE and QKV view, itemised below).

validation/engine-megatron-core.json holds one training step of each case measured by
`memledger validate --engine megatron-core` (megatron-core 0.16.1: GPTModel from the local layer
spec in Float16Module, DistributedDataParallel, DistributedOptimizer over torch's AdamW,
`get_forward_backward_func`, one gloo process per rank). The ledger re-predicts every stored
rank on every run: static rows within 0.5 %, activations within 3 %, peak allocated within 5 %
(MoE cases: TopKRouter top-2 of 8 with the switch loss, alltoall / allgather dispatch, EP 2, one
with a shared expert, TP 2 x EP 2 with and without ETP 2; their activations and peaks as the mean
over the ranks; partial DistOpt: 2 optimizer instances over dp 4, dense and with EP 2, the
ledger's dp_replicate).
One case also runs live when megatron-core is installed (it is not part of `make test`'s extras).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import stored_without

from memledger.engine.megatron_compare import TOLERANCE, case_from_dict, compare

ROOT = Path(__file__).resolve().parents[1]
STORED = json.loads((ROOT / "validation" / "engine-megatron-core.json").read_text())
ENTRIES = {e["case"]: e for e in STORED["measurements"]}
RECORDS = {(r["case"], r["rank"], r["row"]): r
           for e in STORED["measurements"]
           for r in compare(case_from_dict(e["spec"]), e["ranks"])}


def test_the_stored_run_is_megatron_cores_on_every_rank():
    env = STORED["environment"]
    assert STORED["engine"] == "megatron-core" and env["megatron_core"] == "0.16.1"
    assert env["backend"] == "gloo"
    for e in STORED["measurements"]:
        spec = case_from_dict(e["spec"])
        assert [r["rank"] for r in e["ranks"]] == list(range(spec.world))
        assert all(r["steps_ok"] == [True, True] for r in e["ranks"]), e["case"]
    assert {case_from_dict(e["spec"]).world for e in STORED["measurements"]} >= {1, 2, 4}
    assert any(case_from_dict(e["spec"]).pp == 2 for e in STORED["measurements"])
    assert any(case_from_dict(e["spec"]).instances == 2 for e in STORED["measurements"])


def test_two_distributed_optimizer_instances_over_dp4_hold_what_dp2_holds():
    """num_distributed_optimizer_instances = 2 at dp 4 (the ledger's dp_replicate = 2): DDP lays
    its param / fp32 grad buffers out over the intra-instance group of dp/N = 2 ranks
    (distributed_data_parallel.py:291-293; param_and_grad_buffer.py:652-654 pads each bucket to
    lcm(2, 128)), reduce-scatters over it and all-reduces the shard in place across the instances
    (param_and_grad_buffer.py:433-487), and the DistributedOptimizer shards over the same group
    (optimizer/__init__.py:637): every rank r holds, row by row and at its peaks, exactly what
    rank r mod 2 of the plain dp-2 DistributedOptimizer holds, half the optimizer bytes of one
    sharded over all 4 ranks; the ledger predicts both cases the same."""
    from dataclasses import replace

    from memledger.engine.megatron_cases import ledger_config
    from memledger.engine.megatron_compare import predict
    name, twin = "gpt-local tp1 dp4 distopt instances2", "gpt-local tp1 dp2 distopt"
    spec = case_from_dict(ENTRIES[name]["spec"])
    assert (spec.world, spec.dp, spec.instances) == (4, 4, 2)
    assert ledger_config(spec)["parallel"]["dp_replicate"] == 2
    for r in ENTRIES[name]["ranks"]:
        same = ENTRIES[twin]["ranks"][r["rank"] % 2]
        for key in ("weights", "gradients", "optimizer", "activations", "activations_per_layer",
                    "peak_live", "peak_live_grad_sync", "phases"):
            assert r[key] == same[key], (r["rank"], key)
        for row in TOLERANCE:
            assert RECORDS[name, r["rank"], row]["predicted_bytes"] == \
                RECORDS[twin, r["rank"] % 2, row]["predicted_bytes"], (r["rank"], row)
        assert (r["weights"], r["gradients"], r["optimizer"]) == (30_942_208, 61_884_416,
                                                                  92_826_680)
        # 12 B per parameter over 2 ranks, + AdamW's 4-byte step for each of the 14 tensors
        assert RECORDS[name, r["rank"], "optimizer"]["predicted_bytes"] == 92_826_624
    flat = predict(replace(spec, instances=1)).ranks[0].rows["optimizer"]
    assert 2 * flat == predict(spec).ranks[0].rows["optimizer"]


def test_with_experts_each_instance_shards_the_expert_optimizer_over_expert_dp_over_n():
    """The same 2 instances at dp 4 with EP 2 (8 experts): the dense DistributedOptimizer shards
    over dp/N = 2 ranks, the experts' over the intra expert group of expert dp/N = (4/2)/2 = 1
    rank (parallel_state.py:1263-1309; optimizer/__init__.py:675; DDP's expert buffers over it,
    distributed_data_parallel.py:296-301), the whole expert shard all-reduced over the instances
    {0,2}, {1,3} (param_and_grad_buffer.py:484; an ad-hoc run logged it): each rank keeps the fp32
    main params and AdamW moments of all its 4 x 4 local experts, what rank r mod 2 of ep2 dp2
    keeps, as the ledger's world/(pp·ep·etp·dp_replicate) = 1 says. Routing is the router's (its
    numerics); the compared rows are the means over the ranks, equal to the twin's."""
    from dataclasses import replace

    from memledger.engine.megatron_compare import predict
    name = "gpt-local moe e8 top2 ep2 dp4 distopt instances2 alltoall"
    twin = "gpt-local moe e8 top2 ep2 dp2 alltoall"
    spec = case_from_dict(ENTRIES[name]["spec"])
    assert (spec.world, spec.dp, spec.ep, spec.instances) == (4, 4, 2, 2)
    expert = spec.layers * spec.experts // spec.ep * 3 * spec.hidden * spec.moe_ffn
    for r in ENTRIES[name]["ranks"]:
        same = ENTRIES[twin]["ranks"][r["rank"] % 2]
        dense = r["weights_unpadded"] // 2 - expert  # bf16 parameters, no bucket padding
        assert (dense, expert, r["weights"]) == (6_836_736, 17_301_504, r["weights_unpadded"])
        # 12 B per parameter: dense over 2 ranks, experts over 1; + 176 B of AdamW steps
        assert r["optimizer"] == 12 * (dense // 2 + expert) + 176 == 248_638_640
        for key in ("weights", "gradients", "optimizer", "peak_live_grad_sync"):
            assert r[key] == same[key], (r["rank"], key)
        for row in TOLERANCE:
            got, want = RECORDS[name, r["rank"], row], RECORDS[twin, r["rank"] % 2, row]
            assert got["measured_bytes"] == want["measured_bytes"], (r["rank"], row)
            assert got["predicted_bytes"] == want["predicted_bytes"], (r["rank"], row)
        assert RECORDS[name, r["rank"], "optimizer"]["predicted_bytes"] == 248_638_464
    # experts over all of expert dp (2), dense over dp 4: what one instance would hold
    assert predict(replace(spec, instances=1)).ranks[0].rows["optimizer"] == \
        12 * (6_836_736 // 4 + 17_301_504 // 2) == 124_319_232


def test_the_pipeline_holds_megatrons_1f1b_staircase():
    """1F1B at pp=2, m=4: the first stage runs pp − rank = 2 forwards before its first backward,
    the last one; the saved tensors alive then are that many micro-batches' layers."""
    entry = ENTRIES["gpt-local pp2 1f1b m4"]
    spec = case_from_dict(entry["spec"])
    for r in entry["ranks"]:
        assert r["held"] == spec.pp - r["pp_rank"]
        layers = spec.layers // spec.pp
        per_layer = r["activations_per_layer"][0]
        outside = r["saved_outside_layers"]["pre"] + r["saved_outside_layers"]["post"]
        assert r["activations"] - r["held"] * layers * per_layer in range(0, outside + 8), r


# The local spec's unfused RoPE computes cos and sin per call (models/common/embeddings/
# rope_utils.py `_apply_rotary_pos_emb_bshd`) and multiplication keeps them, for q and for k:
# 4 · s·b·dh per layer, not split by tp. V is a view of the fused QKV projection's output
# (transformer/attention.py `get_query_key_value_tensors`: torch.split): the attention keeps it,
# so the whole projection output stays: (a + g)·dh more per token than TE's (q and k are
# rebuilt by RoPE), split by tp. The megatron-local profile adds these (profiles/megatron.py
# `local_extras`).
def local_spec_extra_bytes(spec) -> int:
    dh = spec.hidden // spec.heads
    tokens = spec.seq * spec.micro_batch
    rope = 4 * tokens * dh * 2
    qkv_view = tokens * (spec.heads + spec.kv_heads) * dh // spec.tp * 2
    return rope + qkv_view


TORCH_NORM = ("torch's CPU dispatch of rms_norm (a decomposition) keeps an fp32 copy of the "
              "input and of the normalised input per norm, 3·s·b·h bytes above the CUDA kernels")
DPA = ("Megatron's DotProductAttention (local core attention) keeps the b·a·s² scores and "
       "probabilities and GQA-expanded k, v; the megatron profile assumes flash attention")


def constant_bytes(spec) -> int:
    """Per layer, not per token, outside the ledger's per-token inventory: per MoE layer the
    switch loss keeps its tokens-per-expert count (int64 E) and MoEAuxLossAutoScaler the fp32
    loss (router.py _apply_aux_loss, moe_utils.py switch_load_balancing_loss_func); under
    selective recompute the checkpoint keeps the mask type as one int32 (attention.py:414)."""
    return (spec.experts * 8 + 4 if spec.experts else 0) + 4 * (spec.recompute == "selective")


def known_miss(case: str, row: str) -> str | None:
    if row not in ("activations", "activations_per_layer"):
        return None
    if "DotProductAttention" in case:
        return DPA
    if "torch-cpu" in case:
        return TORCH_NORM
    return None


def _xfail_for(case: str, rank: int, row: str) -> str | None:
    """A known miss, strictly: a peak only where something named carries it past 5 %."""
    if row == "peak_allocated":
        if any(k in case for k in ("torch-cpu", "DotProductAttention")):
            return known_miss(case, "activations")
        return None
    return known_miss(case, row)


@pytest.mark.parametrize("key", sorted(RECORDS), ids=lambda k: f"{k[0]}-r{k[1]}-{k[2]}")
def test_ledger_row_within_its_bar(key, request):
    rec = RECORDS[key]
    reason = _xfail_for(key[0], key[1], key[2])
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    assert rec["ok"], (f"{key}: measured {rec['measured_bytes']:,} predicted "
                       f"{rec['predicted_bytes']:,} ({100 * rec['rel_error']:+.2f}%, bar "
                       f"{100 * rec['tolerance']:g}%)")


LOCAL = sorted(n for n in ENTRIES if known_miss(n, "activations") is None
               and case_from_dict(ENTRIES[n]["spec"]).recompute != "full")


@pytest.mark.parametrize("name", LOCAL)
def test_the_local_spec_keeps_exactly_the_megatron_local_profiles_extras(name):
    """Per layer, the local spec keeps what the ledger's megatron-local profile says, to the
    per-layer constants (the switch loss's counts, the checkpoint's mask type); the profile's
    extras over the TE one are exactly the unfused RoPE's cos / sin and V's view of QKV."""
    from dataclasses import replace

    from memledger.engine.megatron_compare import predict
    spec = case_from_dict(ENTRIES[name]["spec"])
    for r in ENTRIES[name]["ranks"]:
        rec = RECORDS[name, r["rank"], "activations_per_layer"]
        assert rec["measured_bytes"] - rec["predicted_bytes"] == constant_bytes(spec), name
    local = predict(spec).ranks[0]
    te = predict(spec, profile="megatron").ranks[0]
    extra = local.rows["activations"] - te.rows["activations"]
    layers = spec.layers // spec.pp * sum(n for _s, n in local.in_flight)
    assert extra == layers * local_spec_extra_bytes(spec), name


MOE = sorted(n for n in ENTRIES if case_from_dict(ENTRIES[n]["spec"]).experts)


@pytest.mark.parametrize("name", MOE)
def test_the_router_drops_no_token(name):
    """Dropless routing (no capacity factor): in every MoE layer the expert-parallel group's
    experts get every token K times, T·K·ep rows over the ep ranks; ETP ranks see the same rows
    (the ledger's routed_rows = b·s/(cp·tp_sp)·K·etp per rank on average)."""
    spec = case_from_dict(ENTRIES[name]["spec"])
    ranks = ENTRIES[name]["ranks"]
    tokens = spec.seq * spec.micro_batch // (spec.tp if spec.sp else 1)
    for layer in range(spec.layers):
        rows = sum(r["routed_rows_per_layer"][layer] for r in ranks)
        assert rows == len(ranks) * tokens * spec.top_k * spec.etp, (name, layer, rows)


def test_selective_recompute_drops_only_the_attention_cores_logsumexp():
    """recompute_modules' default is ["core_attn"] (transformer_config.py:1193-1194): the
    checkpointed core attention keeps q, k, v, the output projection keeps its input, and only
    the flash logsumexp (fp32, a per token) is gone: per layer the selective case keeps exactly
    the no-recompute case's bytes less a·s·b·4, plus the one int32 the checkpoint keeps for the
    mask type (transformer/attention.py:414)."""
    sel, none = (ENTRIES[f"gpt-local tp1 dp1{x}"]["ranks"][0]["activations_per_layer"]
                 for x in (" selective recompute", ""))
    spec = case_from_dict(ENTRIES["gpt-local tp1 dp1"]["spec"])
    lse = spec.heads * spec.seq * spec.micro_batch * 4
    assert [n - s for n, s in zip(none, sel)] == [lse - 4] * spec.layers


@pytest.mark.parametrize("name", sorted(n for n in ENTRIES if "hidden dropout" in n))
def test_hidden_dropout_keeps_two_bool_masks_per_layer_and_one_after_the_embedding(name):
    """--hidden-dropout > 0 (Megatron-LM's default 0.1): the bias-dropout-add after attention
    and after the MLP each keep a bool mask, h bytes per token (÷ tp under SP), and the embedding
    dropout one more on the first stage — measured against the same case without dropout, and
    the ledger's megatron profile moves by exactly as much."""
    spec = case_from_dict(ENTRIES[name]["spec"])
    base = name.replace(" hidden dropout 0.1", "")
    tokens = spec.seq * spec.micro_batch // (spec.tp if spec.sp else 1)
    for r, b in zip(ENTRIES[name]["ranks"], ENTRIES[base]["ranks"]):
        per_layer = [x - y for x, y in zip(r["activations_per_layer"], b["activations_per_layer"])]
        assert per_layer == [2 * tokens * spec.hidden] * spec.layers, (name, per_layer)
        assert r["activations"] - b["activations"] == (2 * spec.layers + 1) * tokens * spec.hidden
        moved = [RECORDS[n, r["rank"], "activations"]["predicted_bytes"] for n in (name, base)]
        assert moved[0] - moved[1] == r["activations"] - b["activations"]


def test_the_static_rows_are_the_bytes_of_megatrons_buffers():
    """Weights and fp32 main grads are DDP's contiguous buffers; the DistributedOptimizer keeps
    12/dp bytes per parameter (+ AdamW's 4-byte step per tensor, which the ledger ignores)."""
    for (case, _rank, row), rec in RECORDS.items():
        if row in ("weights", "gradients"):
            assert rec["measured_bytes"] == rec["predicted_bytes"], (case, row)
        if row == "optimizer":
            assert 0 <= rec["measured_bytes"] - rec["predicted_bytes"] <= 4 * 64, case


@pytest.mark.torch
def test_a_live_run_measures_what_is_stored():
    pytest.importorskip("megatron.core.models.gpt")
    from memledger.engine.megatron_core import run_case
    name = "gpt-local tp1 dp1"
    live = run_case(case_from_dict(ENTRIES[name]["spec"]))
    stored = ENTRIES[name]["ranks"]
    for key in ("weights", "gradients", "optimizer", "activations", "activations_per_layer",
                "peak_live"):
        assert live[0][key] == stored[0][key], key


def test_without_megatron_core_the_command_says_how_to_install_it():
    code = ("import sys; sys.modules['megatron'] = None; sys.modules['megatron.core'] = None;"
            "sys.modules['megatron.core.models.gpt'] = None; from memledger.cli import main;"
            "sys.exit(main(['validate', '--engine', 'megatron-core']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install" in lines[0] and "megatron-core" in lines[0], lines


def test_the_stored_file_rescores_from_the_command_line():
    from memledger.cli import main
    code = main(["validate", "--rescore", str(ROOT / "validation" / "engine-megatron-core.json")])
    assert code == (0 if all(r["ok"] for r in RECORDS.values()) else 1)


def test_the_cases_are_listed_without_megatron_core(capsys):
    from memledger.cli import main
    from memledger.engine.megatron_cases import CASES
    assert main(["validate", "--engine", "megatron-core", "--list"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == [c.name for c in CASES]


def test_merge_replaces_namesakes_and_keeps_the_other_stored_measurements(tmp_path):
    """`--merge` (how the partial-DistOpt case joined): the stored file without it, merged with
    its run, is the stored file; another megatron-core is refused; --merge goes with
    --engine megatron-core and torchtitan only."""
    from memledger.cli import main
    from memledger.cli.megatron_cmd import merged
    from memledger.engine.megatron_cases import CASES
    from memledger.errors import SpecError
    path, doc = stored_without(tmp_path, STORED, "gpt-local tp1 dp4 distopt instances2",
                               "engine-megatron-core.json")
    assert merged(path, doc, CASES) == STORED
    again = {**ENTRIES["gpt-local tp1 dp1"], "ranks": []}
    out = merged(path, {**doc, "measurements": [again]}, CASES)
    assert out["measurements"][0] == again and len(out["measurements"]) == len(ENTRIES) - 1
    with pytest.raises(SpecError, match="megatron_core"):
        merged(path, {**doc, "environment": {**STORED["environment"], "megatron_core": "0.17"}},
               CASES)
    assert main(["validate", "--engine", "torch", "--merge"]) == 2


def test_an_unknown_case_names_the_valid_ones():
    from memledger.engine.megatron_cases import MegatronCase, case_by_name
    from memledger.errors import SpecError
    with pytest.raises(SpecError, match="gpt-local tp1 dp1"):
        case_by_name("gpt-local tp9")
    with pytest.raises(SpecError, match="layers 4 must be divisible by pp = 3"):
        MegatronCase(name="x", pp=3)
    with pytest.raises(SpecError, match="instances"):
        MegatronCase(name="x", dp=4, instances=3)
    with pytest.raises(SpecError, match="expert dp 2"):
        MegatronCase(name="x", dp=4, experts=8, ep=2, instances=4)
