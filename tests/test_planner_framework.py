"""The planner proposes only what the chosen framework can run (costs.overlap): under
megatron-2021, Megatron-LM as of Narayanan et al. 2021 — 1F1B or interleaved (pp > 2, micro-batch
count divisible by pp), equal stages, no context parallelism, no ZeRO, full or no activation
recomputation; megatron-2022 (Korthikanti et al. 2022) the same with sequence parallelism and
selective recomputation; megatron-core keeps the whole space. A fixed value the framework
cannot run is refused with what it can run, in the spec, the CLI (exit 2) and the answer's
counts."""
import numpy as np
import pytest

from memledger import gpu, model
from memledger.errors import SpecError
from memledger.planner import Constraints, PlanSpec, plan
from memledger.planner.sweep.blocks import SCHEDULE_CODES
from memledger.planner.question.space import enumerate_space


def kept(framework: str, name: str = "llama3.2-1b", world: int = 24, batch: int = 48):
    """Every fitting configuration's columns (a small model: nearly everything fits)."""
    spec = PlanSpec(model=model(name), hardware=gpu("h100"), worlds=(world,), seq=2048,
                    global_batch=batch, framework=framework)
    result = plan(spec)
    cols = result.evaluated.columns()
    cols["schedule"] = np.array(SCHEDULE_CODES)[cols["schedule"]]
    return result, cols


def test_megatron_2021_search_holds_only_what_megatron_lm_2021_ran():
    result, c = kept("megatron-2021")
    assert result.n_fits > 100
    inter = c["schedule"] == "interleaved"
    assert set(c["schedule"]) <= {"1f1b", "interleaved"} and inter.any()
    assert (c["pp"][inter] > 2).all()
    assert (c["micro_batches"][inter] % c["pp"][inter] == 0).all()
    assert not c["balanced"].any()
    assert (c["cp"] == 1).all() and (c["zero"] == 0).all()
    assert set(np.unique(c["recompute"]).tolist()) <= {0, 2}  # PLAN_RECOMPUTE: none, full
    assert not any(row["sp"] for row in result.rows(result.top(50)) if row["tp"] > 1)


def test_megatron_2022_adds_sequence_parallelism_and_selective_recompute_to_2021():
    """Korthikanti et al. 2022's Megatron-LM: the 2021 bounds, with SP on the tp > 1 rows and
    selective recomputation among the modes; everything else as 2021."""
    result, c = kept("megatron-2022")
    inter = c["schedule"] == "interleaved"
    assert set(c["schedule"]) <= {"1f1b", "interleaved"} and (c["pp"][inter] > 2).all()
    assert not c["balanced"].any() and (c["cp"] == 1).all() and (c["zero"] == 0).all()
    assert set(np.unique(c["recompute"]).tolist()) == {0, 1, 2}  # none, selective, full
    rows = [r for r in result.rows(result.top(50)) if r["tp"] > 1]
    assert rows and all(r["sp"] for r in rows)


def test_megatron_core_keeps_every_layout_megatron_2021_could_not_run():
    """The other side of the test above: it would pass on an empty rule."""
    _, c = kept("megatron-core")
    inter = c["schedule"] == "interleaved"
    assert (inter & (c["pp"] == 2)).any()
    assert (inter & (c["micro_batches"] % c["pp"] != 0)).any()
    assert c["balanced"].any() and (c["cp"] > 1).any() and (c["zero"] > 0).any()
    assert 1 in np.unique(c["recompute"])  # selective


def test_dualpipe_is_searched_for_moe_under_megatron_core_only():
    def schedules(framework):
        spec = PlanSpec(model=model("mixtral-8x7b"), hardware=gpu("h100"), worlds=(16,),
                        seq=2048, global_batch=32, framework=framework)
        return {p.schedule for g in enumerate_space(spec).groups for p in g.pipes}
    assert schedules("megatron-core") == {"1f1b", "interleaved", "dualpipe"}
    assert schedules("megatron-2021") == {"1f1b", "interleaved"}


def test_uneven_stages_are_counted_as_invalid_with_the_reason():
    spec = PlanSpec(model=model("llama3.2-1b"), hardware=gpu("h100"), worlds=(24,), seq=2048,
                    global_batch=48, framework="megatron-2021", constraints=Constraints(pp=3))
    result = plan(spec)
    assert result.n_fits == 0 and result.n_evaluated == 0
    assert "16 does not split into 3 equal stages" in result.reason
    assert "megatron-2021 runs equal stages only" in result.reason


@pytest.mark.parametrize("fixed, says", [
    (dict(schedule="dualpipe"), "megatron-2021 does not run schedule='dualpipe'; it runs 1f1b, "
                                "interleaved"),
    (dict(zero=1), "does not run zero=1; it runs 0"),
    (dict(recompute="selective"), "does not run recompute='selective'; it runs none, full"),
    (dict(cp=2), "does not run cp=2; it runs 1"),
])
def test_a_fixed_value_the_framework_cannot_run_is_refused_naming_what_it_runs(fixed, says):
    with pytest.raises(SpecError, match=says.replace("(", r"\(")) as err:
        PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(16,), seq=2048,
                 global_batch=32, framework="megatron-2021", constraints=Constraints(**fixed))
    assert err.value.field == next(iter(fixed))


def test_cli_refuses_zero_1_under_megatron_2021_with_exit_2(capsys):
    from memledger.cli import main
    assert main(["plan", "--model", "llama3-8b", "--world", "16", "--seq", "2048",
                 "--global-batch", "32", "--framework", "megatron-2021", "--zero", "1"]) == 2
    err = capsys.readouterr().err
    assert "zero" in err and "megatron-2021 does not run zero=1" in err
    assert "Traceback" not in err
