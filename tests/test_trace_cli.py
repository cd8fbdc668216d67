"""Claims about `memledger trace`: fitted per-token formulas extrapolate to sizes never traced,
the profile it writes reproduces the hand-written `hf` profile through the ledger, and bad
input is one line and exit 2. Models are built from configs at small widths on CPU."""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from fractions import Fraction as F

import pytest

from memledger.cli import main
from memledger.trace.fit import Point, fit, residual
from memledger.trace.records import SavedTensor, Trace

HF = "tests/fixtures/hf"
USER = "tests/fixtures/trace_models.py"


def trace(capsys, tmp_path, *args) -> dict:
    out = tmp_path / "prof.json"
    assert main(["trace", *args, "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    return printed


def activations(capsys, *args) -> list[int]:
    assert main(["ledger", *args, "--json"]) == 0
    return [r["rows"]["activations"] for r in json.loads(capsys.readouterr().out)["ranks"]]


def worst(doc) -> float:
    return max(abs(r["rel_error"]) for r in doc["residual"].values())


# -- the fit alone (no torch) ----------------------------------------------------------------
def _synthetic(seq: int, w: F) -> Trace:
    """A layer saving a hidden-sized vector (h = 64·w per token), an s×s score matrix of 4
    heads and a 12-byte constant; an eager expert loop whose tensor count varies per trace."""
    h, T = int(64 * w), seq
    xs = [SavedTensor("layers.0.mlp", 0, (1, seq, h), "float32", 4 * T * h, 4 * T * h, "mlp_fc1"),
          SavedTensor("layers.0.attn", 0, (1, 4, seq, seq), "bfloat16", 2 * 4 * T * seq,
                      2 * 4 * T * seq, "attn_core"),
          SavedTensor("layers.0.attn", 0, (3,), "int32", 12, 12, "attn_core")]
    xs += [SavedTensor("layers.0.experts", 0, (32, h), "bfloat16", 32 * h * 2, 32 * h * 2,
                       "expert_in") for _ in range(seq // 16)]  # 2 rows per token in all
    return Trace(tuple(xs), tokens=T)


def test_fit_recovers_per_token_seq_and_constant_terms_and_predicts_a_larger_size():
    pts = [Point(s, w, _synthetic(s, w)) for w in (F(1, 4), F(1, 2)) for s in (16, 32)]
    rows = {r.name: r for r in fit(pts)}
    assert rows["mlp#0"].full("T") == 4 * 64 and rows["mlp#0"].shape == "[64]"
    assert (rows["attn#0"].full("Ts"), rows["attn#0"].full("T")) == (8, 0)
    assert rows["attn#0"].shape == "[4, s]"
    assert (rows["attn#1"].full("1"), rows["attn#1"].full("T")) == (12, 0)
    assert rows["experts#all"].full("T") == 2 * 64 * 2  # one summed row: counts vary
    assert rows["experts#all"].shape == "?"
    res = residual(list(rows.values()), Point(96, F(1), _synthetic(96, F(1))))
    assert res["total"]["rel_error"] == 0 and res["0"]["traced_bytes"] > 0


def test_deepseek_v3_shrinks_to_two_layers_of_both_kinds_with_all_128_heads():
    from memledger.trace.shrink import check_model_params, choose_shrink
    cfg = json.loads(open(f"{HF}/DeepSeek-V3.json").read())
    s = choose_shrink(cfg)
    small = s.config(cfg, s.k)
    assert (s.k, s.divisors) == (8, (16, 32, 8))  # qk_rope_head_dim 64 / 32 = 2: no further
    assert (small["num_hidden_layers"], small["first_k_dense_replace"]) == (2, 1)
    assert (small["num_attention_heads"], small["num_experts_per_tok"]) == (128, 8)
    assert (small["hidden_size"], small["n_routed_experts"], small["n_group"]) == (896, 32, 1)
    assert "quantization_config" not in small and check_model_params(cfg, s) < 70_000_000


# -- Hugging Face configs --------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama8b(tmp_path_factory):
    out, text = tmp_path_factory.mktemp("trace") / "llama8b.json", io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(["trace", "--hf-config", f"{HF}/Meta-Llama-3-8B.json", "--out", str(out)]) == 0
    return out, text.getvalue()


def test_llama3_8b_traced_on_a_laptop_gives_the_hf_activations(llama8b, capsys):
    """Traced at widths /8../32 with 2 layers, the profile describes the full 32-layer model:
    the ledger's activation row equals the `hf` profile's (exact here; the two differ only in
    transients, which a forward trace cannot see: `runtime` lacks the backward logit grads)."""
    llama8b, text = llama8b
    assert "[14336]" in text and "28,672" in text and "+0.000%" in text  # inventory, residual
    doc = json.loads(llama8b.read_text())
    assert doc["meta"]["model"]["n_layers"] == 32 and worst(doc) < 0.01
    args = ["--model", "llama3-8b", "--tp", "2", "--pp", "2", "--micro-batches", "4"]
    traced = activations(capsys, *args, "--profile", f"traced:{llama8b}")
    hf = activations(capsys, *args, "--profile", "hf")
    assert all(abs(a - b) / b < 0.01 for a, b in zip(traced, hf)), (traced, hf)


@pytest.mark.parametrize("config,extra", [
    ("tiny-llama-head-dim-null", ["--attention", "eager", "--precision", "amp"]),
    ("tiny-qwen3-moe-mlp-only-layers", []),  # a dense layer 0, then MoE layers
])
def test_small_models_match_the_hf_cpu_profile_at_a_seq_never_traced(config, extra, capsys, tmp_path):
    doc = trace(capsys, tmp_path, "--hf-config", f"{HF}/{config}.json", "--scale", "1",
                "--seq", "16,32", "--device", "cpu", *extra)
    assert worst(doc) < 0.01  # fit at /2, /4 and seqs 16, 32; check at full width, seq 64
    prec = "amp" if "amp" in extra else "bf16"
    att = "eager" if "eager" in extra else "flash"
    args = ["--hf-config", f"{HF}/{config}.json", "--seq", "512", "--precision", prec,
            "--attention", att, "--tp", "2", "--micro-batches", "2"]
    traced = activations(capsys, *args, "--profile", f"traced:{tmp_path / 'prof.json'}")
    hf = activations(capsys, *args, "--profile", "hf-cpu")
    assert abs(traced[0] - hf[0]) / hf[0] < 0.01, (traced, hf)


def test_a_user_module_fits_its_s_squared_terms(capsys, tmp_path):
    doc = trace(capsys, tmp_path, "--module", f"{USER}:attention_stack", "--batch", "2")
    assert worst(doc) < 0.01
    (layer,) = doc["kinds"].values()
    probs = [x for x in layer["tensors"] if x["bytes_per_token_seq"]]
    assert [x["bytes_per_token_seq"] for x in probs] == [4, "1/2"]  # fp32 probs, bool mask/b
    assert activations(capsys, "--model", "llama3-8b", "--profile", f"traced:{tmp_path / 'prof.json'}")[0] > 0


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize("args,message", [
    (["--module", "no_colon_here"], "expected MOD:FUNCTION"),
    (["--module", "no_such_module_xyz:build"], "no module named 'no_such_module_xyz'"),
    (["--module", f"{USER}:missing"], "has no attribute 'missing'"),
    (["--module", f"{USER}:NOT_CALLABLE"], "not a function"),
    (["--module", f"{USER}:returns_a_number"], "returned int"),
    (["--module", f"{USER}:returns_inputs_not_a_maker"], "(model, make_inputs)"),
    (["--hf-config", "tests/fixtures/trace_models.py"], "not valid JSON"),
    (["--hf-config", f"{HF}/Meta-Llama-3-8B.json", "--scale", "3"], "not divisible by 6"),
    (["--hf-config", f"{HF}/Meta-Llama-3-8B.json", "--layers", "9"], "must be an integer 2..4"),
    (["--module", f"{USER}:attention_stack", "--seq", "32"], "two or more distinct"),
])
def test_malformed_input_is_one_line_and_exit_2(args, message, capsys):
    assert main(["trace", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_unsupported_config_and_foreign_model_exit_2_without_traceback(tmp_path, llama8b):
    llama8b = llama8b[0]
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64}))
    for args in (["trace", "--hf-config", str(bad)],
                 ["ledger", "--model", "llama3-70b", "--profile", f"traced:{llama8b}"]):
        res = subprocess.run([sys.executable, "-m", "memledger", *args], capture_output=True, text=True)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    assert "fitted for hidden=4096" in res.stderr
