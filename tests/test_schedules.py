"""In-flight micro-batches per schedule (docs/design.md §6) and stage placement."""
import pytest

from memledger import ParallelSpec, TrainSpec, build_ledger, model
from memledger.ledger.pipeline.schedules import balanced_layout, in_flight


def held(schedule, pp, r, m, vpp=1):
    return sum(n for _, n in in_flight(ParallelSpec(pp=pp, vpp=vpp, schedule=schedule), r, m))


@pytest.mark.parametrize("r, want", [(0, 4), (1, 3), (2, 2), (3, 1)])
def test_1f1b_rank_r_holds_p_minus_r(r, want):
    assert held("1f1b", 4, r, 16) == want


def test_1f1b_is_capped_by_micro_batches():
    assert held("1f1b", 8, 0, 3) == 3


def test_gpipe_holds_all_micro_batches():
    assert held("gpipe", 4, 3, 16) == 16


def test_interleaved_rank0_holds_l_times_1_plus_p_minus_1_over_pv_layers():
    """Korthikanti et al. 2022: interleaving multiplies the first stage's memory by 1+(p-1)/(pv)."""
    p, v = 8, 3
    chunks = held("interleaved", p, 0, 64, vpp=v)  # chunk-micro-batches of L/(p·v) layers
    assert chunks / (p * v) == 1 + (p - 1) / (p * v)


def test_interleaved_fills_chunks_in_megatron_forward_order():
    # rank 0, p=4, v=2: warm-up 2·3 + 4 = 10 forwards + 1: chunk0 gets 4 + 3, chunk1 gets 4
    assert in_flight(ParallelSpec(pp=4, vpp=2, schedule="interleaved"), 0, 64) == ((0, 7), (4, 4))


def test_zb_v_totals_1f1b_peak_split_over_the_v():
    """Qi et al. 2024: ZB-V's peak equals 1F1B's rank 0 (2p stage-units = L layers) on every
    rank; torch's order puts 2p - 1 - r of them on the down leg and r + 1 on the up leg."""
    p = ParallelSpec(pp=4, schedule="zb-v")
    assert [in_flight(p, r, 16) for r in range(4)] == [
        ((0, 7), (7, 1)), ((1, 6), (6, 2)), ((2, 5), (5, 3)), ((3, 4), (4, 4))]


def test_dualpipe_holds_p_plus_1_and_two_stages_of_weights():
    p = ParallelSpec(pp=4, schedule="dualpipe", dp=1)
    assert all(held("dualpipe", 4, r, 16) == 5 for r in range(4))
    m = model("llama3-8b")
    base = build_ledger(m, ParallelSpec(pp=4), TrainSpec(micro_batches=16))
    dual = build_ledger(m, p, TrainSpec(micro_batches=16))
    # rank 1 holds stages 1 and 2 (mirror): twice the layers of 1F1B's rank 1
    assert dual.ranks[1].rows["weights"] == 2 * base.ranks[1].rows["weights"]


def test_v_schedules_put_embedding_and_head_on_rank0():
    led = build_ledger(model("llama3-8b"), ParallelSpec(pp=4, schedule="zb-v"), TrainSpec())
    names = {i.name for i in led.ranks[0].items}
    assert "embedding / embedding" in names and "head / head" in names


def test_balanced_layout_gives_remainder_to_middle_stages():
    assert balanced_layout(61, 16) == (3,) + (4,) * 13 + (3, 3)
    assert sum(balanced_layout(61, 16)) == 61


def test_tied_embeddings_keep_two_copies_across_pipeline_stages():
    m = model("llama3.2-1b")
    one = build_ledger(m, ParallelSpec(), TrainSpec())
    two = build_ledger(m, ParallelSpec(pp=2), TrainSpec())
    emb = 128256 * 2048 * 2
    assert sum(r.rows["weights"] for r in two.ranks) == one.ranks[0].rows["weights"] + emb


@pytest.mark.parametrize("n_layers,n_stages,want", [
    (126, 8, (15,) + (16,) * 6 + (15,)), (126, 16, (7,) + (8,) * 14 + (7,)),
    (32, 4, (8, 9, 8, 7)), (80, 8, (10, 11, 10, 10, 10, 10, 10, 9))])
def test_torchtitan_layout_counts_embedding_and_head_as_one_layer_each(n_layers, n_stages, want):
    """torchtitan 0.3 distributed/pipeline_parallel.py `_generate_llm_fqn_per_model_part` with
    its default first/last_stage_less_layers = 1: n_layers + 2 effective layers spread evenly,
    the remainder to the first stages, one fewer real layer on the first and the last stage."""
    from memledger.ledger.pipeline.schedules import torchtitan_layout
    assert torchtitan_layout(n_layers, n_stages) == want
    assert sum(want) == n_layers


@pytest.mark.torch
@pytest.mark.parametrize("n_layers,n_stages", [(126, 8), (126, 16), (32, 4), (32, 8), (61, 8),
                                               (80, 16), (28, 4)])
def test_torchtitan_layout_is_torchtitans_own_split(n_layers, n_stages):
    split = pytest.importorskip("torchtitan.distributed.pipeline_parallel")
    from memledger.ledger.pipeline.schedules import torchtitan_layout
    parts = split._generate_llm_fqn_per_model_part(n_stages, n_layers, 1, 1)
    assert torchtitan_layout(n_layers, n_stages) == tuple(
        sum(n.startswith("layers.") for n in part) for part in parts)
