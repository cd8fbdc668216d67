"""Claims about memledger.trace: what counts as saved, how it is deduplicated and attributed."""
from __future__ import annotations

import subprocess
import sys

import pytest

from memledger.trace import PARAM_COPY, SHARED, Trace, TraceError, layer_of, trace_saved

torch = pytest.importorskip("torch")
nn = torch.nn
pytestmark = pytest.mark.torch


class Block(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        return self.proj(x).sin()  # Linear keeps x (and its weight); sin keeps its input


class Stack(nn.Module):
    def __init__(self, n=3, d=8):
        super().__init__()
        self.layers = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, 4, bias=False)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x).sum()


def test_linear_keeps_its_input_not_its_weight():
    lin = nn.Linear(16, 32)
    x = torch.randn(5, 16, requires_grad=True)
    tr = trace_saved(lin, (x,))
    assert [t.storage_bytes for t in tr.tensors] == [5 * 16 * 4]  # weight and bias excluded
    assert tr.tensors[0].shape == (5, 16)


def test_views_of_parameters_and_buffers_are_excluded():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 8))
            self.register_buffer("scale", torch.full((4,), 2.0))

        def forward(self, x):
            y = x @ self.w[:4, :]  # the matmul keeps x and a view of the parameter
            z = x * self.scale  # the multiply keeps the buffer
            return y.sum() + z.sum()

    x = torch.randn(3, 4, requires_grad=True)
    tr = trace_saved(M(), (x,))
    assert [(t.shape, t.storage_bytes) for t in tr.tensors] == [((3, 4), 3 * 4 * 4)]
    assert tr.param_copy_bytes == 0


def test_views_of_one_storage_are_counted_once_with_the_whole_storage():
    class M(nn.Module):
        def forward(self, x):
            y = x.exp()  # exp keeps its output y
            a, b = y[:, :2], y[:, 2:]
            return a.sin().sum() + b.cos().sum()  # both keep a view of y

    x = torch.randn(4, 6, requires_grad=True)
    tr = trace_saved(M(), (x,))
    assert len(tr.tensors) == 1
    (t,) = tr.tensors
    assert t.storage_bytes == 4 * 6 * 4 and t.views == 3


def test_a_saved_slice_keeps_its_whole_base_alive():
    class M(nn.Module):
        def forward(self, x):
            base = x * 2.0  # a scalar multiply saves nothing
            return base[:, :1].sin().sum()  # sin keeps a 1-column view of base

    x = torch.randn(10, 100, requires_grad=True)
    (t,) = trace_saved(M(), (x,)).tensors
    assert (t.tensor_bytes, t.storage_bytes) == (10 * 1 * 4, 10 * 100 * 4)


def test_attribution_to_layers_and_outside():
    x = torch.randn(2, 8, requires_grad=True)
    tr = trace_saved(Stack(3), (x,))
    # each layer: the Linear's input and the sin's input, 2x8 fp32 each
    assert tr.layer_bytes() == {0: 128, 1: 128, 2: 128}
    assert tr.outside_bytes == 2 * 8 * 4  # the head keeps its input
    assert {t.module for t in tr.in_layer(1)} == {"layers.1.proj", "layers.1"}
    assert layer_of("model.layers.12.mlp") == 12 and layer_of("head") is None
    assert layer_of("model.sublayers.3") is None


def test_a_storage_saved_by_several_layers_is_charged_outside():
    class Layer(nn.Module):
        def forward(self, x, table):
            return x * table  # keeps the shared table (x requires grad)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(2))

        def forward(self, x):
            table = torch.arange(8.0)  # one tensor for all layers, like RoPE cos/sin
            for layer in self.layers:
                x = layer(x, table)
            return x.sum()

    tr = trace_saved(M(), (torch.randn(8, requires_grad=True),))
    shared = [t for t in tr.tensors if t.cls == SHARED]
    assert len(shared) == 1 and shared[0].layer is None and shared[0].views == 2


def test_saves_of_a_discarded_branch_are_not_counted():
    class M(nn.Module):
        def forward(self, x):
            _unused = x.exp()  # exp keeps its output, but nothing reaches it after forward
            return x.sin().sum()  # sin keeps x

    x = torch.randn(3, 5, requires_grad=True)
    (t,) = trace_saved(M(), (x,)).tensors
    assert t.storage_bytes == 3 * 5 * 4


def test_autocast_weight_casts_are_parameter_copies_not_activations():
    lin = nn.Linear(16, 32, bias=False)
    x = torch.randn(4, 16, requires_grad=True)
    tr = trace_saved(lin, (x,), autocast_dtype=torch.bfloat16)
    assert tr.param_copy_bytes == 16 * 32 * 2  # the bf16 weight, alive until backward
    assert tr.total_bytes == 4 * 16 * 2  # the bf16 cast of the input


def test_hooks_are_removed_and_the_model_still_trains():
    m, x = Stack(2), torch.randn(2, 8, requires_grad=True)
    trace_saved(m, (x,))
    assert all(not mod._forward_hooks and not mod._forward_pre_hooks for mod in m.modules())
    m(x).backward()
    assert m.layers[0].proj.weight.grad is not None


@pytest.mark.parametrize("model,inputs,message", [
    ("not a module", {}, "torch.nn.Module"),
    (nn.Linear(2, 2), "x", "dict of keyword arguments or a tuple"),
    (nn.Linear(2, 2), (torch.randn(3, 5),), "traced forward failed: RuntimeError"),
])
def test_malformed_input_gives_a_clear_error(model, inputs, message):
    with pytest.raises(TraceError, match=message):
        trace_saved(model, inputs)


def test_a_forward_that_saves_nothing_is_an_error():
    lin = nn.Linear(4, 4).requires_grad_(False)
    with pytest.raises(TraceError, match="saved nothing for backward"):
        trace_saved(lin, (torch.randn(2, 4),))


def test_json_round_trip():
    tr = trace_saved(Stack(2), (torch.randn(2, 8, requires_grad=True),))
    back = Trace.from_json(tr.to_json())
    assert back == tr and back.layer_bytes() == tr.layer_bytes()


def test_importing_memledger_does_not_import_torch():
    code = ("import sys, memledger, memledger.trace, memledger.ledger.activations;"
            "memledger.ledger.activations.get_profile('hf');"
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_hf_llama_classes():
    """On a tiny Llama, eager attention's fp32 scores are classed attn_core, the fp32 log-probs
    logits, and per layer the classes add up to the layer total."""
    transformers = pytest.importorskip("transformers")
    from memledger.trace import trace_causal_lm
    transformers.logging.set_verbosity_error()
    cfg = transformers.LlamaConfig(hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                   intermediate_size=48, num_hidden_layers=2, vocab_size=64)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    tr = trace_causal_lm(model.to(torch.bfloat16), batch=1, seq=24)
    scores = [t for t in tr.in_layer(1) if t.dtype == "float32" and t.shape == (1, 2, 24, 24)]
    assert len(scores) == 1 and scores[0].cls == "attn_core"
    assert tr.by_class(None)["logits"] == 24 * 64 * 4
    assert sum(tr.by_class(1).values()) == tr.layer_bytes()[1]
    assert {"norm_in", "norm_out", "qkv", "attn_core", "attn_out", "mlp_fc1", "mlp_act"} <= set(tr.by_class(1))


def test_backward_through_the_tracer_gives_the_same_gradients():
    from memledger.trace import SavedTensorTracer
    torch.manual_seed(0)
    m, x = Stack(2), torch.randn(2, 8)
    with SavedTensorTracer(m) as tr:
        loss = m(x)
    loss.backward()  # unpacks the tracer's handles
    traced = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x).backward()
    assert tr.trace.total_bytes > 0
    assert all(torch.equal(a, p.grad) for a, p in zip(traced, m.parameters()))


def test_traced_profile_reproduces_its_trace(tmp_path):
    """A trace saved as JSON and registered as traced:<name> predicts the traced layer and
    outside bytes (less the loss's scalar weight), and scales eager s×s tensors with seq."""
    transformers = pytest.importorskip("transformers")
    from memledger.ledger.activations import get_profile, tensor_bytes
    from memledger.specs import ModelSpec, ParallelSpec, TrainSpec
    from memledger.trace import trace_causal_lm
    from memledger.trace.profile import register_traced
    transformers.logging.set_verbosity_error()
    cfg = transformers.LlamaConfig(hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                   intermediate_size=48, num_hidden_layers=2, vocab_size=64)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    tr = trace_causal_lm(model.to(torch.bfloat16), batch=2, seq=24)
    path = tmp_path / "tiny-llama.json"
    path.write_text(tr.to_json())
    name = register_traced(str(path))
    assert name == "traced:tiny-llama"
    m = ModelSpec(name="tiny", n_layers=2, hidden=32, n_heads=2, n_kv_heads=1, head_dim=16,
                  ffn_hidden=48, vocab=64)
    p, prof = ParallelSpec(), get_profile(name)

    def total(xs, t):
        return sum(tensor_bytes(x, m, t, p) for x in xs)
    t = TrainSpec(micro_batch=2, seq=24, precision="bf16", profile=name, attention="eager")
    assert total(prof.layer(m, "dense", t, p), t) == tr.layer_bytes()[1]
    assert total(prof.first_stage(m, t, p) + prof.last_stage(m, t, p), t) == tr.outside_bytes - 4
    t2 = TrainSpec(micro_batch=2, seq=48, precision="bf16", profile=name, attention="eager")
    core = [x for x in prof.layer(m, "dense", t2, p) if x.cls == "attn_core"]
    assert sorted(x.values for x in core) == [2 * 48, 2 * 48]  # fp32 scores, bf16 probs: a·s each
    assert get_profile("hf").name == "hf"  # builtins still load after a traced registration


def test_register_traced_rejects_a_bad_file(tmp_path):
    from memledger.errors import SpecError
    from memledger.trace.profile import register_traced
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(SpecError, match="not a memledger trace JSON"):
        register_traced(str(bad))
    with pytest.raises(SpecError, match="cannot read trace"):
        register_traced(str(tmp_path / "missing.json"))
