"""The forward of one compiled, fully checkpointed torchtitan 2024-12 Llama block as the
allocations it makes, in op order, each freed after its last reader (inductor's generated code
frees a buffer after its last use; nothing is saved for backward under full AC but the block
input, which the activation row already holds).

Scope (`applies`, with torchtitan's loop: runtime.finalize): era 2024-12, full AC, `training.compile` (per-block
torch.compile, parallelisms/parallelize_llama.py `apply_compile`), dense GQA Llama layers (no
MLA, MoE or qk-norm). T = b·s/cp tokens, T/tp under SP; Hl = heads/tp, KVl = max(1, kv/tp),
d = head_dim, f = ffn/tp; fp8 = torchao Float8Linear on the block's linears (tensorwise: the
input cast to float8 before TP's all-gather, torchtitan docs/float8.md "float8 all-gather ... for
TP (by default for Float8Linear)"; `_scaled_mm` returns bf16).

  attention_norm out (T/tp·h)    fused RMSNorm kernel, fp32 math in registers
  [fp8 cast (T/tp·h·1)]          then TP's all-gather: T·h (1 B under fp8, else 2 B)
  wq, wk, wv outputs             T·Hl·d, T·KVl·d, T·KVl·d (bf16); the gathered input dies here
  rope (q, k)                    one fused kernel each: xq.float() ⊗ freqs_cis → type_as
  repeat_kv (k, v)               expand + reshape copies: T·Hl·d each (models/llama/model.py)
  SDPA out + logsumexp           T·Hl·d bf16, Hl·T fp32 (cp > 1: the ring, below)
  transpose(1, 2).contiguous()   T·Hl·d; [fp8 cast T·Hl·d·1]; wo's partial sum T·h
  reduce-scatter, residual       T/tp·h each
  ffn_norm, [fp8 cast], gather   as for the attention
  w1, w3, silu(w1)·w3            T·f each (the product one fused kernel); [fp8 cast T·f·1]
  w2's partial sum, RS           T·h, T/tp·h
Ring attention (cp > 1): torch distributed/tensor/experimental/_attention.py
`_templated_ring_attention` with torchtitan's default rotater, all-gather
(`experimental.context_parallel_rotate_method = "allgather"`, config_manager.py, Dec 2024;
torch `_AllGatherRotater`): cat(k, v) (2·Kv, Kv = T·Hl·d·2 B) all-gathered once (cp × 2·Kv),
each step's SDPA output and logsumexp merged into fp32 (`_SDPAMerger`, convert_to_f32 True: the
running out 2·Kv fp32, one fused update per step), cast back to bf16 at the end; load
balancing (default on) halves k, v on the steps i <= cp rank and q on the others: the last cp
rank's every step has a full-size output (the one modelled).
Ignores: the SDPA kernels' workspaces, float8 scales (scalars), the ring's backward
(`_templated_ring_attention_backward`: fp32 grad accumulators and the dk, dv rotation, inside
the recompute working set's one block), async TP (its fused all-gather-matmul buffers live in
symmetric memory, outside the caching allocator: the row is modelled as if off).
"""
from __future__ import annotations

from memledger.units import ceil_div

SOURCE = ("torchtitan 2024-12 models/llama/model.py (Attention.forward: repeat_kv, rope via "
          "view_as_complex, SDPA, transpose.contiguous; FeedForward w2(silu(w1(x)) * w3(x))), "
          "parallelisms/parallelize_llama.py apply_tp / apply_compile; torch "
          "distributed/tensor/experimental/_attention.py _templated_ring_attention, "
          "_AllGatherRotater, _SDPAMerger")


def applies(m, t, rt) -> bool:
    """The era, mode and layer type read (the caller checks the loop is torchtitan's)."""
    return (rt.torchtitan_version == "2024-12" and rt.torch_compile and t.recompute == "full"
            and m.mla is None and m.moe is None and not m.qk_norm)


class _Ops:
    """Signed op list: n > 0 allocates a tensor of n bytes (ids in order), ~k frees tensor k."""

    def __init__(self):
        self.ops, self.ids = [], {}

    def a(self, name: str, n: int) -> None:
        self.ids[name] = len(self.ids)
        self.ops.append(n)

    def f(self, *names: str) -> None:
        self.ops.extend(~self.ids[n] for n in names)


def forward_ops(m, t, p, float8: bool) -> tuple[int, ...]:
    """The block's forward allocations and frees (see the module docstring)."""
    tokens = ceil_div(t.micro_batch * t.seq, p.cp)
    local = ceil_div(tokens, p.tp) if p.sp else tokens
    h, d, f = m.hidden, m.head_dim, ceil_div(m.ffn_hidden, p.tp)
    hq, hkv = ceil_div(m.n_heads, p.tp), max(1, m.n_kv_heads // p.tp)
    o = _Ops()
    _gathered(o, "x1", local, tokens, h, p.tp, float8)
    o.a("q", 2 * tokens * hq * d)
    o.a("k", 2 * tokens * hkv * d)
    o.a("v", 2 * tokens * hkv * d)
    o.f("x1")
    o.a("q_rot", 2 * tokens * hq * d)
    o.f("q")
    o.a("k_rot", 2 * tokens * hkv * d)
    o.f("k")
    o.a("k_rep", 2 * tokens * hq * d)
    o.f("k_rot")
    o.a("v_rep", 2 * tokens * hq * d)
    o.f("v")
    _attention(o, tokens, hq, d, p.cp)
    o.f("q_rot", "k_rep", "v_rep")
    o.a("attn_t", 2 * tokens * hq * d)
    o.f("attn")
    _row_parallel(o, "attn_t", tokens * hq * d, local, tokens, h, p.tp, float8)
    o.a("h", 2 * local * h)
    o.f("rs_attn_t")
    _gathered(o, "x2", local, tokens, h, p.tp, float8)
    o.a("w1", 2 * tokens * f)
    o.a("w3", 2 * tokens * f)
    o.f("x2")
    o.a("act", 2 * tokens * f)
    o.f("w1", "w3")
    _row_parallel(o, "act", tokens * f, local, tokens, h, p.tp, float8)
    o.f("rs_act", "h")  # the residual sum is the next block's input (the activation row's)
    return tuple(o.ops)


def _gathered(o: _Ops, name: str, local: int, tokens: int, h: int, tp: int, fp8: bool) -> None:
    """A norm's output, cast to float8 (fp8), all-gathered over TP (tp > 1): leaves `name`."""
    o.a(name + "_norm", 2 * local * h)
    src = name + "_norm"
    if fp8:
        o.a(name + "_fp8", local * h)
        o.f(src)
        src = name + "_fp8"
    if tp > 1:
        o.a(name, (1 if fp8 else 2) * tokens * h)
        o.f(src)
    else:
        o.ids[name] = o.ids.pop(src)


def _row_parallel(o: _Ops, src: str, n_in: int, local: int, tokens: int, h: int, tp: int,
                  fp8: bool) -> None:
    """A row-parallel linear on `src` (n_in values): [fp8 cast], partial sum T·h, reduce-scatter
    to T/tp·h (tp > 1); leaves "rs_" + src."""
    if fp8:
        o.a(src + "_fp8", n_in)
        o.f(src)
        src_in = src + "_fp8"
    else:
        src_in = src
    o.a("mm_" + src, 2 * tokens * h)
    o.f(src_in)
    if tp > 1:
        o.a("rs_" + src, 2 * local * h)
        o.f("mm_" + src)
    else:
        o.ids["rs_" + src] = o.ids.pop("mm_" + src)


def _attention(o: _Ops, tokens: int, hq: int, d: int, cp: int) -> None:
    """SDPA's output ("attn", bf16) and logsumexp; under cp > 1 the ring's forward."""
    kv = 2 * tokens * hq * d  # one repeated k (or v) in bf16
    if cp == 1:
        o.a("attn", kv)
        o.a("lse", 4 * hq * tokens)
        o.f("lse")  # autograd would save it; under full AC nothing is saved
        return
    o.a("kv_cat", 2 * kv)
    o.a("kv_all", cp * 2 * kv)
    o.a("out0", kv)
    o.a("lse0", 4 * hq * tokens)
    o.a("acc0", 2 * kv)  # _SDPAMerger: out and lse in fp32
    o.f("out0", "kv_cat")  # the all-gather's input is released at its wait (step 1)
    for i in range(1, cp):
        o.a(f"out{i}", kv)  # load balance halves q only where i > cp rank: cp rank cp - 1's
        o.a(f"acc{i}", 2 * kv)
        o.f(f"out{i}", f"acc{i - 1}")
    o.a("attn", kv)
    o.f(f"acc{cp - 1}", "lse0", "kv_all")


def live_peak(ops: tuple[int, ...]) -> int:
    """The most bytes the op list holds at once."""
    sizes, live, best = [], 0, 0
    for n in ops:
        if n > 0:
            sizes.append(n)
            live += n
            best = max(best, live)
        else:
            live -= sizes[~n]
    return best
