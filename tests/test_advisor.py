"""The advisor answers seed 1's four questions with numbers, and its plan, applied and re-run
through the ledger, fits."""
import json

import pytest

from memledger import ParallelSpec, SpecError, TrainSpec, build_ledger, gpu, model
from memledger.advisor import advise
from memledger.cli import main
from memledger.units import GIB

H100 = gpu("h100")
L70 = model("llama3-70b")


def _apply(a, led):
    return build_ledger(led.model, a.plan.parallel, a.plan.train, a.plan.runtime, led.hardware)


def test_llama3_70b_at_16k_over_an_h100_fits_after_zero_1():
    """tp 8 · pp 4 · dp 2, 16k tokens, 8 micro-batches: 84.9 GiB on rank 0 > 79.6 GiB."""
    led = build_ledger(L70, ParallelSpec(tp=8, pp=4, dp=2, sp=True), TrainSpec(seq=16384, micro_batches=8),
                       hardware=H100)
    a = advise(led)
    assert not a.fits and a.peak_bytes == led.peak.peak_total_bytes > H100.hbm_bytes
    # 1. static rows: 38.1 GiB; ZeRO-1 halves the optimizer states over dp = 2
    assert a.static.static_bytes == led.peak.static_bytes and not a.static.under_budget
    assert a.static.smallest == "ZeRO-1"
    zero1 = next(o for o in a.static.options if o.label == "ZeRO-1")
    assert zero1.static_bytes == a.static.static_bytes - led.peak.rows["optimizer"] // 2
    assert any(o.error and "n_kv_heads" in o.error for o in a.static.options)  # tp 16 is invalid
    # 2. activations: the largest tensor is the fc1 output (SwiGLU input), priced in each currency
    assert a.activations.largest_tensor == "mlp.fc1_out"
    cur = {c.policy: c for c in a.activations.currencies}
    assert set(cur) == {"recompute", "fp8", "int8", "int4", "offload-cpu", "offload-pp"}
    assert cur["recompute"].saved_bytes > cur["int4"].saved_bytes > cur["fp8"].saved_bytes > 0
    assert cur["recompute"].recompute_flops_per_step == 2 * 8192 * 57344 * 16384 // 8 * 20 * 8
    assert cur["fp8"].bits_lost == 4 and cur["offload-cpu"].link == "PCIe"
    # 3. the staircase: 4, 3, 2, 1 micro-batches in flight; levelling alone would fit
    assert a.staircase.steepness > 3 and a.staircase.fits_after and not a.staircase.fits_before
    # 4. no expert parallelism: no all-to-all to resize
    assert a.buffers.a2a_bytes == {} and not a.buffers.worst_case_sized
    # the plan, applied
    assert a.plan.steps == ("static: ZeRO-1",) and a.plan.fits
    after = _apply(a, led)
    assert after.peak.peak_total_bytes == a.plan.peak_bytes <= H100.hbm_bytes


def test_without_data_parallelism_the_plan_pays_in_activation_currencies():
    led = build_ledger(L70, ParallelSpec(tp=8, pp=4, dp=1, sp=True), TrainSpec(seq=32768, micro_batches=8),
                       hardware=H100)
    a = advise(led)
    assert not a.fits and a.plan.fits
    assert all(s.startswith("activations:") for s in a.plan.steps)
    assert a.plan.steps[0] == "activations: mlp_fc1=fp8"  # the largest class, a linear input
    assert _apply(a, led).peak.peak_total_bytes <= H100.hbm_bytes


def test_deepseek_v3_worst_case_buffers_are_the_first_thing_to_fix():
    led = build_ledger(model("deepseek-v3"), ParallelSpec(tp=8, pp=8, ep=32, dp=4, sp=True,
                                                           layout=(7, 8, 8, 8, 8, 8, 8, 6)),
                       TrainSpec(seq=16384, micro_batches=16),
                       __import__("memledger").RuntimeSpec(a2a="worst-case"), H100)
    a = advise(led)
    assert a.buffers.worst_case_sized
    # T = 16384/8 = 2048 tokens; worst ep·T·min(K, E/ep) = 32·2048·8 rows vs T·K = 2048·8: 32×
    assert a.buffers.a2a_bytes["worst-case"] == 32 * a.buffers.a2a_bytes["capacity"]
    assert a.buffers.static_saving_bytes == 31 * 2 * 2048 * 8 * 7168 * 2
    assert a.plan.steps[0].startswith("buffers: static all-to-all shapes")
    assert a.plan.fits and _apply(a, led).peak.peak_total_bytes <= H100.hbm_bytes


def test_a_configuration_that_fits_says_so():
    led = build_ledger(L70, ParallelSpec(tp=8, pp=4, dp=2, sp=True), TrainSpec(seq=4096, micro_batches=8),
                       hardware=H100)
    a = advise(led)
    assert a.fits and a.plan.steps == ("already fits: no change",) and a.static.under_budget
    assert a.activations.activation_bytes == led.peak.rows["activations"] > 0


def test_a_target_is_needed():
    led = build_ledger(L70, ParallelSpec(tp=8, pp=4, dp=2, sp=True), TrainSpec())
    with pytest.raises(SpecError, match="target_gib"):
        advise(led)
    assert advise(led, 200 * GIB).fits


def test_cli_advise_json_has_integer_bytes(capsys):
    rc = main(["advise", "--model", "llama3-70b", "--tp", "8", "--pp", "4", "--world", "64",
               "--seq", "16384", "--micro-batches", "8", "--gpu", "h100", "--zero", "0",
               "--layout", "even", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["fits"] is False and out["plan"]["fits"] is True
    assert isinstance(out["peak_bytes"], int) and isinstance(out["static"]["static_bytes"], int)
    assert all(isinstance(c["saved_bytes"], int) for c in out["activations"]["currencies"])


def test_cli_advise_text_and_bad_input(capsys):
    assert main(["advise", "--model", "llama3-70b", "--tp", "8", "--pp", "4", "--world", "64",
                 "--target-gib", "60"]) == 0
    text = capsys.readouterr().out
    assert "1. static rows" in text and "4. buffers" in text and "plan:" in text
    assert main(["advise", "--model", "llama3-70b"]) == 0  # the shared defaults: 64 × H100
    assert "against 79.6" in capsys.readouterr().out.splitlines()[0]
    assert main(["advise", "--model", "llama3-8b", "--gpu", "h100", "--policy", "mlp_fc1=fp9"]) == 2


def test_cli_ledger_takes_policies_and_presets(capsys):
    args = ["ledger", "--model", "llama3-8b", "--seq", "8192", "--json"]
    main(args)
    keep = json.loads(capsys.readouterr().out)["ranks"][0]["rows"]["activations"]
    main(args + ["--policy-preset", "deepseek-v3-fp8", "--policy", "qkv=int8"])
    led = json.loads(capsys.readouterr().out)
    r = led["ranks"][0]
    assert r["rows"]["activations"] < keep
    assert {m["cls"]: m["policy"] for m in r["moves"]}["qkv"] == "int8"
    assert led["config"]["train"]["policy"]["rules"]
