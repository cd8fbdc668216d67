"""The Streamlit pages under AppTest: defaults render, every kind of widget changes the chart and
the URL, a share link reproduces the view, and bad links give errors, not exceptions."""
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from conftest import chart_numbers, figures
from memledger.units import GIB
from memledger.views.compute import ledger_for
from memledger.views.navigation import PAGES, available
from memledger.views.state import DEFAULT, KEYS, load_model, parse_params

LEDGER, STAIRS, WHERE = "pages/ledger.py", "pages/staircase.py", "pages/where.py"
ROOT = Path(__file__).resolve().parents[1]


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def opened(at, *expanders):
    """The AppTest with these lazy expanders open (their bodies are built only while open)."""
    for key in expanders:
        at.session_state[key] = True
    return at


def test_ledger_renders_with_defaults(app_test):
    at = ok(app_test(LEDGER).run())
    assert at.error == [] and "Fits" in at.success[0].value
    assert at.query_params == {}
    (fig,) = figures(at)
    assert sum(tr["x"][0] for tr in fig["data"]) == pytest.approx(
        ledger_for(load_model("llama3-70b"), parse_params({})[0]).peak.peak_total_bytes / GIB)
    assert [m.value for m in at.metric][:3] == ["70.6 B", "38.47 GiB", "79.6 GiB"]
    assert at.code[0].value == "http://localhost:8501/"  # defaults: a link without parameters


@pytest.mark.parametrize("kind,key,value,query", [
    ("select_slider", "sb_tp", 4, {"tp": "4"}),
    ("select_slider", "sb_pp", 8, {"pp": "8"}),
    ("select_slider", "sb_zero", 3, {"zero": "3"}),
    ("select_slider", "sb_dp_replicate", 2, {"dp_replicate": "2"}),  # dp 2: ZeRO-1 unsharded
    ("number_input", "sb_world", 128, {"world": "128"}),
    ("number_input", "sb_seq", 8192, {"seq": "8192"}),
    ("toggle", "sb_sp", False, {"sp": "0"}),
    ("selectbox", "sb_recompute", "full", {"recompute": "full"}),
    ("selectbox", "sb_precision", "mixed16", {"precision": "mixed16"}),
    ("selectbox", "sb_profile", "paper", {"profile": "paper"}),  # in the "More" expander
])
def test_each_kind_of_widget_changes_the_chart_and_the_url(app_test, kind, key, value, query):
    at = ok(opened(app_test(LEDGER), "more_open").run())
    before = chart_numbers(figures(at)[0])
    getattr(at, kind)(key=key).set_value(value).run()
    ok(at)
    assert at.query_params == query
    assert chart_numbers(figures(at)[0]) != before
    assert "?" + "&".join(f"{k}={v}" for k, v in query.items()) in at.code[0].value


def test_changing_the_gpu_moves_the_capacity_line_only(app_test):
    at = ok(app_test(LEDGER).run())
    before = figures(at)[0]
    at.selectbox(key="sb_gpu").set_value("h200").run()
    after = figures(ok(at))[0]
    assert at.query_params == {"gpu": "h200"}
    assert chart_numbers(after)[:6] == chart_numbers(before)[:6]
    assert after["layout"]["shapes"][0]["x0"] == pytest.approx(143771 / 1024)


def test_a_custom_gpu_from_the_sidebar_is_carried_by_the_link(app_test):
    """Issue 32 #6: choosing 'Custom GPU…' gives four inputs; a change is one `gpu` value in
    the link, and the capacity line follows it."""
    at = ok(app_test(LEDGER).run())
    at.selectbox(key="sb_gpu").set_value("custom:80,450,50,989").run()
    assert ok(at).query_params == {"gpu": "custom:80,450,50,989"}
    at.number_input(key="sb_custom_capacity").set_value(96).run()
    assert ok(at).query_params == {"gpu": "custom:96,450,50,989"}
    assert figures(at)[0]["layout"]["shapes"][0]["x0"] == pytest.approx(96)
    again = ok(app_test(LEDGER, "gpu=custom:96,450,50,989").run())
    assert again.number_input(key="sb_custom_capacity").value == 96
    assert figures(again)[0]["layout"]["shapes"][0]["x0"] == pytest.approx(96)


def test_a_new_model_keeps_a_valid_configuration(app_test):
    at = ok(app_test(LEDGER).run())
    at.selectbox(key="sb_model").set_value("deepseek-v3").run()
    ok(at)
    assert at.query_params["model"] == "deepseek-v3"
    assert "DeepSeek-V3" in figures(at)[0]["layout"]["title"]["text"]
    assert at.select_slider(key="sb_ep").options[-1] != "1"  # experts: ep is now offered
    assert at.query_params["ep"] == "64"  # the preset opens on its published layout
    at.select_slider(key="sb_ep").set_value(32).run()
    assert ok(at).query_params["ep"] == "32" and at.query_params["pp"] == "16"


def test_the_item_table_is_built_only_when_open(app_test):
    at = ok(app_test(LEDGER).run())
    assert len(at.dataframe) == 0
    assert any(e.label.startswith("Every item") for e in at.expander)


def _kinds(block) -> list[str]:
    out = []
    for child in getattr(block, "children", {}).values():
        out += [child.type] + _kinds(child)
    return out


def test_rarely_used_widgets_are_built_only_when_shown(app_test):
    """Import, the advanced training knobs and the downloads cost a re-render on every slider
    move (docs/drag-preview.md): closed, none of their widgets is sent."""
    at = ok(app_test(LEDGER).run())
    side, main = _kinds(at.sidebar), _kinds(at.main)
    assert "file_uploader" not in side and "text_area" not in side
    assert "download_button" not in main
    labels = {e.label for e in at.expander}
    assert "Import a Hugging Face model" in labels
    assert any(x.startswith("More: training loop, activation profile, attention kernel")
               for x in labels), labels
    keys = {w.key for w in at.sidebar.selectbox}
    assert not keys & {"sb_loop", "sb_profile", "sb_attention"}
    at.toggle(key="ledger_chart_dl").set_value(True).run()
    assert _kinds(ok(at).main).count("download_button") == 6


def _chart_place(at) -> int:
    return [c.type for c in at.main.children.values()].index("plotly_chart")


def test_the_chart_keeps_its_place_whatever_shows_above_it(app_test):
    """Elements that change place are remounted by the browser: link errors and notes go in the
    container above the chart, so a run with them and a run without put the chart in one place."""
    clean = ok(app_test(LEDGER).run())
    bad = ok(app_test(LEDGER, "tp=3&ep=notanumber").run())
    assert len(bad.error) >= 2
    assert _chart_place(bad) == _chart_place(clean)


def test_a_setting_whose_widget_is_hidden_keeps_its_value(app_test):
    at = ok(app_test(LEDGER, "profile=paper&attention=eager").run())
    before = chart_numbers(figures(at)[0])
    at.select_slider(key="sb_tp").set_value(4).run()
    assert ok(at).query_params == {"profile": "paper", "attention": "eager", "tp": "4"}
    assert chart_numbers(figures(at)[0]) != before
    opened(at, "more_open").run()
    assert ok(at).selectbox(key="sb_profile").value == "paper"
    assert at.selectbox(key="sb_attention").value == "eager"


def test_the_table_rank_is_a_page_parameter_and_a_link_with_it_opens_the_table(app_test):
    at = ok(app_test(LEDGER, "rank=1").run())
    assert at.selectbox(key="pg_rank").value == 1 and len(at.dataframe) == 1
    at.selectbox(key="pg_rank").set_value(2).run()
    assert ok(at).query_params == {"rank": "2"}
    assert at.dataframe[0].value["bytes"].sum() == ledger_for(
        load_model("llama3-70b"), parse_params({})[0]).ranks[2].peak_total_bytes


def test_a_share_link_reproduces_the_view(app_test):
    at = ok(app_test(LEDGER).run())
    at.selectbox(key="sb_model").set_value("mixtral-8x7b").run()
    at.select_slider(key="sb_ep").set_value(8).run()
    at.select_slider(key="sb_zero").set_value(2).run()
    at.number_input(key="sb_mb").set_value(2).run()
    ok(at)
    link = "&".join(f"{k}={v}" for k, v in at.query_params.items())
    fresh = ok(app_test(LEDGER, link).run())
    assert fresh.error == []
    assert figures(fresh)[0] == figures(at)[0]
    assert fresh.query_params == at.query_params


@pytest.mark.parametrize("query,bad", [
    ("tp=banana", "tp"),
    ("model=gpt-9", "model"),
    ("model=llama3-8b&tp=3", "tp"),  # 32 heads: tp=3 is not a divisor
    ("world=1000000000000", "world"),
    ("schedule=interleaved&vpp=1", "vpp"),
    ("model=spec:eNoDAAAAAAE", "model"),
    ("dp_replicate=two", "dp_replicate"),
    ("world=32&tp=1&pp=1&dp_replicate=3", "dp_replicate"),  # 3 does not divide dp 32
    ("rank=99", None),  # a stale table rank quietly shows the most loaded one
])
def test_a_bad_link_shows_an_error_and_falls_back(app_test, query, bad):
    at = ok(app_test(LEDGER, query).run())
    errors = [e.value for e in at.error if "Share link" in e.value]
    if bad is None:
        assert errors == []
    else:
        assert errors and f"`{bad}=" in errors[0]
    assert len(figures(at)) == 1
    cfg, issues = parse_params(at.query_params)
    assert issues == []  # the URL was rewritten to a valid configuration


def test_staircase_compares_schedules_side_by_side(app_test):
    at = ok(app_test(STAIRS).run())
    single = figures(at)[0]
    assert len({tr.get("xaxis", "x") for tr in single["data"]}) == 1
    at.toggle(key="pg_compare").set_value(True).run()
    fig = figures(ok(at))[0]
    assert at.query_params == {"compare": "1"}
    assert len({tr.get("xaxis", "x") for tr in fig["data"]}) == 4
    at.multiselect(key="pg_schedules").set_value(["gpipe", "1f1b"]).run()
    ok(at)
    assert at.query_params == {"compare": "1", "schedules": "gpipe,1f1b"}
    assert len({tr.get("xaxis", "x") for tr in figures(at)[0]["data"]}) == 2


@pytest.mark.parametrize("schedules", ["1f1b,warp", "gpipe,1f1b,interleaved,zb-h1,zb-v",
                                       "1f1b,1f1b", ""])
def test_staircase_link_with_a_bad_schedule_list(app_test, schedules):
    at = ok(app_test(STAIRS, f"compare=1&schedules={schedules}").run())
    assert any("`schedules=" in e.value for e in at.error)
    assert len(figures(at)) == 2  # the staircase (comparison fallback) and the step timeline


def test_staircase_page_draws_the_step_timeline_of_the_chosen_rank_and_loop(app_test):
    at = ok(app_test(STAIRS, "loop=pytorch").run())
    timeline = figures(at)[1]
    assert "loop pytorch" in timeline["layout"]["title"]["text"]
    assert {tr["name"] for tr in timeline["data"]} >= {"Gradients", "Activations"}
    assert any(tr["name"].startswith("peak ") for tr in timeline["data"])
    at.selectbox(key="pg_rank").set_value(3).run()
    ok(at)
    assert at.query_params == {"loop": "pytorch", "rank": "3"}
    assert "pp rank 3" in figures(at)[1]["layout"]["title"]["text"]


def test_staircase_pp_slider_redraws_the_ranks(app_test):
    at = ok(app_test(STAIRS).run())
    at.select_slider(key="sb_pp").set_value(8).run()
    acts = next(tr for tr in figures(ok(at))[0]["data"] if tr["name"] == "Activations")
    assert acts["x"] == list(range(8))


def test_where_memory_goes_shows_the_seed_numbers(app_test):
    at = ok(app_test(WHERE).run())
    assert len(figures(at)) == 3
    at.radio(key="pg_size").set_value("seed-7b").run()
    strip = figures(ok(at))[0]
    assert at.query_params == {"size": "seed-7b"}
    assert f"{sum(tr['x'][0] for tr in strip['data']):.1f}" == "104.3"
    fresh = ok(app_test(WHERE, "size=seed-70b").run())
    assert "1,043.1 GiB" in figures(fresh)[0]["layout"]["title"]["text"]
    assert "10 checkpoints ≈ 13%" in str(figures(fresh)[2]["data"])


def test_where_memory_goes_follows_the_sidebar(app_test):
    at = ok(app_test(WHERE).run())
    before = chart_numbers(figures(at)[1])
    at.number_input(key="sb_world").set_value(512).run()  # ZeRO shards over more GPUs
    assert chart_numbers(figures(ok(at))[1]) != before
    assert at.query_params == {"world": "512"}


def test_app_registers_existing_pages_and_keeps_settings_across_pages(app_test):
    at = ok(app_test("app.py").run())
    at.select_slider(key="sb_tp").set_value(4).run()
    at.switch_page(STAIRS).run()
    ok(at)
    assert "tp 4" in figures(at)[0]["layout"]["title"]["subtitle"]["text"]
    assert at.query_params.get("tp") == "4"


def test_navigation_lists_only_pages_that_exist(tmp_path):
    (tmp_path / "pages").mkdir()
    for p in PAGES[:2] + PAGES[4:5]:
        (tmp_path / p.file).write_text("")
    assert [p.url_path for p in available(tmp_path)] == ["ledger", "staircase", "planner"]
    assert [p.file for p in available(ROOT)][:3] == [LEDGER, STAIRS, WHERE]


def test_an_imported_hf_config_travels_in_the_link(app_test, monkeypatch):
    import json
    import sys
    import types
    from dataclasses import replace

    from memledger.presets import MODELS

    def from_hf_config(cfg, name=None):  # stands in for the importer branch's function
        if "hidden_size" not in cfg:
            raise KeyError("hidden_size")
        return replace(MODELS["llama3-8b"], name="my-llama", n_layers=cfg["num_hidden_layers"])

    monkeypatch.setitem(sys.modules, "memledger.model.hf_config",
                        types.SimpleNamespace(from_hf_config=from_hf_config))
    at = ok(opened(app_test(LEDGER), "import_open").run())
    at.text_area(key="import_text").set_value(json.dumps({"hidden_size": 4096,
                                                          "num_hidden_layers": 24}))
    at.button(key="import_go").click().run()
    ok(at)
    assert at.query_params["model"].startswith("spec:")
    assert "my-llama" in figures(at)[0]["layout"]["title"]["text"]
    link = "&".join(f"{k}={v}" for k, v in at.query_params.items())
    fresh = ok(app_test(LEDGER, link).run())
    assert figures(fresh)[0] == figures(at)[0] and fresh.error == []

    at.text_area(key="import_text").set_value('{"num_hidden_layers": 2}')
    at.button(key="import_go").click().run()
    assert any("Could not import" in e.value for e in ok(at).error)
    at.text_area(key="import_text").set_value("not json")
    at.button(key="import_go").click().run()
    assert any("Could not import" in e.value for e in ok(at).error)


def test_import_without_the_importer_module_says_so(app_test, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "memledger.model.hf_config", None)  # import raises ImportError
    at = ok(opened(app_test(LEDGER), "import_open").run())
    at.text_area(key="import_text").set_value('{"hidden_size": 8}')
    at.button(key="import_go").click().run()
    assert any("memledger.model.hf_config" in e.value.replace("\\", "") for e in ok(at).error)
    assert at.query_params == {}


def test_link_errors_show_the_core_message_literally(app_test):
    """The core writes tp*pp*cp; unescaped, Markdown would italicise 'pp'."""
    at = ok(app_test(LEDGER, "model=llama3-8b&tp=3").run())
    assert r"tp\*pp\*cp=12" in at.error[0].value


def test_a_world_size_the_degrees_do_not_divide_moves_them_with_a_notice(app_test):
    at = ok(app_test(LEDGER).run())
    at.number_input(key="sb_world").set_value(100).run()
    ok(at)
    assert at.query_params["world"] == "100" and at.query_params["tp"] == "1"
    assert any("tp 8 → 1" in t.value for t in at.toast)
    assert "dp 25" in figures(at)[0]["layout"]["title"]["subtitle"]["text"]


NASTY = ["", "0", "-1", "3", "7", "64", "1e3", "999999999999", "banana", "<b>", "`", "$x$", "1,2",
         "0,0,0,0", "interleaved", "dualpipe", "eager", "paper", "every-k", "fp8", "deepseek-v3",
         "llama3.2-1b", "spec:AAAA", "off", "gpipe,1f1b,zb-v,dualpipev,zb-h1"]


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(page=hst.sampled_from([LEDGER, STAIRS, WHERE]),
       query=hst.dictionaries(hst.sampled_from(list(KEYS) + ["rank", "compare", "schedules",
                                                              "size"]),
                              hst.sampled_from(NASTY), min_size=1, max_size=8))
def test_no_link_crashes_a_page(app_test, page, query):
    at = app_test(page, urlencode(query)).run()
    ok(at)
    assert len(figures(at)) >= 1
    assert parse_params(at.query_params)[1] == []  # the rewritten link is clean


def test_the_share_popover_says_when_its_link_only_works_on_this_machine(app_test):
    from memledger.views.ui import link_is_local
    assert link_is_local("http://localhost:8501/?tp=4") and link_is_local("http://127.0.0.1:80/")
    assert not link_is_local("https://memledger.example.com/ledger?tp=4")
    at = ok(app_test(LEDGER).run())  # AppTest's address is localhost
    assert any("opens only here" in w.value for w in at.warning)


def test_staircase_splits_a_v_by_stage_and_names_the_loss_rank(app_test):
    at = ok(app_test(STAIRS, "schedule=zb-v&m=16").run())
    names = [tr["name"] for tr in figures(at)[0]["data"]]
    assert "Activations · down the V" in names and "Activations · back up the V" in names
    assert any("loss on pp rank 0" in c.value for c in at.caption)


def test_staircase_says_which_engine_runs_a_micro_batch_count(app_test):
    at = ok(app_test(STAIRS, "m=2").run())  # 1F1B, pp 4: Megatron-Core runs it, PyTorch not
    assert any("Megatron-Core runs them" in i.value and "PyTorch" in i.value for i in at.info)


def test_staircase_link_below_dualpipev_minimum_names_it_and_repairs_m(app_test):
    at = ok(app_test(STAIRS, "schedule=dualpipev&m=4").run())
    assert any("2·pp = 8" in e.value and "`m=8`" in e.value for e in at.error)


def test_a_bad_link_is_blamed_only_for_what_it_contains(app_test):
    at = ok(app_test(LEDGER, "model=gpt5&tp=banana&world=63").run())
    blamed = [e.value.split("`")[1].split("=")[0] for e in at.error if e.value.startswith("Share link")]
    assert sorted(blamed) == ["model", "tp"]  # world=63 is valid; pp and sp were not in the link
    assert not any("`pp=4`" in e.value or "`sp=1`" in e.value for e in at.error)
    (tp,) = [e.value for e in at.error if "`tp=banana`" in e.value]
    assert "Using `tp=1`" in tp  # what is really used after the layout was repaired


def test_numbers_over_a_thousand_carry_separators():
    """Issue 32 #12: 'Over by 11,231.60 GiB', not 'Over by 11231.60 GiB'."""
    from memledger.views.figures import Fit
    gib = 2**30
    over = Fit(False, 0, int(11_311.2 * gib), int(79.6 * gib))
    assert over.sentence("H100").startswith("Over by 11,231.60 GiB on H100")


def test_the_staircase_rank_widget_leaves_no_session_state_warning(app_test):
    """Issue 32 #12: a widget given both a default (index=) and a Session State value makes
    Streamlit log a warning for every run; the rank picker gets its value one way only."""
    import logging
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    log = logging.getLogger("streamlit.elements.lib.policies")
    log.addHandler(handler)
    try:
        at = ok(app_test("pages/staircase.py", "rank=2").run())
        assert at.selectbox(key="pg_rank").value == 2
        at.selectbox(key="pg_rank").set_value(1).run()
        assert ok(at).query_params["rank"] == "1"
    finally:
        log.removeHandler(handler)
    assert not [m for m in seen if "pg_rank" in m], seen


def test_where_memory_goes_says_the_layout_does_not_apply_and_names_no_dtype_per_legend(app_test):
    """Issue 32 #9: the page is one GPU's textbook ledger (no tp / pp): it says so, and the
    techniques legend does not call the fp32 column's parameters bf16."""
    at = ok(app_test(WHERE, "tp=4&pp=2").run())
    assert any("tp, pp, ep and cp do not apply" in c.value for c in at.caption)
    names = {d["name"] for d in figures(at)[1]["data"]}
    assert "Parameters" in names and not any("bf16" in n for n in names)


def test_ab_pins_a_layout_and_shows_both_ledgers_row_by_row_through_the_link(app_test):
    """Issue 32 #7: pin A, change the sidebar (B), see both with B − A per row and both
    staircases; the link carries A, and a bad pinned value is refused with its reason."""
    from memledger.views import compare
    at = ok(app_test(LEDGER).run())
    at.button(key="ab_pin").click().run()
    at.select_slider(key="sb_tp").set_value(4).run()
    assert ok(at).query_params == {"tp": "4", "pin": "model=llama3-70b"}
    table = at.dataframe[-1].value
    a = ledger_for(load_model("llama3-70b"), DEFAULT)
    b = ledger_for(load_model("llama3-70b"), replace(DEFAULT, tp=4))
    assert list(table["B − A (bytes)"]) == list(compare.diff_table(a, b)["B − A (bytes)"])
    assert table["B − A (bytes)"].iloc[-1] == b.peak.peak_total_bytes - a.peak.peak_total_bytes
    ab = next(f for f in figures(at) if f["layout"]["title"]["text"].startswith("A/B"))
    assert [t["name"][:2] for t in ab["data"]] == ["A:", "B:"]
    again = ok(app_test(LEDGER, "tp=4&pin=model%3Dllama3-70b").run())
    assert list(again.dataframe[-1].value["B − A (bytes)"]) == list(table["B − A (bytes)"])
    bad = ok(app_test(LEDGER, "pin=model%3Dllama3-70b%26tp%3Dbanana").run())
    assert any("`pin=" in e.value and "tp" in e.value for e in bad.error)


def test_a_named_loop_brings_its_model_codes_profile(app_test):
    """As the CLI's --profile auto: picking torchtitan sets the hf profile (its plain-PyTorch
    modules), carried by the link; the profile can still be changed after."""
    at = ok(opened(app_test(LEDGER), "more_open").run())
    at.selectbox(key="sb_loop").set_value("torchtitan").run()
    assert ok(at).query_params.get("profile") == "hf" and at.query_params.get("loop") == "torchtitan"
    # the default 64 GPUs at tp 8 pp 4 leave dp 2: torchtitan shards with FSDP2 (mixed precision)
    assert at.query_params.get("zero") == "3" and at.query_params.get("precision") == "fsdp2-mixed"
    at.selectbox(key="sb_profile").set_value("megatron").run()
    assert "profile" not in ok(at).query_params  # megatron is the default, so the link omits it
    assert any("profile megatron under loop torchtitan" in w.value for w in at.warning)


HSDP = "world=32&tp=1&pp=1&zero=3&dp_replicate=4"


def test_an_hsdp_link_opens_with_its_replicas_and_their_memory(app_test):
    """32 GPUs at tp 1 pp 1 (dp 32), ZeRO-3 over 4 copies of an 8-rank shard group: the widget,
    the caption, the chart's subtitle and bars, and the share link all carry the 4."""
    at = ok(app_test(LEDGER, HSDP).run())
    assert not [e.value for e in at.error if "Share link" in e.value]  # the verdict only (over)
    widget = at.select_slider(key="sb_dp_replicate")
    assert widget.value == 4 and list(widget.options) == ["1", "2", "4", "8", "16", "32"]
    assert any("ZeRO-3 shards over dp·cp/R = 32·1/4 = 8 ranks" in c.value for c in at.caption)
    (fig,) = figures(at)
    assert "dp 32 (4 HSDP replicas)" in fig["layout"]["title"]["subtitle"]["text"]
    cfg = parse_params(at.query_params)[0]
    assert cfg.dp_replicate == 4 and at.query_params["dp_replicate"] == "4"
    peak = sum(tr["x"][0] for tr in fig["data"])
    assert peak == pytest.approx(
        ledger_for(load_model("llama3-70b"), cfg).peak.peak_total_bytes / GIB)
    assert round(peak, 2) == 256.98 and "dp_replicate=4" in at.code[0].value
    widget.set_value(1).run()  # one shard group of 32 ranks: ZeRO-3's shards a quarter the size
    assert "dp_replicate" not in ok(at).query_params
    assert round(sum(tr["x"][0] for tr in figures(at)[0]["data"]), 2) == 140.49


def test_a_replica_count_that_does_not_divide_dp_is_named_and_switched_off(app_test):
    at = ok(app_test(LEDGER, "world=32&tp=1&pp=1&zero=3&dp_replicate=3").run())
    (err,) = [e.value.replace("\\", "") for e in at.error if "`dp_replicate=" in e.value]
    assert err == ("Share link: `dp_replicate=3`: not valid here: dp_replicate=3 must divide "
                   "dp=32 (HSDP: dp = dp_replicate x the shard group). Using `dp_replicate=1`.")
    assert at.select_slider(key="sb_dp_replicate").value == 1
    assert "dp_replicate" not in at.query_params and len(figures(at)) == 1


def test_torchtitan_with_only_replicas_runs_ddp(app_test):
    """dp 2 as 2 replicas of a 1-rank shard group: torchtitan does not shard (fsdp_enabled is
    dp_shard > 1 or cp > 1), so picking it leaves ZeRO-0, not ZeRO-3."""
    at = ok(opened(app_test(LEDGER, "dp_replicate=2"), "more_open").run())
    at.selectbox(key="sb_loop").set_value("torchtitan").run()
    assert ok(at).query_params.get("zero") == "0" and at.query_params["dp_replicate"] == "2"


def test_the_ab_legend_and_download_names_say_hsdp_only_when_it_is_on():
    from memledger.views.compare import describe
    from memledger.views.sync import Resolved
    from memledger.views.ui import stem
    hsdp = parse_params(dict(p.split("=") for p in HSDP.split("&")))[0]
    assert describe(hsdp) == ("32 × h100, tp 1 pp 1 ep 1 cp 1 ZeRO-3 (4 HSDP replicas), "
                              "mb 1 × 8, none")
    assert "HSDP" not in describe(DEFAULT)
    m = load_model("llama3-70b")
    assert stem(Resolved(hsdp, m, {}), "ledger") == \
        "memledger_ledger_llama3-70b_tp1_pp1_ep1_cp1_dp32_hsdp4_zero3_mb1x4096"
    assert "hsdp" not in stem(Resolved(DEFAULT, m, {}), "ledger")


def test_the_optimizer_step_in_backward_travels_in_the_link_and_moves_the_peak(app_test):
    """One GPU, 8B in bf16: the step in the backward frees the gradients the end-of-step update
    would hold (ledger.step_in_backward); on the default Megatron layout the link opens
    repaired to a layout that runs it (one stage, one micro-batch, on-demand gradients)."""
    one = "model=llama3-8b&world=1&tp=1&pp=1&m=1&loop=pytorch&precision=bf16&recompute=full"
    plain = ok(app_test(LEDGER, one).run())
    inb = ok(app_test(LEDGER, one + "&inbwd=1").run())
    assert inb.query_params["inbwd"] == "1" and inb.error == []
    total = lambda at: sum(tr["x"][0] for tr in figures(at)[0]["data"])  # noqa: E731 (GiB)
    assert total(inb) < total(plain) - 20
    fixed = ok(app_test(LEDGER, "inbwd=1").run())
    assert fixed.query_params["inbwd"] == "1" and fixed.query_params["pp"] == "1"
    assert parse_params(fixed.query_params)[1] == []


def test_torchtitans_cuda_graph_step_travels_in_the_link_and_keeps_the_gradients(app_test):
    """torchtitan 0.3 on FSDP 8: its CUDA-graph step (auto) keeps every sharded gradient all
    step, eager (graphs=off) frees them until the backward; "on" with PP, which torchtitan
    refuses, opens repaired."""
    tt = ("model=llama3-8b&world=8&tp=1&pp=1&m=1&zero=3&loop=torchtitan&recompute=op&seq=4096"
          "&precision=fsdp2-mixed")
    graph = ok(app_test(LEDGER, tt).run())
    eager = ok(app_test(LEDGER, tt + "&graphs=off").run())
    assert eager.query_params["graphs"] == "off" and eager.error == []
    total = lambda at: sum(tr["x"][0] for tr in figures(at)[0]["data"])  # noqa: E731 (GiB)
    assert total(graph) > total(eager) + 3  # 8B / 8 ranks: 3.74 GiB of fp32 gradients
    fixed = ok(app_test(LEDGER, tt.replace("pp=1", "pp=2").replace("m=1", "m=4")
                        + "&graphs=on").run())
    assert "graphs" not in fixed.query_params and fixed.query_params["pp"] == "2"
    assert any("graphs=on" in e.value and "pp=2" in e.value for e in fixed.error)
