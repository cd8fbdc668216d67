"""The step timeline of fine-tuning runs against the allocation tracker (CPU, peft LoRA and
frozen modules; memledger.validation.timeline_measure): the peak within 5 %, every measured
event within 3 % except layer 0's forward in dropout cases, over by exactly the documented
layer-0 q/k/v dropout masks (activations/finetune.py). Frozen norms accumulate no gradient, so
these runs have no per-layer backward marks; the loss, optimizer-step and zero-grad marks and
the peak cover the backward."""
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from memledger.validation.cases import FINETUNE_CPU_CASES  # noqa: E402
from memledger.validation.timeline_measure import LOOP_RUNS, compare  # noqa: E402

pytestmark = pytest.mark.torch
CASES = {c.name: c for c in FINETUNE_CPU_CASES}
RUNS = {r.name: r for r in LOOP_RUNS}
GRID = [("llama-tiny lora q,v r8", "set_to_none foreach"),
        ("llama-tiny freeze embeddings+attention", "persistent foreach"),
        ("llama-tiny freeze embeddings+layers 0-1 (LLaMA-Factory freeze)", "set_to_none foreach"),
        ("qwen3-moe-tiny lora attention dropout", "set_to_none foreach"),
        ("llama-tiny lora all-linear r16 8 layers dropout", "persistent foreach")]


@pytest.mark.parametrize("name,run", GRID, ids=[f"{c} | {r}" for c, r in GRID])
def test_fine_tuning_timeline_peak_within_5_percent(name, run):
    case = CASES[name]
    c = compare(case, RUNS[run])
    labels = {k for k, _, _ in c["rows"]}
    assert {"loss0", "optimizer-step", "zero-grad", "F0.0"} <= labels
    assert abs(c["peak_predicted"] - c["peak_measured"]) <= 0.05 * c["peak_measured"], c["peak_at"]
    ft = case.finetune
    for k, p, m in c["rows"]:
        if ft.lora_dropout_pct and k.startswith("F"):  # from layer 0 on, its masks are counted
            masks = 3 * 4 * case.config["hidden_size"] * case.seq * case.micro_batch
            assert 0 <= p - m <= masks + 1024, (k, p, m)
        else:
            assert abs(p - m) <= 0.03 * m, (k, p, m)
