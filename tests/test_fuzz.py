"""Fuzzing the two doors a stranger can open: the command line and a share link.

CLI: 1,600 seeded inputs over all five sub-commands (tests/cli_fuzz.py), each one hostile value
in an otherwise valid command: every one exits 0 or 2 (never a traceback), in under a second of
CPU, and every exit-2 message is one line naming the flag or config field it was given.
Config files: hypothesis over config.json field values, through the importer and the CLI.
Share links: hypothesis over link parameters through the page code that resolves them (parse,
repair, budget, ledger): only SpecError ever leaves it, in bounded time."""
import json
import time
from dataclasses import replace

import cli_fuzz
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memledger.errors import SpecError
from memledger.model.hf_config import from_hf_config
from memledger.presets import model
from memledger.views import budget
from memledger.views.compute import ledger_for
from memledger.views.model_codec import encode_model
from memledger.views.options import repair
from memledger.views.state import KEYS, load_model, parse_params

N_CLI, SEED = 1600, 14


@pytest.fixture(scope="module")
def cli_report():
    return cli_fuzz.fuzz(N_CLI, SEED)


def test_cli_fuzz_covers_every_subcommand(cli_report):
    s = cli_report.summary()
    assert s["inputs"] == N_CLI and min(s["by_command"].values()) >= N_CLI // 5
    assert s["exit_2"] > 1000 and s["exit_0"] > 50  # hostile values, some of them valid


def test_cli_fuzz_no_traceback_ever(cli_report):
    assert cli_report.tracebacks() == []


def test_cli_fuzz_every_input_answers_within_a_second(cli_report):
    assert [(o.argv, round(o.cpu_s, 2)) for o in cli_report.slow(1.0)] == []


def test_cli_fuzz_every_error_is_one_line_naming_its_field(cli_report):
    assert [(o.argv, o.err) for o in cli_report.unnamed()] == []
    assert [(o.argv, o.err) for o in cli_report.multi_line()] == []


VALUES = st.one_of(st.integers(-2**64, 2**64), st.sampled_from([0, -1, 10**9, 2**63, 999_999_999_989]),
                   st.text(max_size=20), st.none(), st.booleans(), st.floats(allow_nan=True),
                   st.lists(st.integers(-5, 10**6), max_size=50))
FIELDS = st.sampled_from(sorted(cli_fuzz.CONFIG_FIELDS))


@given(FIELDS, VALUES)
@settings(max_examples=300, deadline=None, derandomize=True)
def test_any_config_field_value_is_imported_or_rejected_naming_a_field(key, value):
    base = cli_fuzz.QWEN_MOE if key in cli_fuzz.MOE_ONLY else \
        cli_fuzz.DSV3 if key in cli_fuzz.DSV3_ONLY else cli_fuzz.LLAMA
    cfg = {**base, key: value}
    t0 = time.thread_time()  # this thread's CPU: other threads of the run do not count
    try:
        from_hf_config(json.loads(json.dumps(cfg)))
    except SpecError as e:
        assert e.field and e.message
    assert time.thread_time() - t0 < 0.5


LINK_VALUES = st.one_of(st.integers(-10, 2**64).map(str), st.sampled_from(
    ["0", "1", "2", "3", "1024", "262144", "4194304", "65536", "balanced", "even", "1,1,1",
     "interleaved", "dualpipe", "full", "fp32", "nan", "", "true", "spec:", "spec:eNoDAAAAAAE"]),
    st.text(max_size=12))


def _deep_model() -> str:
    return encode_model(replace(model("llama3-8b"), name="deep", n_layers=1280, vocab=2_621_440))


@given(st.dictionaries(st.sampled_from(KEYS), LINK_VALUES, max_size=8), st.booleans())
@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
def test_any_share_link_resolves_to_a_valid_ledger_or_an_error_in_bounded_time(params, deep):
    if deep:
        params = {**params, "model": _deep_model()}
    t0 = time.thread_time()
    cfg, issues = parse_params(params)
    m = load_model(cfg.model)
    cfg, _ = repair(m, cfg)
    try:
        budget.admit_ledgers(1, cfg.pp, "the Ledger page")
        led = ledger_for(m, cfg)
        assert led.peak.peak_total_bytes > 0
    except budget.OverBudget as e:
        assert e.field == "pp"
    assert time.thread_time() - t0 < 2.0
