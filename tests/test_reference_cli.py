"""`memledger reference` prints what tests/test_reference_runs.py and tests/test_layout_figures.py
check: per published run its fit, predicted vs published TFLOP/s and rank; per layout
comparison of the paper, the predicted TFLOP/s of each layout and whether the order is the
measured one. --match picks entries; a --match nothing matches exits 2 naming the entries."""
import json

import pytest

from memledger.cli import main
from memledger.costs.published import MEGATRON_2021
from memledger.planner.answer.reference import check


def run(capsys, *args):
    code = main(["reference", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_published_run_shows_its_fit_prediction_and_rank_as_check_computes_them(capsys):
    code, out, _ = run(capsys, "--match", "GPT 1.7B", "--json")
    assert code == 0
    (row,) = json.loads(out)["runs"]
    want = check(MEGATRON_2021[0])
    assert row["fits"] and row["rank"] == want.rank and row["n_fits"] == want.n_fits
    assert (row["layout_rank"], row["n_layouts"]) == (want.layout_rank, want.n_layouts)
    assert row["in_fastest_tenth"]
    assert row["behind_fastest"] == want.behind_fastest == 0  # the fastest configuration
    assert row["predicted_tflops_per_gpu"] == pytest.approx(want.tflops_per_gpu)
    assert row["published_tflops_per_gpu"] == 137 and row["layout"]["micro_batch"] == 16


def test_the_table_names_each_run_and_its_rank(capsys):
    code, out, _ = run(capsys, "--match", "GPT 1.7B")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("Megatron-LM GPT 1.7B"))
    assert "yes" in line and "137" in line and "1 / 157" in line and "1 / 209" in line
    assert "+0.0 %" in line  # its predicted step is the fastest's


def test_a_published_layout_behind_the_fastest_says_by_how_much_in_time(capsys):
    """39.1B (pp = 2, no interleaving): its predicted step 14.40 s, the planner's fastest
    (tp 4, pp 4, vpp 6) 12.46 s: +15.6 %."""
    code, out, _ = run(capsys, "--match", "GPT 39.1B", "--json")
    (row,) = json.loads(out)["runs"]
    assert row["behind_fastest"] == pytest.approx(row["seconds"] / row["fastest"]["seconds"] - 1)
    assert row["behind_fastest"] == pytest.approx(0.156, abs=0.002)


def test_a_figure_shows_every_layout_and_says_the_order_is_the_measured_one(capsys):
    code, out, _ = run(capsys, "--match", "fig. 15", "--json")
    assert code == 0
    body = json.loads(out)
    assert body["runs"] == []
    (fig,) = body["figures"]
    assert [b["global_batch"] for b in fig["batches"]] == [32, 128, 512]
    for b in fig["batches"]:
        assert b["agrees"] and len(b["tflops_per_gpu"]) == 5
        assert b["tflops_per_gpu"] == sorted(b["tflops_per_gpu"], reverse=True)
    code, text, _ = run(capsys, "--match", "fig. 15")
    assert text.count("same order") == 3 and "tp16×pp1" in text


def test_a_figure_varying_the_micro_batch_labels_its_columns_by_it(capsys):
    code, text, _ = run(capsys, "--match", "fig. 16")
    assert code == 0 and "mb1  mb2  mb4  mb8" in text and "measured: fastest at mb2" in text


@pytest.mark.parametrize("match", ["no such run", " "])
def test_a_match_that_picks_nothing_exits_2_with_one_line(capsys, match):
    code, out, err = run(capsys, "--match", match)
    assert code == 2 and out == ""
    assert err.startswith("memledger reference: error: --match") and err.count("\n") == 1
