"""torch.distributed.pipelining's own buffers (RuntimeSpec pp_engine="pytorch",
memledger/ledger/torch_pipelining.py): the numbers of the formulas, what changes with the engine
and what does not, and the planner's refusal. Measured against the engine in test_engine.py."""
from dataclasses import replace

import pytest

from memledger.engine.cases import CPU_CASES, case_from_text, predict
from memledger.errors import SpecError
from memledger.ledger import build_ledger
from memledger.planner.question.spec import PlanSpec
from memledger.presets import gpu, model
from memledger.specs import ParallelSpec, TrainSpec
from memledger.specs.runtime import RuntimeSpec

B = 64 * 128 * 2  # one tiny-Llama stage boundary: b·s × h × bf16
PP_NAMES = ("pipelining activation receive buffers", "pipelining gradient receive buffers",
            "pipelining stage outputs (fwd_cache)", "pipelining sends held at the peak")


def items(led, r, row=None):
    return {i.name: i.bytes for i in led.ranks[r].items if row is None or i.row == row}


def test_1f1b_pp4_m6_rank_r_holds_m_receive_buffers_each_way_and_its_in_flight_outputs():
    led = predict(next(c for c in CPU_CASES if c.name == "pp=4 1f1b m=6"))
    got = [[items(led, r)[n] for n in PP_NAMES] for r in range(4)]
    logits = 64 * 512 * 2  # the last stage's output: b·s × V × bf16
    assert got == [[0, 6 * B, 4 * B, 0],  # first stage: no activation receives; w=4, 2w-1 > m
                   [6 * B, 6 * B, 3 * B, 2 * B],
                   [6 * B, 6 * B, 2 * B, 2 * B],
                   [6 * B, 0, 1 * logits, 1 * B]]  # last: no gradient receives, logits held
    assert all("pipeline send/recv" not in items(led, r) for r in range(4))


def test_gpipe_holds_no_sends_at_its_peak_interleaved_every_send_so_far_per_stage_of_the_rank():
    gp = predict(case_from_text("pp=2,m=4,schedule=gpipe"))
    assert [items(gp, r)["pipelining sends held at the peak"] for r in (0, 1)] == [0, 0]
    il = predict(case_from_text("pp=2,vpp=2,m=4,schedule=interleaved"))
    # rank 0 holds stages 0 and 2: one non-first stage, two non-last; rank 1 stages 1 and 3
    assert items(il, 0)["pipelining activation receive buffers"] == 4 * 1 * B
    assert items(il, 0)["pipelining gradient receive buffers"] == 4 * 2 * B
    assert items(il, 1)["pipelining activation receive buffers"] == 4 * 2 * B
    assert items(il, 1)["pipelining gradient receive buffers"] == 4 * 1 * B
    # torch's runtime keeps every send to the step's end: 5 and 7 at the last fullest backward
    assert [items(il, r)["pipelining sends held at the peak"] // B for r in (0, 1)] == [5, 7]


@pytest.mark.parametrize("m,expect", [(2, [0, 1]), (3, [1, 1]), (6, [1, 1])])
def test_1f1b_sends_held_need_a_steady_backward_after_the_warmup(m, expect):
    """pp=2: rank 0 warms up w=2 forwards; its warm-up send (micro-batch 0's output) is alive at
    a steady backward only when 2w-1 <= m; rank 1 (w=1) holds the previous input gradient
    from m >= 2 on."""
    led = predict(case_from_text(f"pp=2,m={m},schedule=1f1b"))
    assert [items(led, r)["pipelining sends held at the peak"] // B for r in (0, 1)] == expect


def test_megatron_and_auto_keep_one_send_and_one_receive_buffer():
    case = next(c for c in CPU_CASES if c.name == "pp=4 1f1b m=6")
    for engine in ("auto", "megatron"):
        led = build_ledger(predict(case).model, case.parallel(), case.train(),
                           replace(case.runtime(), pp_engine=engine))
        for r in range(4):
            it = items(led, r)
            assert it["pipeline send/recv"] == 2 * B
            assert not any(n.startswith("pipelining") or n.startswith("later stages") for n in it)


def test_later_stages_hold_their_own_rope_tables_per_micro_batch_in_flight():
    led = predict(next(c for c in CPU_CASES if c.name == "pp=4 1f1b m=6"))
    cos_sin = 2 * 64 * 32 * 2  # cos + sin: s × head_dim × bf16 (b = 1)
    rope = [items(led, r, "activations").get("later stages / rope cos+sin", 0) for r in range(4)]
    assert rope == [0, 3 * cos_sin, 2 * cos_sin, 1 * cos_sin]  # rank 0's are the profile's own


def test_megatron_profile_lists_no_rope_so_none_is_added():
    t = TrainSpec(micro_batch=1, seq=4096, micro_batches=8, profile="megatron")
    p = ParallelSpec(pp=4, schedule="1f1b")
    led = build_ledger(model("llama3-8b"), p, t, RuntimeSpec(pp_engine="pytorch"))
    assert all("later stages / rope cos+sin" not in items(led, r) for r in range(4))
    assert items(led, 1)["pipelining activation receive buffers"] == 8 * 4096 * 4096 * 2


def test_planner_refuses_pp_engine_pytorch_with_the_field_named():
    with pytest.raises(SpecError) as e:
        PlanSpec(model=model("llama3-8b"), hardware=gpu("h100"), worlds=(8,), seq=4096,
                 global_batch=64, runtime=RuntimeSpec(pp_engine="pytorch"))
    assert e.value.field == "pp_engine" and "memledger ledger" in str(e.value)
