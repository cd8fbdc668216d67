"""The `hf` profile: what Hugging Face transformers 5.x causal LMs (Llama, Mixtral, Qwen2-MoE,
Qwen3-MoE, DeepSeek-V2, DeepSeek-V3 modules as written) save for backward, traced with
memledger.trace and written down per token. Checked exactly against traces in tests/test_hf_profile.py (transformers 5.24,
torch 2.13 CPU) and once against an H200 (torch 2.11 + cuDNN attention, transformers 5.17).

Precision, from the recipe: weights in the activation format (`model.to(bf16)`, or fp32) =
"pure"; fp32 weights with bf16 activations = "amp" (torch.autocast). Under amp the residual
stream and the outer RMSNorms run in fp32, every Linear saves its own bf16 cast of an fp32 input
(q, k, v each), and the routed experts run in fp32 (grouped_mm is not autocast-enabled, its
input is cast to the fp32 weight dtype).
RMSNorm keeps an fp32 copy of its input (the input itself when it is already fp32), the fp32
rstd, and the normalised input before the weight; the next Linear keeps the output.

Attention, from `train.attention`: "flash" = attn_implementation="sdpa" with the fused kernel
CUDA picks: q, k, v, output (shared with o_proj's input when q is (b,s,a,d)-laid out, i.e. not
for MLA), fp32 log-sum-exp. On an H200 (torch 2.11) that kernel is cuDNN for GQA and for MLA's
unequal q/v head dims; flash-attention saves the same. "eager" keeps fp32 softmax scores and
their act-format copy (a·s each), and K, V repeated to all heads. MLA's V is a view of the
kv_b_proj output, so that whole output (a·(dn+dv)) stays alive under the fused kernel, and under
eager when the micro-batch is one sequence (b > 1: the matmul keeps a copy of V alone).
CPU vs CUDA (`HFProfile(device="cpu")`): CPU sdpa uses flash-for-CPU when q, k, v head dims
match, which saves the same per-token tensors as CUDA; CUDA adds a philox seed and offset
(16 bytes per layer). For MLA (dv != dqk) CPU has no fused kernel and falls back to the math
path, which upcasts to fp32 and keeps q, k, v and the a·s probabilities in fp32.
In pure fp32 the MLA kv norm keeps its input itself: a split view of kv_a_proj's output, so the
rope part (kvr + dr values) stays alive with it. Under amp,
CUDA autocast runs `sum` in fp32 and CPU autocast does not: DeepSeek's top-k denominator.

MoE block: the router and routed experts by family (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3,
MoESpec.router) are in profiles/hf_moe.py. Here: the block's input, kept by the router's Linear
(Mixtral, Qwen) or upcast to an fp32 copy for DeepSeek's fp32 router, by the shared experts and
by Qwen2-MoE's shared_expert_gate (under amp one bf16 cast per reader), the shared experts as an
MLP, and for Qwen2-MoE sigmoid(gate(x)) · shared(x), whose product keeps the sigmoid (1 value)
and the shared output (h values).

Outside the layers: input ids (int64) and RoPE cos/sin (shared by all layers and all sequences
of the micro-batch, so s·d each, written as ⌈d/b⌉ per token; DeepSeek-V2 keeps one complex64
freqs_cis instead, s·dr/2 complex values, 4·dr bytes per position in every precision) on the
first stage; final norm,
head input, fp32 log-probabilities (cross-entropy upcasts the logits) and the int64 targets on
the last. Transient, one item: the fp32 gradients of the log-probabilities and
of the logits, alive together in log_softmax's backward (8 bytes per logit above the saved
log-probs: measured as the backward peak on the H200, bf16 and amp alike). The forward's own
peak there (bf16 logits + their fp32 copy, 6 bytes per logit) is smaller.
Full recompute (HF gradient checkpointing) keeps each layer's input only; the RoPE tables are
then held by the checkpoint frames (not saved tensors; still memory, still listed).
Selective: HF has none; we define it as dropping the classes Megatron's selective recompute
drops (attention core, norm outputs, activation outputs), whose inputs stay saved.
Ignores (constants, not per token): E int32 expert offsets per MoE layer, the loss's fp32 scalar
weight, the 8-byte extra label of a batch of one sequence (labels padded, not copied), the rng
state; parameter copies (autocast weight casts, DeepSeek's fp32 router weight cast) belong next
to the weights. Under amp the attention lse and MLA kernels are as in pure bf16.
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.ledger.activations.inventory import ActTensor as A
from memledger.ledger.activations.profiles.hf_moe import experts, family, router
from memledger.ledger.activations.profiles.megatron import _vocab
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec

SELECTIVE = frozenset({"attn_core", "norm_out", "mlp_act", "expert_act"})


@dataclass(frozen=True)
class _Mode:
    amp: bool  # fp32 weights under bf16 autocast
    # Format of the residual stream, outer-norm outputs and (grouped_mm) routed experts:
    # fp32 under amp, else the activation format.
    stream: str


def _mode(t: TrainSpec) -> _Mode:
    r = t.recipe
    amp = r.weight_fmt == "fp32" and r.act_fmt != "fp32" and r.param_fmt is None
    return _Mode(amp, "fp32" if amp else "act")


def _norm(name: str, d: int, rows: int, normed_fmt: str) -> list[A]:
    """RMSNorm over `d` values per token split in `rows` groups (heads for q/k norms)."""
    return [A(f"{name}.x_fp32", "norm_in", d, "fp32", flops=3 * d),
            A(f"{name}.rstd", "norm_in", rows, "fp32", flops=3 * d),
            A(f"{name}.normed", "norm_in", d, normed_fmt, flops=d)]


def _linear_in(name: str, d: int, readers: int, md: _Mode, split: str = "none") -> list[A]:
    """An outer norm's output read by `readers` Linears: kept once, or under amp once per
    reader (autocast casts the fp32 input anew for every Linear).
    Under sequence parallelism a transformers model is cut by DTensor (transformers' tp_plan,
    torchtitan), whose plans all-gather a block's input before its projections and whose
    Linears save that gathered input: full sequence on every tp rank (split "none"; Megatron
    saves the shard and gathers again in backward). Measured for q/k/v, the MLP and the head;
    an MoE block's input keeps "sp" (it is the router's, which a trace classifies as such).
    Measured by `memledger validate --engine torch` (docs/engine-validation.md)."""
    if md.amp:
        return [A(f"{name}.cast{i}" if readers > 1 else name, "norm_out", d, split=split, flops=d)
                for i in range(readers)]
    return [A(name, "norm_out", d, md.stream, split=split, flops=4 * d)]


def _eager_core(a: int, s: int, d: int, t: TrainSpec) -> list[A]:
    """Eager softmax: fp32 scores, and their copy in the activation format that the P·V matmul
    keeps (none when activations are fp32: the cast is a no-op and shares the storage)."""
    out = [A("attn.scores_fp32", "attn_core", a * s, "fp32", split="tp", flops=2 * a * s * d)]
    if t.recipe.act_fmt != "fp32":
        out.append(A("attn.probs", "attn_core", a * s, split="tp", flops=a * s))
    return out


@dataclass(frozen=True)
class HFProfile:
    """device: "cuda" (default, fused sdpa kernels) or "cpu" (CPU sdpa kernels);
    experts: "grouped_mm" (transformers 5.x default) or "eager" (per-expert loop)."""

    device: str = "cuda"
    experts: str = "grouped_mm"
    name: str = "hf"
    selective: frozenset = SELECTIVE
    # plain autograd runs the layers' backward: its working set is
    # activations.transients.dense_backward_bytes (a class attribute, not a field)
    autograd_layers = True

    def __post_init__(self):
        from memledger.errors import require_choice
        require_choice("device", self.device, ("cuda", "cpu"))
        require_choice("experts", self.experts, ("grouped_mm", "eager"))

    # -- attention ---------------------------------------------------------------------------
    def _gqa(self, m: ModelSpec, t: TrainSpec, md: _Mode) -> list[A]:
        h, a, g, dh, s = m.hidden, m.n_heads, m.n_kv_heads, m.head_dim, t.seq
        out = _linear_in("attn.qkv_in", h, 3, md)
        if m.qk_norm:
            out += _norm("attn.q_norm", a * dh, a, "act") + _norm("attn.k_norm", g * dh, g, "act")
        if t.attention == "eager":
            return out + [
                A("attn.q", "qkv", a * dh, split="tp", flops=2 * h * a * dh),
                A("attn.k_repeated", "qkv", a * dh, split="tp", flops=2 * h * g * dh),
                A("attn.v_repeated", "qkv", a * dh, split="tp", flops=2 * h * g * dh),
                A("attn.out", "attn_out", a * dh, split="tp", flops=2 * a * s * dh)] + _eager_core(a, s, dh, t)
        return out + [
            A("attn.q", "qkv", a * dh, split="tp", flops=2 * h * a * dh),
            A("attn.k", "qkv", g * dh, split="tp", flops=2 * h * g * dh),
            A("attn.v", "qkv", g * dh, split="tp", flops=2 * h * g * dh),
            A("attn.out", "attn_out", a * dh, split="tp", flops=4 * a * s * dh),
            A("attn.lse", "attn_core", a, "fp32", split="tp", flops=4 * a * s * dh)]

    def _mla(self, m: ModelSpec, t: TrainSpec, md: _Mode) -> list[A]:
        x, h, a, s = m.mla, m.hidden, m.n_heads, t.seq
        dqk, dv, kv_up = x.qk_dim, x.v_dim, a * (x.qk_nope_dim + x.v_dim)
        out = _linear_in("attn.down_in", h, 2, md)
        if x.q_lora_rank:
            out += _norm("attn.q_norm", x.q_lora_rank, 1, "act")
            out.append(A("attn.q_up_in", "norm_out", x.q_lora_rank, split="none",
                         flops=4 * x.q_lora_rank))
        kv_norm = _norm("attn.kv_norm", x.kv_lora_rank, 1, "act")
        if t.recipe.act_fmt == "fp32":  # the norm keeps its fp32 input itself: a split view of
            # kv_a_proj's output, whose storage also holds the rope part (kvr + dr values)
            kv_norm[0] = A("attn.kv_norm.x_fp32", "norm_in", x.kv_lora_rank + x.qk_rope_dim, "fp32",
                           flops=3 * x.kv_lora_rank)
        out += kv_norm
        out.append(A("attn.kv_up_in", "norm_out", x.kv_lora_rank, split="none",
                     flops=4 * x.kv_lora_rank))
        q = A("attn.q", "qkv", a * dqk, split="tp", flops=2 * (x.q_lora_rank or h) * a * dqk)
        o_in = A("attn.o_in", "attn_out", a * dv, split="tp", flops=a * dv)
        # V is a split view of kv_b_proj's output: the fused kernel keeps it, and so the whole
        # output. A batched matmul (eager, math) reshapes it to (b·a, s, dv): still a view when
        # b = 1, a contiguous copy of V alone when b > 1.
        kv = A("attn.kv_up_out", "qkv", kv_up, split="tp", flops=2 * x.kv_lora_rank * kv_up)
        v_mm = kv_up if t.micro_batch == 1 else a * dv
        k = A("attn.k", "qkv", a * dqk, split="tp", flops=a * dqk)
        if t.attention == "eager":
            v = A("attn.v" if t.micro_batch > 1 else "attn.kv_up_out", "qkv", v_mm, split="tp",
                  flops=2 * x.kv_lora_rank * v_mm)
            return out + [q, k, v, o_in] + _eager_core(a, s, dqk, t)
        if self.device == "cpu":  # math fallback: fp32 upcasts of q, k, v and the probabilities
            v_f32 = v_mm if t.recipe.act_fmt == "fp32" else a * dv  # fp32 input: no upcast copy
            return out + [
                A("attn.q_fp32", "qkv", a * dqk, "fp32", split="tp", flops=a * dqk),
                A("attn.k_fp32", "qkv", a * dqk, "fp32", split="tp", flops=a * dqk),
                A("attn.v_fp32", "qkv", v_f32, "fp32", split="tp", flops=a * dv),
                A("attn.probs_fp32", "attn_core", a * s, "fp32", split="tp", flops=2 * a * s * dqk),
                o_in]
        return out + [q, k, kv, o_in,
                      A("attn.out", "attn_out", a * dv, split="tp", flops=4 * a * s * dqk),
                      A("attn.lse", "attn_core", a, "fp32", split="tp", flops=4 * a * s * dqk)]

    # -- feed-forward ------------------------------------------------------------------------
    @staticmethod
    def _mlp(prefix: str, h: int, f: int, md: _Mode, with_input: bool = True) -> list[A]:
        out = _linear_in(f"{prefix}.in", h, 2, md) if with_input else []
        return out + [A(f"{prefix}.gate_out", "mlp_fc1", f, split="tp", flops=2 * h * f),
                      A(f"{prefix}.up_out", "mlp_fc1", f, split="tp", flops=2 * h * f),
                      A(f"{prefix}.act_out", "mlp_act", f, split="tp", flops=4 * f),
                      A(f"{prefix}.down_in", "mlp_act", f, split="tp", flops=f)]

    def _moe(self, m: ModelSpec, md: _Mode, pure_fp32: bool) -> list[A]:
        x, h, fam = m.moe, m.hidden, family(m)
        shared = x.n_shared > 0
        out: list[A] = []
        # Who keeps the norm output: the router's Linear (Mixtral/Qwen; DeepSeek only when its
        # fp32 upcast is a no-op), the shared experts' gate/up and Qwen2's shared_expert_gate;
        # under amp one cast each.
        router_reads_norm = not fam.startswith("deepseek") or pure_fp32
        if md.amp:
            out += _linear_in("moe.router_in", h, 1, md, split="sp")
            if shared:
                out += _linear_in("shared.in", h, 2, md, split="sp")
            if x.shared_gate:
                out += _linear_in("shared.gate_in", h, 1, md, split="sp")
        else:
            if router_reads_norm or shared:
                out.append(A("moe.in", "norm_out", h, flops=4 * h))
            if not router_reads_norm:
                out.append(A("moe.router_in_fp32", "router", h, "fp32", flops=h))
        out += router(m, md, fam, self.device) + experts(m, md, fam, self.experts)
        if shared:
            out += self._mlp("shared", h, x.n_shared * x.shared_ffn_size, md, with_input=False)
        if x.shared_gate:  # sigmoid(shared_expert_gate(x)) * shared_expert(x): the mul keeps both
            out += [A("shared.gate_sigmoid", "mlp_act", 1, flops=2 * h),
                    A("shared.out", "mlp_fc1", h, flops=h)]
        return out

    # -- Profile protocol --------------------------------------------------------------------
    def layer(self, m: ModelSpec, kind: str, t: TrainSpec, p: ParallelSpec) -> tuple[A, ...]:
        md, h = _mode(t), m.hidden
        attn = self._mla(m, t, md) if m.mla is not None else self._gqa(m, t, md)
        if kind == "moe":
            ffn = self._moe(m, md, t.recipe.act_fmt == "fp32")
        else:
            ffn = self._mlp("mlp", h, m.ffn_hidden, md)
        return tuple(_norm("norm1", h, 1, md.stream) + attn + _norm("norm2", h, 1, md.stream) + ffn)

    def first_stage(self, m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> tuple[A, ...]:
        if not m.vocab:
            return ()
        rope = m.mla.qk_rope_dim if m.mla is not None else m.head_dim
        # cos/sin are (1, s, d), shared by the micro-batch's sequences (position_ids default to
        # one arange): ⌈d/b⌉ per token, exact when b divides d. They take the embedding's dtype.
        rope, fmt = -(-rope // t.micro_batch), _mode(t).stream
        ids = A("embedding.ids", "embedding", 1, "int64", split="none")
        if m.moe is not None and m.moe.router == "deepseek_v2":
            # transformers' DeepSeek-V2 rotates with one complex64 freqs_cis (dr/2 complex values
            # per position, whatever the precision) in place of cos and sin.
            return ids, A("rope.freqs_cis", "rope", rope, "fp32", split="none")
        return (ids,
                A("rope.cos", "rope", rope, fmt, split="none"),
                A("rope.sin", "rope", rope, fmt, split="none"))

    def last_stage(self, m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> tuple[A, ...]:
        if not m.vocab:
            return ()
        md, v = _mode(t), _vocab(m, t, p)
        return tuple(_norm("final_norm", m.hidden, 1, md.stream)
                     + _linear_in("head.in", m.hidden, 1, md)
                     + [A("loss.logprobs_fp32", "logits", v, "fp32", split="tp", flops=2 * m.hidden * v),
                        A("loss.target", "loss", 1, "int64", split="none")])

    def layer_input(self, m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> A:
        return A("layer.input", "layer_input", m.hidden, _mode(t).stream)

    def transients(self, m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> tuple[A, ...]:
        if not m.vocab:
            return ()
        v = _vocab(m, t, p)
        # Backward: at log_softmax's backward the fp32 gradient of the log-probs and the fp32
        # gradient of the logits are alive together. Forward (class "forward", summed by the
        # ledger into one forward-phase working set): the head's logits in the activation format
        # and their fp32 upcast, both alive while log_softmax runs (measured on the H200).
        return (A("loss.logit_grads_fp32", "logits", 2 * v, "fp32", split="tp", pieces=2),
                A("loss.logits", "forward", v, "act", split="tp"),
                A("loss.logits_fp32_upcast", "forward", v, "fp32", split="tp"))
