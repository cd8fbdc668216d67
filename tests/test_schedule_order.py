"""The ledger's pipeline schedules held to PyTorch's own (torch.distributed.pipelining, torch 2.13).

Each torch schedule is built for real — PipelineStage objects with tiny Linear stages on a fake
process group, one process playing every rank — and its per-rank `pipeline_order` (the action
list all ranks compute) is walked the way torch's PipelineStage keeps tensors: F puts a
micro-batch in `fwd_cache`, a full B pops it, I moves it to `backward_state` with the graph
retained (`stage_backward_input`, retain_graph=True), W pops it. Per rank and per stage the
micro-batches alive at the rank's peak must equal the ledger's `in_flight`, for P in {2, 4, 8},
m from 1 to 4P and v in {2, 3} for interleaving; a count torch refuses must be one the ledger
refuses for pp_engine="pytorch".
"""
import pytest

from memledger import ParallelSpec, RuntimeSpec, TrainSpec, build_ledger, model
from memledger.errors import SpecError
from memledger.ledger.pipeline.engines import engine_notes, refusal
from memledger.ledger.pipeline.order import (peak_counts, rank_order, rank_stages, stage_flights,
                                             stage_open, steady_m)
from memledger.ledger.pipeline.schedules import in_flight

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
S = pytest.importorskip("torch.distributed.pipelining.schedules")
PipelineStage = pytest.importorskip("torch.distributed.pipelining").PipelineStage

CLASSES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
           "interleaved": "ScheduleInterleaved1F1B", "zb-h1": "ScheduleInterleavedZeroBubble",
           "zb-v": "ScheduleZBVZeroBubble", "dualpipev": "ScheduleDualPipeV"}
PS = (2, 4, 8)


@pytest.fixture(scope="module")
def groups():
    from torch.testing._internal.distributed.fake_pg import FakeStore
    made = not dist.is_initialized()
    if made:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=max(PS))
    if dist.get_world_size() < max(PS) or dist.get_rank() != 0:
        pytest.skip("a process group of another shape is already initialised")
    yield {p: dist.new_group(list(range(p))) for p in PS}
    if made:
        dist.destroy_process_group()


def torch_orders(group, name: str, p: int, v: int, m: int) -> dict[int, list]:
    """torch's per-rank compute actions (kind, stage, micro-batch); overlapped F+B expanded."""
    n = 2 * p if name in ("zb-v", "dualpipev") else p * v
    stage_ids = rank_stages(name, p, v, 0)
    stages = [PipelineStage(torch.nn.Linear(2, 2), s, n, torch.device("cpu"), group=group)
              for s in stage_ids]
    cls = getattr(S, CLASSES[name])
    single = name in ("gpipe", "1f1b")
    sched = cls(stages[0] if single else stages, m, loss_fn=lambda out, target: out.sum())
    out = {}
    for r, actions in sched.pipeline_order.items():
        seq = []
        for a in filter(None, actions):
            for x in a.sub_actions if a.computation_type == "OVERLAP_F_B" else (a,):
                if x.computation_type.value in "FBIW":
                    seq.append((x.computation_type.value, x.stage_index, x.microbatch_index))
        out[r] = seq
    return out


def torch_peak(order, stages, w_holds, strict=True):
    """(alive per stage, not yet through I/B per stage) at the first state holding the most,
    walking torch's fwd_cache / backward_state per micro-batch (strict=False: a backward frees
    the oldest, for Schedule1F1B's order whose last rank numbers micro-batches from 1)."""
    fwd = {s: set() for s in stages}
    bwd = {s: set() for s in stages}
    best, most = None, -1
    for kind, s, mb in order:
        if kind == "F":
            fwd[s].add(mb)
            alive = {x: len(fwd[x]) + (len(bwd[x]) if w_holds == "graph" else 0) for x in stages}
            if sum(alive.values()) > most:
                most, best = sum(alive.values()), (alive, {x: len(fwd[x]) for x in stages})
        elif kind == "B":
            fwd[s].remove(mb if strict else min(fwd[s]))
        elif kind == "I":
            fwd[s].remove(mb)
            bwd[s].add(mb)
        else:
            bwd[s].remove(mb)
    return tuple(best[0][x] for x in stages), tuple(best[1][x] for x in stages)


def grid(name):
    for p in PS:
        for v in ((2, 3) if name == "interleaved" else (1,)):
            for m in range(1, 4 * p + 1):
                yield p, v, m


@pytest.mark.parametrize("name", list(CLASSES))
def test_ledger_holds_what_torch_schedule_holds_per_rank_and_stage(groups, name):
    checked = 0
    for p, v, m in grid(name):
        why = refusal(name, "pytorch", p, m)
        try:
            orders = torch_orders(groups[p], name, p, v, m)
        except ValueError:
            assert why is not None, f"torch refuses {name} p={p} v={v} m={m}, the ledger runs it"
            with pytest.raises(SpecError, match="micro_batches"):
                in_flight(ParallelSpec(pp=p, vpp=v, schedule=name), 0, m, "pytorch")
            continue
        assert why is None, f"the ledger refuses {name} p={p} m={m} ({why}), torch runs it"
        spec = ParallelSpec(pp=p, vpp=v, schedule=name)
        for r in range(p):
            stages = spec.rank_stages(r)
            for w in ("graph", "w-inputs"):
                held, open_ = torch_peak(orders[r], stages, w, strict=name != "1f1b")
                assert in_flight(spec, r, m, "pytorch", w) == tuple(zip(stages, held)), (p, v, m, r, w)
                if name not in ("gpipe", "1f1b"):
                    assert stage_open(name, p, v, m, r, stages[-1], "pytorch", w) == open_[-1]
            checked += 1
    assert checked > 50


@pytest.mark.parametrize("name", [n for n in CLASSES if n != "1f1b"])
def test_generated_orders_are_torch_orders_action_for_action(groups, name):
    """1F1B is left out: torch's Schedule1F1B order numbers the last rank's micro-batches from 1
    (an IR for display; its runtime runs _step_microbatches), though it holds the same counts."""
    for p, v, m in grid(name):
        if refusal(name, "pytorch", p, m):
            continue
        orders = torch_orders(groups[p], name, p, v, m)
        for r in range(p):
            mine = list(rank_order(name, p, v, m, r, "pytorch"))
            assert (sorted(mine) if name == "gpipe" else mine) == (
                sorted(orders[r]) if name == "gpipe" else orders[r]), (p, v, m, r)


def korthikanti_interleaved(pp, v, r, m):
    """The closed form the ledger used before walking orders: warm-up 2(p-r-1) + (v-1)p + 1
    chunk-micro-batches in Megatron's forward order, groups of p per chunk."""
    total = min(2 * (pp - r - 1) + (v - 1) * pp + 1, m * v)
    full, rest = divmod(total, pp * v)
    return tuple((c * pp + r, full * pp + min(max(rest - c * pp, 0), pp)) for c in range(v))


@pytest.mark.parametrize("pp", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaved_walk_equals_closed_form_when_p_divides_m(pp, v):
    for m in range(pp, 6 * pp + 1, pp):
        for r in range(pp):
            got = in_flight(ParallelSpec(pp=pp, vpp=v, schedule="interleaved"), r, m)
            assert got == korthikanti_interleaved(pp, v, r, m), (m, r)


def test_interleaved_short_last_group_never_holds_more_than_m_per_chunk():
    # p=4, v=2, m=6: Megatron's table is chunk0 0-3, chunk1 0-3, chunk0 4-5, chunk1 4-5;
    # 11 forwards before the first backward give chunk0 6 and chunk1 5 (the closed form: 7, 4)
    got = in_flight(ParallelSpec(pp=4, vpp=2, schedule="interleaved"), 0, 6)
    assert got == ((0, 6), (4, 5))


@pytest.mark.parametrize("pp", [2, 4, 6, 8])
def test_1f1b_and_gpipe_closed_forms_equal_their_walked_orders(pp):
    for m in range(1, 3 * pp + 1):
        for r in range(pp):
            for name in ("1f1b", "gpipe"):
                stages = rank_stages(name, pp, 1, r)
                held, _, _ = peak_counts(rank_order(name, pp, 1, m, r, "megatron"), stages, "graph")
                assert in_flight(ParallelSpec(pp=pp, schedule=name), r, m) == tuple(
                    zip(stages, held))


@pytest.mark.parametrize("name, v", [("interleaved", 2), ("interleaved", 3), ("zb-h1", 1),
                                     ("zb-v", 1), ("dualpipe", 1), ("dualpipev", 1)])
@pytest.mark.parametrize("pp", [2, 4, 6])
def test_counts_stop_changing_past_the_steady_micro_batch_count(name, v, pp):
    """stage_flights caps m at steady_m for speed: the walked order of any larger m agrees."""
    cap = steady_m(name, pp, v)
    for m in range(cap, cap + 2 * pp + 1, 2 if name == "dualpipe" else 1):
        if any(refusal(name, e, pp, m) is None for e in ("megatron", "pytorch", "deepseek")):
            for r in range(pp):
                try:
                    got = stage_flights(name, pp, v, m, r)
                except SpecError:
                    continue
                stages = rank_stages(name, pp, v, r)
                from memledger.ledger.pipeline.engines import resolve_engine
                e = resolve_engine(name, "auto", pp, m)
                held, _, _ = peak_counts(rank_order(name, pp, v, m, r, e), stages, "graph")
                assert got == tuple(zip(stages, held)), (m, r)


@pytest.mark.parametrize("pp", [2, 4, 8, 16])
def test_dualpipev_holds_2p_plus_1_stage_micro_batches_on_every_rank(pp):
    """DualPipe README: DualPipeV keeps PP + 1 micro-batches of activations, PP counting its 2p
    stages — 2p + 1 stage-units, p + 1/2 of a full model's layers, not the "+1" per chunk."""
    for r in range(pp):
        got = in_flight(ParallelSpec(pp=pp, schedule="dualpipev"), r, 4 * pp)
        assert got == ((r, 2 * pp - r), (2 * pp - 1 - r, r + 1))


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_dualpipe_holds_p_plus_1_stage_micro_batches_split_over_its_mirror(pp):
    for r in range(pp):
        got = in_flight(ParallelSpec(pp=pp, schedule="dualpipe"), r, 4 * pp)
        assert sum(n for _, n in got) == pp + 1


def test_zb_v_with_few_micro_batches_holds_less_on_later_ranks():
    p = ParallelSpec(pp=4, schedule="zb-v")
    assert [sum(n for _, n in in_flight(p, r, 3)) for r in range(4)] == [4, 5, 6, 6]
    assert [sum(n for _, n in in_flight(p, r, 16)) for r in range(4)] == [8, 8, 8, 8]


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_zb_h1_holds_p_under_torch_graph_and_p_minus_r_when_i_frees_it(pp):
    p = ParallelSpec(pp=pp, schedule="zb-h1")
    for r in range(pp):
        assert in_flight(p, r, 4 * pp, w_holds="graph") == ((r, pp),)
        assert in_flight(p, r, 4 * pp, w_holds="w-inputs") == ((r, pp - r),)


@pytest.mark.parametrize("schedule", ["zb-v", "dualpipev"])
def test_v_puts_one_micro_batch_of_logits_on_rank0(schedule):
    """The last stage of a V sits on rank 0 and runs F and B back to back: one micro-batch of
    head input and fp32 logits, not p of them (issue 16: > 10 GiB for an 8B model at pp=8)."""
    t = TrainSpec(micro_batches=16, seq=8192)
    led = build_ledger(model("llama3-8b"), ParallelSpec(pp=8, schedule=schedule), t)
    items = {i.name: i for i in led.ranks[0].items}
    one = build_ledger(model("llama3-8b"), ParallelSpec(pp=1), TrainSpec(seq=8192))
    one_mb = {i.name: i.bytes for i in one.ranks[0].items}
    assert items["loss.softmax"].bytes == one_mb["loss.softmax"] == 8192 * 128256 * 4
    assert items["head.input"].bytes == one_mb["head.input"]
    assert not any(i.name.startswith(("loss.", "head.")) for r in led.ranks[1:] for i in r.items)


def test_zb_h1_last_rank_keeps_p_head_inputs_but_one_loss_under_torch():
    """torch's I detaches the loss (stage_backward_input), freeing the logits, while the graph
    up to the head stays until W: p micro-batches of head input, one of logits."""
    t = TrainSpec(micro_batches=16, seq=4096)
    led = build_ledger(model("llama3-8b"), ParallelSpec(pp=4, schedule="zb-h1"), t)
    items = {i.name: i for i in led.ranks[3].items}
    assert items["head.input"].formula.startswith("4 micro-batches")
    assert items["loss.softmax"].formula.startswith("1 micro-batches")


def test_dualpipev_below_2p_is_refused_naming_the_minimum_and_engines():
    with pytest.raises(SpecError) as e:
        build_ledger(model("llama3-8b"), ParallelSpec(pp=4, schedule="dualpipev"),
                     TrainSpec(micro_batches=7))
    assert e.value.field == "micro_batches"
    assert "2·pp = 8" in str(e.value) and "PyTorch" in str(e.value) and "DeepSeek" in str(e.value)


def test_1f1b_below_p_runs_in_megatron_not_in_pytorch():
    p, t = ParallelSpec(pp=4), TrainSpec(micro_batches=2)
    assert engine_notes("1f1b", 4, 2) == {"megatron": None,
                                          "pytorch": "needs micro_batches >= pp = 4"}
    build_ledger(model("llama3-8b"), p, t)  # auto: Megatron runs it
    with pytest.raises(SpecError, match="PyTorch"):
        build_ledger(model("llama3-8b"), p, t, RuntimeSpec(pp_engine="pytorch"))


def test_interleaved_with_p_not_dividing_m_follows_the_chosen_engine():
    """p=4, m=10, rank 0: Megatron groups 4 micro-batches per chunk (10 = 4 + 4 + 2) and runs
    2·3 + 4 + 1 = 11 forwards before its first backward; torch makes 2 rounds of 5 and runs
    2·3 + 5 + 1 = 12 (chunk 0: 0-4 and 5-6, chunk 1: 0-4)."""
    p = ParallelSpec(pp=4, vpp=2, schedule="interleaved")
    assert in_flight(p, 0, 10, "megatron") == ((0, 7), (4, 4))
    assert in_flight(p, 0, 10, "pytorch") == ((0, 7), (4, 5))
    with pytest.raises(SpecError, match="rounds"):
        in_flight(p, 0, 9, "pytorch")
    with pytest.raises(SpecError, match="does not run"):
        in_flight(ParallelSpec(pp=4, schedule="zb-v"), 0, 8, "megatron")


@pytest.mark.parametrize("schedule, m", [("zb-v", 16), ("dualpipev", 16), ("dualpipe", 16),
                                         ("zb-v", 3), ("interleaved", 10)])
def test_stage_split_adds_up_to_each_ranks_activation_row(schedule, m):
    from memledger.ledger.pipeline.stages import stage_split
    p = ParallelSpec(pp=4, vpp=2 if schedule == "interleaved" else 1, schedule=schedule)
    led = build_ledger(model("llama3-8b"), p, TrainSpec(micro_batches=m))
    for r, split in enumerate(stage_split(led)):
        assert tuple((s.stage, s.micro_batches) for s in split.stages) == led.ranks[r].in_flight
        assert sum(s.bytes for s in split.stages) == led.ranks[r].rows["activations"]
        assert split.rank_wide_bytes == 0
    # the V: rank 0's first chunk (stage 0) holds the most, its second (the loss) the least
    if schedule in ("zb-v", "dualpipev") and m == 16:
        down = [x.stages[0].micro_batches for x in stage_split(led)]
        up = [x.stages[1].micro_batches for x in stage_split(led)]
        assert down == sorted(down, reverse=True) and up == sorted(up) and up[0] == 1
        assert stage_split(led)[0].stages[1].last


def test_planner_never_proposes_a_micro_batch_count_the_engine_refuses():
    from memledger import gpu
    from memledger.planner import Constraints, PlanSpec, plan
    spec = PlanSpec(model=model("mixtral-8x7b"), hardware=gpu("h100"), worlds=(16,), seq=2048,
                    global_batch=16, constraints=Constraints(schedule="dualpipe", pp=4))
    result = plan(spec, keep_all=True)
    cols = result.evaluated.columns()
    ms = set(cols["micro_batches"].tolist())
    assert ms and all(m % 2 == 0 and m >= 8 for m in ms)  # DualPipe: even, >= 2·pp
    for row in result.rows(range(min(20, result.n_evaluated))):
        p, t = result.specs(row)
        assert build_ledger(spec.model, p, t, spec.runtime).peak.peak_total_bytes == row["peak_bytes"]


def test_runtime_knobs_round_trip_through_the_json_config():
    import json
    from dataclasses import asdict
    rt = RuntimeSpec(pp_engine="pytorch", zb_w_holds="w-inputs")
    led = build_ledger(model("llama3-8b"), ParallelSpec(pp=4, schedule="zb-h1"),
                       TrainSpec(micro_batches=8), rt)
    back = RuntimeSpec(**json.loads(json.dumps(led.to_dict()["config"]["runtime"])))
    assert back == rt and asdict(back)["zb_w_holds"] == "w-inputs"
    with pytest.raises(SpecError, match="zb_w_holds"):
        RuntimeSpec(zb_w_holds="some")


def test_cli_refuses_dualpipev_below_2p_with_one_line_and_exit_2(capsys):
    from memledger.cli import main
    code = main(["ledger", "--model", "llama3-8b", "--pp", "4", "--schedule", "dualpipev",
                 "--micro-batches", "6"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "micro_batches" in err and "2·pp = 8" in err


def test_cli_zb_w_holds_changes_zb_h1s_later_ranks(capsys):
    import json

    from memledger.cli import main
    acts = {}
    for w in ("graph", "w-inputs"):
        main(["ledger", "--model", "llama3-8b", "--pp", "4", "--schedule", "zb-h1",
              "--micro-batches", "8", "--zb-w-holds", w, "--json"])
        out = json.loads(capsys.readouterr().out)
        acts[w] = [r["rows"]["activations"] for r in out["ranks"]]
    assert acts["graph"][0] == acts["w-inputs"][0] and acts["graph"][2] > acts["w-inputs"][2]
