"""Every model preset opens the dashboard on the layout its authors published (or one that
fits), and a configuration that does not fit says what would."""
from dataclasses import replace

import pytest

from conftest import figures
from memledger.model.presets import MODELS
from memledger.presets.layouts import START
from memledger.units import GIB
from memledger.views.compute import ledger_for
from memledger.views.ledger.fixes import fixes, gpus_needed
from memledger.views.options import problem
from memledger.views.state import DEFAULT, hardware, load_model, start_of

LEDGER = "pages/ledger.py"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_preset_starts_from_a_valid_layout_that_fits_an_h100(name):
    cfg, sentence = start_of(name, DEFAULT)
    m = load_model(name)
    assert problem(m, cfg) is None
    assert ledger_for(m, cfg).peak.peak_total_bytes <= hardware(cfg).hbm_bytes
    assert sentence.startswith(MODELS[name].name) and START[name].source in sentence


def test_published_starts_name_their_source():
    published = {k for k, v in START.items() if v.published}
    assert {"deepseek-v3", "llama3.1-405b", "korthikanti-22b"} <= published
    assert all("arXiv" in START[k].source for k in published)


def test_deepseek_v3_on_the_default_layout_is_offered_its_published_layout():
    cfg = replace(DEFAULT, model="deepseek-v3")
    m = load_model("deepseek-v3")
    assert ledger_for(m, cfg).peak.peak_total_bytes > 1000 * GIB  # over by more than 1 TiB
    (first, *_) = fixes(m, cfg)
    assert first.changes["ep"] == 64 and first.changes["pp"] == 16
    assert ledger_for(m, replace(cfg, **first.changes)).peak.peak_total_bytes == first.peak_bytes
    assert gpus_needed(m, cfg) == 145  # 671 B params × 18 B / (79.6 − 0.6) GiB, rounded up


def test_a_single_setting_that_fits_is_offered_first_after_the_start():
    cfg = replace(DEFAULT, model="llama3-70b", zero=0, tp=2, pp=2, world=64)
    m = load_model("llama3-70b")
    if ledger_for(m, cfg).peak.peak_total_bytes <= hardware(cfg).hbm_bytes:
        pytest.skip("fits already")
    offered = fixes(m, cfg)
    assert offered and all(f.peak_bytes <= hardware(cfg).hbm_bytes for f in offered)
    assert offered[0].label.startswith("Llama-3 70B's start layout") or "ZeRO" in offered[0].label


def test_the_over_verdict_offers_a_one_click_change_that_fits(app_test):
    at = app_test(LEDGER, "model=deepseek-v3").run()
    assert not at.exception and "Over by" in at.error[0].value
    assert "at least **145 GPUs**" in at.markdown[0].value
    at.button(key="fix_0").click().run()
    assert "Fits" in at.success[0].value
    assert at.query_params["ep"] == "64" and at.query_params["world"] == "2048"


def test_choosing_a_preset_in_the_sidebar_applies_its_start_layout(app_test):
    at = app_test(LEDGER).run()
    at.selectbox(key="sb_model").set_value("llama3.1-405b").run()
    assert not at.exception
    assert "layout its authors published" in at.info[0].value
    assert at.query_params["world"] == "16384" and at.query_params["seq"] == "8192"
    assert "Fits" in at.success[0].value
    assert "tp 8 · pp 16" in figures(at)[0]["layout"]["title"]["subtitle"]["text"]


def test_an_hsdp_layout_that_does_not_fit_is_offered_one_shard_group_once():
    """Llama-3 70B at ZeRO-3 over 64 GPUs as 8 HSDP copies of 8 does not fit an H100 (174 GiB);
    sharding over all 64 does (38 GiB), and is offered once, before the only other one-setting
    changes that fit (the 8-way shards' optimizer, or all three rows, offloaded to the CPU);
    doubling PP or TP keeps the 8 copies, which still divide the halved dp."""
    m = load_model("llama3-70b")
    cfg = replace(DEFAULT, model="llama3-70b", world=64, tp=1, pp=1, zero=3, dp_replicate=8,
                  mb=1, seq=4096, m=1, recompute="full")
    assert ledger_for(m, cfg).peak.peak_total_bytes > 170 * GIB
    offered = fixes(m, cfg)
    assert [f.changes for f in offered] == [{"dp_replicate": 1}, {"offload": "optimizer"},
                                            {"offload": "params"}]
    assert offered[0].peak_bytes == ledger_for(m, replace(cfg, dp_replicate=1)).peak.peak_total_bytes
    assert offered[0].peak_bytes < 40 * GIB
    from memledger.views.ledger.fixes import _candidates
    doubled = {label.split()[0]: c for label, c in _candidates(m, cfg)}
    assert doubled["PP"] == {"pp": 2, "dp_replicate": 8} and doubled["TP"] == {"tp": 2,
                                                                               "dp_replicate": 8}
