"""Every invalid combination raises a SpecError naming the field, the value and what is valid."""
import pytest

from memledger import ParallelSpec, SpecError, TrainSpec, build_ledger, model
from memledger.specs.runtime import RuntimeSpec


def err(fn):
    with pytest.raises(SpecError) as e:
        fn()
    return e.value


def ledger(name, **par):
    train = par.pop("train", TrainSpec())
    return lambda: build_ledger(model(name), ParallelSpec(**par), train)


@pytest.mark.parametrize("make, field, fragments", [
    (ledger("llama3-8b", tp=3), "tp", ["tp=3", "n_heads=32", "valid: 1, 2, 4, 8, 16, 32"]),
    (ledger("llama3-8b", tp=16, sp=True), "tp", ["tp=16", "n_kv_heads=8"]),
    (ledger("mixtral-8x7b", ep=3, dp=3), "ep", ["ep=3", "n_experts=8"]),
    (ledger("llama3-8b", pp=5), "pp", ["n_layers=32", "layout"]),
    (ledger("llama3-8b", pp=4, vpp=3, schedule="interleaved"), "pp", ["12 pipeline stages", "n_layers=32"]),
    (ledger("llama3-8b", ep=2, dp=2), "ep", ["no experts"]),
    (ledger("mixtral-8x7b", tp=2, ep=2), "sp", ["sequence parallel"]),
    (ledger("llama3-8b", cp=2, train=TrainSpec(seq=4098)), "seq", ["seq=4098", "2·cp=4"]),
    (ledger("llama3-8b", pp=2, layout=(10, 10)), "layout", ["sum to 20", "n_layers=32"]),
])
def test_invalid_combinations_name_the_field(make, field, fragments):
    e = err(make)
    assert e.field == field
    for f in fragments:
        assert f in str(e), (f, str(e))


@pytest.mark.parametrize("kw, field", [
    ({"tp": 0}, "tp"), ({"pp": -1}, "pp"), ({"dp": 0}, "dp"), ({"zero": 4}, "zero"),
    ({"schedule": "magic"}, "schedule"), ({"vpp": 2}, "vpp"),
    ({"schedule": "interleaved", "pp": 4}, "vpp"), ({"ep": 4, "dp": 2}, "ep"),
    ({"layout": (1, 2), "pp": 4}, "layout"), ({"schedule": "dualpipe", "pp": 3}, "pp"),
    ({"tp": "2"}, "tp"), ({"tp": True}, "tp"),
])
def test_parallel_spec_rejects(kw, field):
    assert err(lambda: ParallelSpec(**kw)).field == field


@pytest.mark.parametrize("kw, field", [
    ({"micro_batch": 0}, "micro_batch"), ({"seq": -5}, "seq"), ({"micro_batches": 0}, "micro_batches"),
    ({"precision": "fp4"}, "precision"), ({"optimizer": "adam"}, "optimizer"),
    ({"profile": "nope"}, "profile"), ({"recompute": "some"}, "recompute"),
    ({"attention": "eager"}, "attention"),
])
def test_train_spec_rejects(kw, field):
    e = err(lambda: TrainSpec(**kw))
    assert e.field == field
    if "precision" in kw:
        assert "mixed16" in str(e) and "megatron" in str(e)


def test_world_size_mismatch_names_world():
    e = err(lambda: ParallelSpec.from_world(100, tp=8))
    assert e.field == "world" and "100" in str(e) and "tp*pp*cp=8" in str(e)


def test_runtime_spec_rejects_bad_slack():
    assert err(lambda: RuntimeSpec(allocator_slack_pct=150)).field == "allocator_slack_pct"


def test_unknown_presets_list_the_valid_ones():
    from memledger import gpu
    assert "llama3-8b" in str(err(lambda: model("llama-9")))
    assert "h100" in str(err(lambda: gpu("h1000")))


def test_validate_never_overwrites_a_stored_result_without_force(tmp_path):
    from memledger.cli.validate_cmd import write
    from memledger.errors import SpecError
    rec = [{"case": "c", "row": "weights", "rel_error": 0.0, "ok": True}]
    write(tmp_path, "cuda", {}, rec, [])
    before = (tmp_path / "validation-cuda.json").read_text()
    with pytest.raises(SpecError, match="--force"):
        write(tmp_path, "cuda", {"new": 1}, rec, [])
    assert (tmp_path / "validation-cuda.json").read_text() == before
    write(tmp_path, "cuda", {"new": 1}, rec, [], force=True)
    assert '"new": 1' in (tmp_path / "validation-cuda.json").read_text()


def test_timeline_and_engine_runs_keep_stored_results_without_force(capsys):
    """The committed runs the tests re-predict are refused as --out targets, before measuring."""
    from memledger.cli import main
    assert main(["validate", "--timeline", "--device", "cpu", "--out", "validation"]) == 2
    assert main(["validate", "--engine", "torch", "--scale", "cpu", "--out", "validation"]) == 2
    err = capsys.readouterr().err
    assert "timeline-cpu.json exists" in err and "engine-cpu.json exists" in err
