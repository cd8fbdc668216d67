"""Chart, table and share-link builders for a Plan."""
import functools

import numpy as np
import pytest

from memledger import gpu, model
from memledger.planner import PlanSpec, plan
from memledger.planner.answer.groups import GROUP_AXES, NEAR, layout_rank, shown_seconds, top_groups
from memledger.views.planner.charts import (LEDGER_KEYS, _sample, describe_row, ledger_query,
                                            plan_scatter, seconds_ticks, top_csv, top_table)


def small_plan(**kw):
    return plan(PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8,), seq=8192,
                         global_batch=64, **kw))


def test_scatter_has_every_fitting_point_the_front_and_the_capacity_line():
    result = small_plan(headroom=0.1)
    fig = plan_scatter(result, selected=result.rows(result.top(1))[0])
    points = sum(len(t.x) for t in fig.data if t.name.startswith("recompute"))
    assert points == result.n_fits
    front = next(t for t in fig.data if t.name == "Pareto front")
    assert len(front.x) == len(result.pareto)
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    cap = result.spec.capacity_bytes / 2**30
    assert sorted(s.x0 for s in lines) == pytest.approx([cap * 0.9, cap])
    assert cap == pytest.approx(79.65, abs=0.01)
    assert "GiB" in fig.layout.xaxis.title.text


def test_scatter_samples_large_plans_but_keeps_the_front():
    result = small_plan()
    fig = plan_scatter(result, max_points=500)
    points = sum(len(t.x) for t in fig.data if t.name.startswith("recompute"))
    assert points < result.n_fits and points >= len(result.pareto)


def test_top_table_rows_are_group_representatives_ranked_by_shown_time_then_peak():
    result = small_plan()
    groups = top_groups(result, 10)
    table = top_table(result, 10, groups)
    reps = result.rows([g[0] for g in groups])
    assert list(table["tp"]) == [r["tp"] for r in reps]
    assert list(table["est. s/step"]) == list(shown_seconds([r["seconds"] for r in reps]))
    ranking = list(zip(table["est. s/step"], table["peak GiB"]))
    assert ranking == sorted(ranking)
    # llama3-8b on 8 GPUs has representatives whose times agree to the shown digits: the
    # one with more headroom comes first even where its exact time is a little longer
    ties = [i for i in range(1, len(table))
            if table["est. s/step"].iloc[i] == table["est. s/step"].iloc[i - 1]]
    assert ties and all(table["peak GiB"].iloc[i - 1] <= table["peak GiB"].iloc[i] for i in ties)


def test_a_layouts_rank_counts_the_layouts_whose_fastest_configuration_is_faster():
    """groups.layout_rank against the rows decoded one by one: one count per layout, none for
    the configuration's own knob settings (vpp, recompute)."""
    result = small_plan()
    rows = result.rows(np.arange(result.n_fits))
    best: dict = {}
    for r in rows:
        key = tuple(r[a] for a in GROUP_AXES)
        best[key] = min(best.get(key, np.inf), r["seconds"])
    for i in (0, result.n_fits // 3, result.n_fits - 1):
        mine = best[tuple(rows[i][a] for a in GROUP_AXES)]
        rank, n = layout_rank(result, i)
        assert n == len(best) < result.n_fits
        assert rank == 1 + sum(t < mine for t in best.values())
        assert rank <= 1 + int(np.count_nonzero(result.evaluated.seconds < rows[i]["seconds"]))


def test_shown_seconds_keep_three_significant_digits():
    assert list(shown_seconds([0.416257, 27.40140, 27.40247, 523.4, 0.0012345])) == \
        [0.416, 27.4, 27.4, 523.0, 0.00123]


def test_a_tie_in_shown_time_goes_to_the_smaller_peak_even_when_exactly_slower():
    result = deepseek_v3_2048()
    best = result.rows([top_groups(result, 1)[0][0]])[0]
    fastest = result.rows(result.top(1))[0]  # exact order: none, 5 µs faster, 0.5 GiB more
    assert fastest["seconds"] < best["seconds"] < fastest["seconds"] * 1.0001
    assert best["peak_bytes"] < fastest["peak_bytes"]
    assert (fastest["recompute"], best["recompute"]) == ("none", "selective")


def test_near_duplicates_fold_into_one_row_per_layout():
    """DeepSeek-V3 on 2,048 H100: the exact top 20 is six layouts, each repeated over vpp and
    recompute; the grouped table shows twenty different layouts."""
    result = deepseek_v3_2048()
    key = lambda r: tuple(r[a] for a in GROUP_AXES)  # noqa: E731
    raw = result.rows(result.top(20))
    assert len({key(r) for r in raw}) < 10
    assert {(r["vpp"], r["recompute"]) for r in raw} >= {(15, "none"), (15, "selective"),
                                                          (14, "none"), (12, "selective")}
    groups = top_groups(result, 20)
    reps = result.rows([g[0] for g in groups])
    assert len(groups) == 20 and len({key(r) for r in reps}) == 20
    for g, rep in zip(groups, reps):
        members = result.rows(g)
        assert all(key(m) == key(rep) for m in members)
        assert all(m["seconds"] <= rep["seconds"] * (1 + NEAR) for m in members)
    table = top_table(result, 20, groups)
    assert table["similar"].iloc[0] == "+9 within 5%: vpp 11–15, recompute none/selective"


def test_table_cells_are_values_never_none():
    result = deepseek_v3_2048()
    table = top_table(result, 50)
    assert not table.isna().any().any()
    assert not (table.astype(str) == "None").any().any()
    assert all(t == "even" or t.startswith("custom: 61 layers over ") for t in table["layout"])
    assert "micro-batch size" in table and "micro-batches per step" in table
    assert "None" not in top_csv(result, 5)


def test_a_row_says_which_number_is_the_micro_batch_size_and_which_the_count():
    row = {"tp": 8, "pp": 16, "vpp": 1, "ep": 64, "etp": 1, "cp": 1, "dp": 16, "zero": 1,
           "schedule": "1f1b", "micro_batch": 1, "micro_batches": 64, "recompute": "full"}
    assert "micro-batch size 1 × 64 micro-batches" in describe_row(row)


def test_log_axis_ticks_read_as_seconds():
    result = deepseek_plan()
    fig = plan_scatter(result)
    y = fig.layout.yaxis
    assert y.type == "log" and y.tickmode == "array" and len(y.tickvals) >= 3
    assert all(t.endswith(" s") for t in y.ticktext)
    secs = result.evaluated.seconds
    assert secs.min() <= min(y.tickvals) and max(y.tickvals) <= secs.max()
    vals, text = seconds_ticks(80, 700)
    assert text == ["100 s", "200 s", "500 s"] and vals == [100, 200, 500]
    assert seconds_ticks(0.05, 0.3)[1] == ["0.05 s", "0.1 s", "0.2 s"]
    assert seconds_ticks(26.9, 29.1)[1] == ["27 s", "27.5 s", "28 s", "28.5 s", "29 s"]


def test_the_sample_keeps_the_front_and_the_fastest_without_duplicates():
    result = small_plan()
    idx = _sample(result, 300)
    assert len(np.unique(idx)) == len(idx) <= 300 + len(result.pareto) + 200
    assert set(result.pareto) <= set(idx) and set(result.top(200)) <= set(idx)


@functools.cache
def deepseek_v3_2048():
    return plan(PlanSpec(model=model("deepseek-v3"), hardware=gpu("h100"), worlds=(2048,),
                         seq=4096, global_batch=64))


def deepseek_plan():
    return plan(PlanSpec(model=model("deepseek-v3"), hardware=gpu("h200"), worlds=(256,),
                         seq=4096, global_batch=256))


def test_ledger_query_names_every_setting_of_the_row():
    result = deepseek_plan()
    row = result.rows(result.top(1))[0]
    q = ledger_query(result, row, "deepseek-v3", "h200")
    assert q["model"] == "deepseek-v3" and q["gpu"] == "h200"
    assert set(q) <= set(LEDGER_KEYS)
    try:
        import memledger.views.state  # noqa: F401  (the dashboard omits its defaults)
    except ImportError:
        assert set(q) == set(LEDGER_KEYS)
        assert q["pp"] == str(row["pp"]) and q["m"] == str(row["micro_batches"])
        assert q["layout"] == "balanced" and q["sp"] == ("1" if row["sp"] else "0")


def test_ledger_query_opens_the_same_specs_on_the_dashboard():
    state = pytest.importorskip("memledger.views.state")  # lands with the dashboard branch
    result = deepseek_plan()
    for row in result.rows(result.top(5)) + result.rows(result.pareto[:5]):
        cfg, issues = state.parse_params(ledger_query(result, row, "deepseek-v3", "h200"))
        assert not issues
        assert state.to_specs(cfg, result.spec.model) == result.specs(row)


def test_the_search_frame_holds_the_chart_place_with_no_data():
    from memledger.views.planner.charts import searching_frame
    fig = searching_frame("DeepSeek-V3", "H100 SXM")
    assert fig.data == () and "searching" in fig.layout.title.text
    assert fig.layout.height >= 480  # the real chart's height: the page does not jump


def test_the_csv_has_the_tables_throughput_and_rows_say_what_differs_from_the_one_above():
    """Issue 32 #10: tokens/s, TFLOP/s and MFU in the download as on the page; a column names
    the settings that tell a row from the one above it (near-identical rows)."""
    import io

    import pandas as pd

    from memledger.views.planner.steps import throughput_columns
    result = small_plan()
    groups = top_groups(result, 10)
    rows = result.rows([g[0] for g in groups])
    table = throughput_columns(result, top_table(result, 10, groups), rows)
    csv = pd.read_csv(io.StringIO(top_csv(result, 10, groups)))
    assert list(csv["tokens_per_s"].round()) == list(table["tokens/s"])
    assert list(csv["mfu_pct"].round(1)) == list(table["MFU %"])
    assert list(csv["tflops_per_gpu"].round(1)) == list(table["TFLOP/s per GPU"])
    differs = list(table["differs from the row above"])
    assert differs[0] == "" and all(differs[1:])
    assert list(table.columns).index("differs from the row above") == 4  # before the layout
    a, b = rows[0], rows[1]
    changed = [k for k in ("tp", "pp", "zero", "micro_batch", "recompute") if a[k] != b[k]]
    assert all(k.replace("micro_batch", "mb") in differs[1] for k in changed)


def test_a_stage_split_the_layers_do_not_divide_is_marked_as_a_custom_layout():
    from memledger.planner import Constraints
    result = plan(PlanSpec(model=model("deepseek-v3"), hardware=gpu("h100"), worlds=(2048,),
                           seq=4096, global_batch=15360,
                           constraints=Constraints(tp=2, pp=32, ep=16, cp=2, zero=1)))
    table = top_table(result, 5)
    assert "custom: 61 layers over 32 stages" in set(table["layout"])


def test_the_step_breakdown_keeps_one_colour_per_term_and_its_legend_below_the_axis():
    from memledger.views.palette import TERM_COLORS
    from memledger.views.planner.steps import LABELS, breakdown_chart
    result = small_plan()
    fig = breakdown_chart(result, result.rows(result.top(1))[0])
    by_name = {v: TERM_COLORS[k] for k, v in LABELS.items()}
    assert fig.data and all(t.marker.color == by_name[t.name] for t in fig.data)
    assert fig.layout.legend.yref == "container" and fig.layout.margin.b >= 100
