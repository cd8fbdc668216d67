"""The Planner page under Streamlit's AppTest: the shared sidebar gives model, GPU, world size,
sequence and precision; the planner's own inputs are page parameters. Widgets drive the table
and the URL, the URL drives the widgets, bad URL values are errors, not exceptions."""
import re
from dataclasses import replace
from urllib.parse import parse_qsl

import pytest

from conftest import figures
from memledger import build_ledger, gpu, model
from memledger.planner import Constraints, PlanSpec, plan
from memledger.planner.answer.groups import top_groups
from memledger.views.planner.charts import ledger_query
from memledger.views.planner.state import parse_worlds
from memledger.views.state import BadValue

PAGE = "pages/planner.py"


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def link(at) -> dict:
    """The query of the 'open it on the Ledger page' link."""
    text = next(m.value for m in at.markdown if "Ledger page" in m.value)
    return dict(parse_qsl(re.search(r"\(ledger\?([^)]*)\)", text).group(1)))


def test_renders_with_the_sidebar_defaults_a_chart_a_top_20_table_and_a_ledger_link(app_test):
    at = ok(app_test(PAGE).run())
    assert at.error == [] and len(figures(at)) == 2  # peak vs time, the chosen row's step
    table = at.dataframe[0].value
    ranking = list(zip(table["est. s/step"], table["peak GiB"]))
    assert len(table) == 20 and ranking == sorted(ranking)  # equal times: more headroom first
    assert table["why it ranks here"].iloc[0].startswith("fastest")
    # the global batch is the sidebar's: dp 2 × 8 micro-batches × micro-batch size 1
    expected = plan(PlanSpec(model=model("llama3-70b"), hardware=gpu("h100"), worlds=(64,),
                             seq=4096, global_batch=16, gpus_per_node=8))
    best = expected.rows([top_groups(expected, 1)[0][0]])[0]
    assert table["peak GiB"].iloc[0] == pytest.approx(best["peak_bytes"] / 2**30)
    assert link(at) == ledger_query(expected, best, "llama3-70b", "h100")  # the top row's link
    assert at.query_params == {}  # all defaults: nothing in the URL
    assert at.code[0].value == "http://localhost:8501/"  # the share link


def test_a_changed_widget_changes_the_table_and_the_query_params(app_test):
    at = ok(app_test(PAGE).run())
    before = at.dataframe[0].value
    at.selectbox(key="pg_fix_zero").set_value("3").run()
    after = ok(at).dataframe[0].value
    assert set(after["zero"]) == {3} and not before.equals(after)
    assert at.query_params == {"fix_zero": "3"}
    at.number_input(key="pg_fix_tp").set_value(2).run()
    assert set(ok(at).dataframe[0].value["tp"]) == {2}
    assert at.query_params == {"fix_zero": "3", "fix_tp": "2"}


def test_the_sidebar_model_and_world_size_drive_the_search(app_test):
    at = ok(app_test(PAGE).run())
    at.selectbox(key="sb_model").set_value("mixtral-8x7b").run()
    ok(at)
    assert "Mixtral" in figures(at)[0]["layout"]["title"]["text"]
    at.number_input(key="sb_world").set_value(128).run()
    assert set(ok(at).dataframe[0].value["world"]) == {128}
    at.text_input(key="pg_worlds").set_value("16, 32,16").run()
    assert set(ok(at).dataframe[0].value["world"]) <= {16, 32}
    assert at.query_params["worlds"] == "16,32" and at.query_params["world"] == "128"


def test_query_params_set_every_input_and_round_trip(app_test):
    query = {"model": "mixtral-8x7b", "gpu": "h200", "seq": "8192", "worlds": "16", "gb": "32",
             "fix_recompute": "full", "max_vpp": "2", "top": "5", "row": "3"}
    at = ok(app_test(PAGE, "&".join(f"{k}={v}" for k, v in query.items())).run())
    assert at.error == []
    table = at.dataframe[0].value
    assert len(table) == 5 and set(table["recompute"]) == {"full"}
    assert table["vpp"].max() <= 2
    assert {k: at.query_params[k] for k in query} == query
    expected = plan(PlanSpec(model=model("mixtral-8x7b"), hardware=gpu("h200"), worlds=(16,),
                             seq=8192, global_batch=32, gpus_per_node=8,
                             constraints=Constraints(recompute="full", max_vpp=2)))
    third = expected.rows([g[0] for g in top_groups(expected, 5)])[2]
    assert table["peak GiB"].iloc[2] == pytest.approx(third["peak_bytes"] / 2**30)
    assert link(at) == ledger_query(expected, third, "mixtral-8x7b", "h200")


@pytest.mark.parametrize("query,key", [("seq=abc", "seq"), ("model=gpt5", "model"),
                                       ("fix_zero=7", "fix_zero"), ("worlds=x,8", "worlds"),
                                       ("gb=-3", "gb"), ("row=0", "row")])
def test_bad_query_values_give_an_error_not_an_exception(app_test, query, key):
    at = ok(app_test(PAGE, query).run())
    assert any(f"`{key}=" in e.value for e in at.error)
    assert len(at.dataframe[0].value) == 20  # falls back to the default and plans


def test_a_typed_world_list_that_is_not_a_list_is_an_error(app_test):
    at = ok(app_test(PAGE).run())
    at.text_input(key="pg_worlds").set_value("64,lots").run()
    assert any("worlds" in e.value for e in ok(at).error) and not at.dataframe


def test_an_impossible_request_shows_the_reason(app_test):
    at = ok(app_test(PAGE, "model=llama3.1-405b&worlds=1&gb=8").run())
    assert any("nothing fits" in w.value and "GPUs of this kind" in w.value for w in at.warning)


def test_world_lists_are_spelt_one_way():
    assert parse_worlds(" 64, 128,64 ") == "64,128" and parse_worlds("") == ""
    for bad in ("x", "0", "1," * 17, "-8"):
        with pytest.raises(BadValue):
            parse_worlds(bad)


def test_deepseek_v3_table_shows_distinct_layouts_in_plain_words(app_test):
    """Issue 12: near-duplicates (vpp × recompute) folded, no None cells, micro-batch size and
    count named, equal shown times ranked by headroom."""
    at = ok(app_test(PAGE, "model=deepseek-v3&world=2048").run())
    table = at.dataframe[0].value
    layout = ["world", "tp", "pp", "ep", "etp", "cp", "dp", "schedule", "zero",
              "micro-batch size"]
    assert len(table) == 20 and not table.duplicated(subset=layout).any()
    assert table["similar"].iloc[0].startswith("+") and "vpp" in table["similar"].iloc[0]
    assert not table.isna().any().any() and not (table.astype(str) == "None").any().any()
    ranking = list(zip(table["est. s/step"], table["peak GiB"]))
    assert ranking == sorted(ranking)
    text = next(m.value for m in at.markdown if "Ledger page" in m.value)
    assert "micro-batch size 1 × " in text and " micro-batches · " in text
    y = figures(at)[0]["layout"]["yaxis"]
    assert y["type"] == "log" and all(t.endswith(" s") for t in y["ticktext"])


def test_the_framework_decides_sequence_parallelism_and_the_ledger_link_follows(app_test):
    """megatron-2021 had no sequence parallelism: the plan's peaks are the ledger's without
    it (higher at tp > 1) and the 'open it on the Ledger page' link carries sp=0."""
    at = ok(app_test(PAGE, "fix_tp=4&fix_recompute=full&top=5").run())
    core = at.dataframe[0].value
    assert link(at)["tp"] == "4" and link(at).get("sp", "1") != "0"
    at.selectbox(key="pg_framework").set_value("megatron-2021").run()
    old = ok(at).dataframe[0].value
    assert at.query_params["framework"] == "megatron-2021"
    assert link(at)["sp"] == "0"
    assert len(core) and len(old)
    expected = plan(PlanSpec(model=model("llama3-70b"), hardware=gpu("h100"), worlds=(64,),
                             seq=4096, global_batch=16, gpus_per_node=8,
                             framework="megatron-2021",
                             constraints=Constraints(tp=4, recompute="full")))
    best = expected.rows([top_groups(expected, 1)[0][0]])[0]
    assert best["sp"] is False
    assert old["peak GiB"].iloc[0] == pytest.approx(best["peak_bytes"] / 2**30)
    p, t = expected.specs(best)  # the same configuration with SP holds less (tp = 4)
    assert build_ledger(expected.spec.model, replace(p, sp=True), t,
                        expected.spec.runtime).peak.peak_total_bytes < best["peak_bytes"]


def test_the_track_record_is_built_only_when_opened_and_shows_what_the_cli_prints(app_test):
    """The model's record on published trainings (planner.answer.reference.report, the rows
    `memledger reference` prints): closed by default and then not built; open, one table of
    published trainings and one of the paper's layout comparisons."""
    from memledger.views.planner.track import record
    at = ok(app_test(PAGE).run())
    assert len(at.dataframe) == 1  # the top configurations only
    at.session_state["track_open"] = True
    at = ok(at.run(timeout=120))
    runs, figs = at.dataframe[1].value, at.dataframe[2].value
    rec = record()  # the page's own (process-wide) report: computed once for both
    want = next(r for r in rec["runs"] if r["name"] == "Megatron-LM GPT 1.7B")
    row = runs[runs["published training"] == "Megatron-LM GPT 1.7B"].iloc[0]
    assert (row["configuration rank"], row["of configurations"], row["fits"]) == \
        (want["rank"], want["n_fits"], "yes")
    assert (row["layout rank"], row["of layouts"]) == (want["layout_rank"], want["n_layouts"])
    assert row["fastest 10 %"] == "yes" and row["step vs fastest %"] == 0
    by_name = {r["name"]: r for r in rec["runs"]}
    assert [("yes" if by_name[n]["in_fastest_tenth"] else "no") for n in
            runs["published training"]] == list(runs["fastest 10 %"])
    assert row["published TFLOP/s"] == 137
    assert row["predicted TFLOP/s"] == pytest.approx(want["predicted_tflops_per_gpu"], abs=0.05)
    assert len(runs) == len(rec["runs"]) and len(figs) == sum(len(f["batches"])
                                                              for f in rec["figures"])
    fig16 = figs[figs["comparison"].str.startswith("Fig. 16")].set_index("batch")
    assert fig16.loc[128, "same order"] == "no" and fig16.loc[512, "same order"] == "yes"
    assert fig16.loc[128, "predicted TFLOP/s per GPU"].startswith("mb1 ")


def test_only_the_page_that_plans_starts_loading_the_compiled_pass(app_test, monkeypatch):
    """The compiled pass's first load (~2.5 s of compiling on a fresh machine, holding the GIL)
    is not put on another page's first draw; the Planner page starts it once."""
    from memledger.planner.sweep import fused
    from memledger.views import frame
    calls = []
    monkeypatch.setattr(fused, "warm", lambda: calls.append(1))
    frame._start_planner_pass.clear()
    ok(app_test("pages/ledger.py").run())
    assert calls == []
    ok(app_test(PAGE).run())
    assert calls == [1]
    frame._start_planner_pass.clear()


README_JOB = "model=deepseek-v3&gpu=h100&world=2048&seq=4096&gb=15360"


def test_the_readmes_deepseek_v3_job_is_searched_and_agrees_with_the_cli(app_test, capsys):
    """Issue 32 #1: the README's headline job (24 M configurations, every axis open) is within
    the per-request budget, and the page ranks what `memledger plan` prints."""
    import json

    from memledger.cli import main
    at = ok(app_test(PAGE, README_JOB).run())
    assert at.error == []
    table = at.dataframe[0].value
    assert len(table) == 20
    assert main(["plan", "--model", "deepseek-v3", "--gpu", "h100", "--world", "2048", "--seq",
                 "4096", "--global-batch", "15360", "--top", "10", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert int(at.metric[1].value.replace(",", "")) == cli["counts"]["evaluated"]
    first = cli["configurations"][0]  # the page folds recompute variants within 5 %
    for axis in ("tp", "pp", "ep", "etp", "cp", "dp", "schedule", "zero"):
        assert table[axis].iloc[0] == first[axis], axis
    assert table["est. s/step"].iloc[0] == pytest.approx(first["seconds"], abs=0.05)  # shown to 3 digits


def test_an_over_budget_search_names_the_constraints_and_narrows_in_one_click(app_test):
    """Two world sizes of DeepSeek-V3 are 50 M configurations: the refusal names the
    constraints (not the world list alone) and each offered button lands within the budget."""
    at = ok(app_test(PAGE, README_JOB + "&worlds=2048,4096").run())
    assert at.error[0].value.startswith("constraints:") and "fix tp, pp or ep" in at.error[0].value
    labels = [b.label for b in at.button]
    assert any(lab.startswith("tp = 8 (") for lab in labels), labels
    at.button(key="narrow_fix_tp").click().run()
    assert ok(at).error == [] and set(at.dataframe[0].value["tp"]) == {8}
    assert at.query_params["fix_tp"] == "8"


def test_the_global_batch_follows_the_sidebar_and_a_too_small_one_is_named(app_test):
    """Issue 32 #2: no gb in the link = the sidebar's dp × micro-batches × micro-batch (DeepSeek-V3's
    start layout on 2,048 GPUs: dp 128 × 32 × 1 = 4,096); a global batch below what the world
    can use says so."""
    from memledger.views.planner.state import batch_warning, global_batch
    from memledger.views.state import Config
    cfg = Config(model="deepseek-v3", world=2048, tp=1, pp=16, ep=64, m=32)
    assert global_batch(cfg, {"gb": 0, "worlds": ""}) == 128 * 32 == 4096
    assert batch_warning(cfg, {"gb": 0, "worlds": ""}) is None
    text = batch_warning(cfg, {"gb": 64, "worlds": ""})
    assert "Global batch 64 is smaller than 2,048 GPUs can use" in text and "≥ 32" in text
    at = ok(app_test(PAGE, "model=deepseek-v3&world=2048&pp=16&tp=1&ep=64&m=32&gb=64").run())
    assert any("Global batch 64 is smaller" in w.value for w in at.warning)
    at = ok(app_test(PAGE, "m=4&mb=2").run())  # 64 H100, tp 8 pp 4: dp 2 × 4 × 2
    assert any(c.value.startswith("Global batch: 16 sequences (the sidebar") for c in at.caption)
