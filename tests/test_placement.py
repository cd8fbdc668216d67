"""A rank's placement (ledger/pipeline/placement.py): built once per rank from the schedule rules,
read by every row; the rows do not ask the pipeline rules again."""
from dataclasses import replace

import pytest

from memledger import ParallelSpec, TrainSpec, build_ledger, model
from memledger.errors import SpecError
from memledger.ledger.pipeline.placement import RankPlacement, probe, rank_placement, stage_placement
from memledger.ledger.pipeline.schedules import (balanced_layout, first_stage_rank, in_flight,
                                                 last_stage_open, last_stage_rank, stage_layers)
from memledger.specs.runtime import RuntimeSpec
from tests.test_architecture import graph

M = model("llama3-8b")  # 32 layers
CASES = [  # (schedule, pp, vpp, micro-batches, engine)
    ("gpipe", 4, 1, 8, "auto"), ("1f1b", 4, 1, 3, "auto"), ("1f1b", 8, 1, 16, "pytorch"),
    ("interleaved", 4, 2, 8, "auto"), ("interleaved", 2, 4, 4, "pytorch"), ("zb-h1", 4, 1, 8, "auto"),
    ("zb-v", 4, 1, 8, "auto"), ("dualpipe", 4, 1, 8, "auto"), ("dualpipev", 4, 1, 8, "auto"),
]


def _spec(schedule, pp, vpp, layout=None):
    return ParallelSpec(pp=pp, schedule=schedule, vpp=vpp, layout=layout)


@pytest.mark.parametrize("schedule, pp, vpp, mb, engine", CASES)
def test_placement_is_the_schedule_rules_asked_once(schedule, pp, vpp, mb, engine):
    """Every field equals what the rows used to ask of pipeline.schedules for that rank."""
    p, t, rt = _spec(schedule, pp, vpp), TrainSpec(seq=1024, micro_batches=mb), RuntimeSpec(pp_engine=engine)
    stages = stage_layers(M, p)
    for r in range(pp):
        x = rank_placement(M, p, t, rt, r)
        flights = in_flight(p, r, mb, engine, rt.zb_w_holds)
        held = dict(flights)
        assert x.stages == p.rank_stages(r) and x.flights == flights
        assert x.stage_layers == tuple(stages[s] for s in x.stages)
        assert x.layers == tuple(i for s in p.rank_stages(r) for i in stages[s])
        assert (x.holds_first, x.holds_last) == (r == first_stage_rank(p), r == last_stage_rank(p))
        assert x.first == (held.get(0, 0) if x.holds_first else 0)
        assert x.last == (held.get(p.n_stages - 1, 0) if x.holds_last else 0)
        assert x.loss == (last_stage_open(p, r, mb, rt) if x.last else 0)
        assert stage_placement(M, p, r) == RankPlacement(
            r=r, last_stage=x.last_stage, stages=x.stages, stage_layers=x.stage_layers,
            holds_first=x.holds_first, holds_last=x.holds_last)


@pytest.mark.parametrize("schedule, pp, vpp", [(s, p, v) for s, p, v, _, _ in CASES])
def test_ranks_hold_every_layer_once_and_one_rank_each_end(schedule, pp, vpp):
    for layout in (None, balanced_layout(31, _spec(schedule, pp, vpp).n_stages)):
        m = M if layout is None else replace(M, n_layers=31)
        p = _spec(schedule, pp, vpp, layout)
        places = [stage_placement(m, p, r) for r in range(pp)]
        copies = 2 if schedule == "dualpipe" else 1  # DualPipe: p stages, both directions
        assert sorted(i for x in places for i in x.layers) == sorted(list(range(m.n_layers)) * copies)
        if copies == 1:
            assert sum(x.holds_first for x in places) == sum(x.holds_last for x in places) == 1
        assert all(x.last_stage == p.n_stages - 1 for x in places)


@pytest.mark.parametrize("schedule, pp, vpp, mb, engine", CASES)
def test_one_stage_shares_add_up_to_the_rank(schedule, pp, vpp, mb, engine):
    p, t, rt = _spec(schedule, pp, vpp), TrainSpec(seq=1024, micro_batches=mb), RuntimeSpec(pp_engine=engine)
    for r in range(pp):
        x = rank_placement(M, p, t, rt, r)
        parts = [x.only(s) for s in x.stages]
        assert tuple(f for y in parts for f in y.flights) == x.flights
        assert tuple(i for y in parts for i in y.layers) == x.layers
        assert sum(y.first for y in parts) == x.first and sum(y.last for y in parts) == x.last
        assert sum(y.loss for y in parts) == x.loss


def test_ledger_ranks_carry_the_placement():
    p = _spec("interleaved", 4, 2)
    t, rt = TrainSpec(seq=1024, micro_batches=8), RuntimeSpec()
    led = build_ledger(M, p, t, rt)
    for r in led.ranks:
        x = rank_placement(M, p, t, rt, r.pp_rank)
        assert (r.layers, r.in_flight) == (x.layers, x.flights)


def test_probe_holds_what_it_is_given():
    p = ParallelSpec(pp=3, layout=(5, 1, 26))
    x = probe(M, p, ((1, 2),))
    assert (x.layers, x.flights, x.first, x.last, x.loss) == ((5,), ((1, 2),), 0, 0, 0)
    y = probe(M, ParallelSpec(), (), last=1)
    assert (y.layers, y.holds_last, y.last, y.loss) == ((), True, 1, 1)


def test_placement_refuses_inconsistent_counts():
    with pytest.raises(SpecError, match="loss micro-batches must be in 0..last=1, got 2"):
        RankPlacement(r=0, last_stage=0, stages=(0,), stage_layers=(range(2),), holds_first=True,
                      holds_last=True, flights=((0, 1),), first=1, last=1, loss=2)
    with pytest.raises(SpecError, match="1 layer ranges for 2 stages"):
        RankPlacement(r=0, last_stage=1, stages=(0, 1), stage_layers=(range(2),),
                      holds_first=True, holds_last=True)


ROWS = ("memledger.ledger.static.held", "memledger.ledger.activations.held",
        "memledger.ledger.timeline_shape", "memledger.ledger.runtime", "memledger.ledger.build",
        "memledger.ledger.torch_pipelining")


def test_rows_read_the_placement_instead_of_the_schedule_rules():
    """Only the placement (and the checks, and torch pipelining's send walk over the schedule
    order) ask the pipeline's rules; the rows read the placement they are handed."""
    g = graph()
    asking = {a for a in ROWS if g[a] & {"memledger.ledger.pipeline.schedules"}}
    assert asking == set()
