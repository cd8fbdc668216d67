"""Claims of the hardening work on the core: plausibility bounds reject the same input on every
surface with the same message, and no computation costs time in proportion to a typed number."""
import json
import time
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memledger import ParallelSpec, TrainSpec, build_ledger, gpu, model
from memledger.costs import bandwidth
from memledger.costs.bandwidth import MicroBatchAlternative, smaller_micro_batch
from memledger.divisors import divisor_text, divisors
from memledger.errors import SpecError
from memledger.ledger.checks import check_all
from memledger.model.hf_config import from_hf_config
from memledger.specs.bounds import BOUNDS, bound_message
from memledger.specs.model import ModelSpec, MoESpec
from memledger.views.model_codec import decode_model, encode_model

LLAMA_CFG = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
             "vocab_size": 128256}


@given(st.integers(1, 10**6))
@settings(max_examples=200, deadline=None)
def test_divisors_in_sqrt_time_equal_the_definition(n):
    assert divisors(n) == tuple(d for d in range(1, n + 1) if n % d == 0) if n < 5000 else True
    assert all(n % d == 0 for d in divisors(n)) and divisors(n)[-1] == n


def test_divisor_message_of_a_prime_near_1e12_is_instant_and_short():
    t0 = time.thread_time()  # this thread's CPU: other threads of the run do not count
    assert divisor_text(999_999_999_989) == "1, 999999999989"
    assert time.thread_time() - t0 < 1
    text = divisor_text(73728)
    assert text.endswith("36864, 73728 (42 in all)") and text.count(",") == 12


def test_tp_not_dividing_a_large_ffn_names_few_divisors():
    m = replace(model("llama3-8b"), ffn_hidden=720_720, n_heads=64, n_kv_heads=64)  # 240 divisors
    with pytest.raises(SpecError, match=r"valid: 1, 2, 3, .*\(240 in all\)") as e:
        check_all(m, ParallelSpec(tp=64, sp=True), TrainSpec())
    assert len(str(e.value)) < 300


@pytest.mark.parametrize("field, value", [("n_layers", 10**7), ("hidden", 10**6), ("vocab", 10**8),
                                          ("ffn_hidden", 999_999_999_989), ("n_heads", 4096)])
def test_an_implausible_model_is_rejected_identically_by_api_link_and_importer(field, value):
    base = model("llama3-8b")
    kw = {field: value}
    if field == "n_heads":
        kw["n_kv_heads"] = value
    with pytest.raises(SpecError) as api:
        replace(base, **kw)
    assert api.value.field == field and api.value.message == bound_message(field, value)
    # the share link: an encoded spec with the same field
    link = encode_model(base).replace("spec:", "")
    import base64
    import json
    import zlib
    obj = json.loads(zlib.decompress(base64.urlsafe_b64decode(link + "=" * (-len(link) % 4))))
    obj.update(kw)
    packed = base64.urlsafe_b64encode(zlib.compress(json.dumps(obj).encode())).decode()
    with pytest.raises(SpecError) as via_link:
        decode_model("spec:" + packed)
    assert via_link.value.message == api.value.message
    # the importer
    hf_key = {"n_layers": "num_hidden_layers", "hidden": "hidden_size", "vocab": "vocab_size",
              "ffn_hidden": "intermediate_size", "n_heads": "num_attention_heads"}[field]
    cfg = {**LLAMA_CFG, hf_key: value}
    if field == "n_heads":
        cfg["num_key_value_heads"] = value
    t0 = time.thread_time()
    with pytest.raises(SpecError) as imported:
        from_hf_config(cfg)
    assert imported.value.message == api.value.message and time.thread_time() - t0 < 1


def test_every_bound_has_a_reason_and_is_above_every_preset():
    from memledger.presets import MODELS
    assert all(b.reason and b.limit > 0 for b in BOUNDS.values())
    for name in MODELS:
        m = model(name)
        assert m.n_layers <= BOUNDS["n_layers"].limit and m.hidden <= BOUNDS["hidden"].limit


def test_world_and_tokens_per_step_are_bounded():
    with pytest.raises(SpecError, match="world: .*exceeds the plausible maximum 2,097,152"):
        ParallelSpec.from_world(2**63, tp=8)
    with pytest.raises(SpecError, match="micro_batches: .*268,435,456"):
        TrainSpec(micro_batch=1024, seq=1 << 20, micro_batches=1024)


def test_from_world_checks_the_degrees_before_dividing_by_them():
    with pytest.raises(SpecError, match="^tp: must be a positive integer, got 0"):
        ParallelSpec.from_world(64, tp=0)


def test_moe_layer_count_is_a_count_not_a_loop():
    moe = MoESpec(n_experts=8, top_k=2, expert_ffn=64, first_k_dense=3, dense_layers=(1, 5, 7, 7))
    m = replace(model("llama3-8b"), moe=moe, n_layers=10)
    assert m.n_moe_layers == sum(m.is_moe_layer(i) for i in range(10)) == 5


def test_dense_layer_index_error_is_truncated():
    moe = MoESpec(n_experts=8, top_k=2, expert_ffn=64, dense_layers=tuple(range(100, 1100)))
    with pytest.raises(SpecError, match=r"\(1000 in all\)") as e:
        replace(model("llama3-8b"), moe=moe)
    assert len(str(e.value)) < 200


def _linear(led, target):
    t = led.train
    tokens = t.micro_batch * t.micro_batches
    for b in range(t.micro_batch - 1, 0, -1):
        alt = bandwidth._alternative(led, b, -(-tokens // b), target)
        if alt is not None:
            return alt
    return None


@pytest.mark.parametrize("mb, m, target_gib", [(8, 4, 60), (16, 2, 70), (6, 8, 50), (12, 1, 200)])
def test_smaller_micro_batch_bisection_equals_the_linear_search(mb, m, target_gib):
    p = ParallelSpec(tp=8, pp=4, dp=2, sp=True)
    led = build_ledger(model("llama3-70b"), p, TrainSpec(micro_batch=mb, seq=4096, micro_batches=m),
                       hardware=gpu("h100"))
    assert smaller_micro_batch(led, target_gib << 30) == _linear(led, target_gib << 30)


def test_smaller_micro_batch_of_1024_builds_a_logarithmic_number_of_ledgers(monkeypatch):
    calls = []
    real = bandwidth._alternative
    monkeypatch.setattr(bandwidth, "_alternative", lambda *a: calls.append(a[1]) or real(*a))
    led = build_ledger(model("llama3-8b"), ParallelSpec(tp=8, sp=True),
                       TrainSpec(micro_batch=1024, seq=4096, micro_batches=8), hardware=gpu("h100"))
    alt = smaller_micro_batch(led, 80 << 30)
    assert len(calls) <= 12
    assert isinstance(alt, MicroBatchAlternative) and alt.micro_batch < 1024


def test_bounded_json_refuses_deep_nesting_huge_and_special_files_before_parsing(tmp_path):
    from memledger import safe_json
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SpecError, match="^config: JSON nests deeper than 64 levels"):
        safe_json.load_file(deep, "config")
    with pytest.raises(SpecError, match="is not a regular file"):
        safe_json.load_file("/dev/zero", "config")
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"a": "x" * (5 << 20)}))
    with pytest.raises(SpecError, match="larger than 4,194,304 bytes"):
        safe_json.load_file(big, "config")
    text = json.dumps({"a": "[" * 100})  # brackets inside strings do not count
    assert safe_json.loads(text, "config") == {"a": "[" * 100}
    with pytest.raises(SpecError, match="^config: the path is empty"):
        safe_json.load_file("", "config")


def test_the_importer_refuses_a_layer_list_longer_than_any_model_before_walking_it():
    cfg = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
           "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
           "intermediate_size": 6144, "vocab_size": 151936, "num_experts": 128,
           "num_experts_per_tok": 8, "moe_intermediate_size": 768,
           "mlp_only_layers": list(range(100_000))}
    with pytest.raises(SpecError, match="^mlp_only_layers: has 100,000 entries"):
        from_hf_config(cfg)


def test_validation_page_paths_are_relative_to_the_project(tmp_path):
    from memledger.views.validation.data import ROOT, load_results, shown_path
    assert shown_path(ROOT / "validation") == "validation"
    outside = load_results(tmp_path / "nowhere")
    assert str(tmp_path) not in " ".join(outside.problems)
    assert "…/nowhere" in outside.problems[0]


def test_the_bounds_table_in_the_docs_is_the_code_s():
    from pathlib import Path

    from memledger.specs.bounds import table
    doc = (Path(__file__).resolve().parents[1] / "docs/hardening.md").read_text()
    for key, limit, reason in table():
        assert f"| `{key}` | {limit:,} | {reason} |" in doc, key


def test_first_k_dense_replace_above_the_layer_count_is_an_error_not_an_all_dense_model():
    import json as _json
    from pathlib import Path
    cfg = _json.loads((Path(__file__).parent / "fixtures/hf/DeepSeek-V3.json").read_text())
    with pytest.raises(SpecError, match="^first_k_dense_replace: 62 exceeds num_hidden_layers=61"):
        from_hf_config({**cfg, "first_k_dense_replace": 62})
    assert from_hf_config({**cfg, "first_k_dense_replace": 61}).n_moe_layers == 0  # all dense: said so
