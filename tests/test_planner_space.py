"""The planner's search space: validity comes from the core's checks, factored by the fields each
check reads — pinned here against `check_all` on the full specs, valid and invalid alike."""
import random

import pytest

from memledger import ParallelSpec, gpu, model
from memledger.errors import SpecError
from memledger.ledger.checks import check_all
from memledger.ledger.pipeline.schedules import balanced_layout
from memledger.planner import Constraints, PlanSpec, plan
from memledger.planner.question.space import _Checks, divisors, enumerate_space


def full_verdict(spec, world, pp, vpp, schedule, tp, cp, ep, etp) -> bool:
    """check_all on the complete ParallelSpec (+ the planner's own rules: dp | global batch,
    a layer per stage, balanced layout when the stages do not divide the layers), with 4·pp
    micro-batches, a count every engine runs: the evaluator checks each count
    (PipeTables.runs), not the space."""
    m = spec.model
    try:
        p = ParallelSpec.from_world(world, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp,
                                    sp=tp > 1, schedule=schedule)
        if p.n_stages > m.n_layers or spec.global_batch % p.dp:
            return False
        if m.n_layers % p.n_stages:
            p = ParallelSpec(**{**p.__dict__, "layout": balanced_layout(m.n_layers, p.n_stages)})
        check_all(m, p, spec.base_train(micro_batches=4 * pp))
    except SpecError:
        return False
    return True


def factored_verdict(checks, world, pp, vpp, schedule, tp, cp, ep, etp) -> bool:
    pipe = checks.pipe(pp, vpp, schedule)
    return (not isinstance(pipe, SpecError) and checks.base(world, pp, tp, cp) is None
            and checks.experts(world // pp, tp, ep, etp) is None)


@pytest.mark.parametrize("name,world,seq,batch", [
    ("deepseek-v3", 256, 4096, 96), ("mixtral-8x7b", 64, 2048, 48),
    ("qwen3-30b-a3b", 48, 6144, 36), ("llama3-70b", 96, 8192, 24), ("gpt3-175b", 128, 2048, 64)])
def test_factored_checks_agree_with_check_all_on_full_specs(name, world, seq, batch):
    spec = PlanSpec(model=model(name), hardware=gpu("h100"), worlds=(world,), seq=seq,
                    global_batch=batch)
    checks, rng = _Checks(spec), random.Random(name)
    seen = {True: 0, False: 0}
    for _ in range(1500):
        pp = rng.choice(divisors(world))
        schedule = rng.choice(["1f1b", "interleaved", "dualpipe"])
        vpp = rng.randint(2, 8) if schedule == "interleaved" else 1
        tp, cp = rng.choice([1, 2, 3, 4, 8]), rng.choice([1, 2, 4, 8, 16])
        ep, etp = rng.choice([1, 2, 4, 8, 16, 32]), rng.choice([1, 2, 4])
        if world % (pp * tp * cp):
            continue
        args = (world, pp, vpp, schedule, tp, cp, ep, etp)
        want = full_verdict(spec, *args)
        assert factored_verdict(checks, *args) == want, args
        seen[want] += 1
    assert seen[True] > 20 and seen[False] > 200  # both verdicts exercised


def test_counts_add_up_and_invalid_reasons_name_fields():
    spec = PlanSpec(model=model("mixtral-8x7b"), hardware=gpu("h100"), worlds=(64,), seq=4096,
                    global_batch=64)
    space = enumerate_space(spec)
    valid = sum(len(g.pipes) * g.n_widths for g in space.groups)
    assert valid + space.n_invalid == space.n_structural
    assert sum(space.reasons.values()) == space.n_invalid
    assert set(space.reasons) <= {"pp", "ep", "etp", "tp", "seq", "sp", "world", "global_batch",
                                  "vpp", "schedule"}
    assert "ep" in space.reasons  # ep = 16, 32, 64 do not divide Mixtral's 8 experts
    assert "8 experts" in space.examples["ep"] or "n_experts=8" in space.examples["ep"]


def test_every_enumerated_layout_passes_check_all():
    spec = PlanSpec(model=model("deepseek-v3"), hardware=gpu("h100"), worlds=(128,), seq=4096,
                    global_batch=128, constraints=Constraints(max_vpp=3))
    space = enumerate_space(spec)
    n = 0
    for g in space.groups:
        t = spec.base_train(micro_batches=4 * g.pp)  # counts are checked per m by the evaluator
        for pipe in g.pipes:
            for i in range(0, g.n_widths, 7):  # every 7th width of every pipeline shape
                p = pipe.parallel(tp=int(g.tp[i]), cp=int(g.cp[i]), dp=int(g.dp[i]),
                                  ep=int(g.ep[i]), etp=int(g.etp[i]), sp=bool(g.tp[i] > 1))
                check_all(spec.model, p, t)
                assert p.world == g.world and spec.global_batch % p.dp == 0
                assert (p.layout is not None) == (spec.model.n_layers % p.n_stages != 0)
                n += 1
    assert n > 500


def test_layer_counts_that_do_not_divide_get_a_balanced_layout_not_dropped():
    """DeepSeek-V3 has 61 layers (prime): every pp > 1 needs balanced_layout."""
    spec = PlanSpec(model=model("deepseek-v3"), hardware=gpu("h200"), worlds=(256,), seq=4096,
                    global_batch=256, constraints=Constraints(pp=16, schedule="1f1b"))
    result = plan(spec)
    assert result.n_fits > 0
    row = result.rows(result.top(1))[0]
    assert row["pp"] == 16 and row["layout"] == "balanced"
    p, _ = result.specs(row)
    assert sum(p.layout) == 61 and max(p.layout) - min(p.layout) == 1
