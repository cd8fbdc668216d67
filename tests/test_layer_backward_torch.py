"""A dense decoder layer's backward working set, measured on the CPU, equals the ledger's
`dense_backward_bytes` to the byte: weights in the activation format (bf16, fp32) and amp, on
shapes where each of the formula's terms is the larger one. Marked `torch` (~5 s)."""
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from memledger.engine.layer_backward import measure  # noqa: E402
from memledger.ledger.activations.transients import dense_backward_bytes  # noqa: E402
from memledger.model.hf_config import from_hf_config  # noqa: E402
from memledger.engine.cases import tiny_llama  # noqa: E402
from memledger.specs import ParallelSpec, TrainSpec  # noqa: E402

pytestmark = pytest.mark.torch

SHAPES = [  # (h, ffn, heads, kv, b, s): down_proj's gradients / the product's two / a tie
    (128, 352, 4, 2, 1, 64), (128, 352, 4, 2, 1, 256), (128, 352, 4, 2, 2, 64),
    (256, 688, 8, 2, 1, 512), (512, 1376, 8, 8, 1, 128)]


@pytest.mark.parametrize("precision, dtype, amp", [("bf16", "bf16", False),
                                                   ("fp32", "fp32", False),
                                                   ("amp", "fp32", True)])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "h{}f{}b{}s{}".format(*s[:2], *s[4:]))
def test_dense_layer_backward_set_is_the_ledgers_formula(shape, precision, dtype, amp):
    h, f, a, g, b, s = shape
    m = from_hf_config(tiny_llama(h, 1, a, g, f, 256), name="probe")
    t = TrainSpec(micro_batch=b, seq=s, micro_batches=1, precision=precision, profile="hf-cpu")
    assert measure(h, f, a, g, b, s, dtype, amp) == dense_backward_bytes(m, t, ParallelSpec())
