"""One decoder layer's backward working set, measured (torch): what the layer's backward
allocates above its saved tensors, the incoming gradient and the parameters' existing .grad.

A transformers decoder layer (the tiny Llama of `cases.tiny_llama` with the dimensions given)
runs one step so that every .grad exists (persistent gradients), then a forward and a
backward under `probe.LiveBytes`; the working set is the backward's highest live bytes minus
the live bytes when it starts (all saved tensors alive). `dtype` is the weights' format;
`amp=True` runs fp32 weights under CPU bf16 autocast. Checked against
`memledger.ledger.activations.transients.dense_backward_bytes` by
tests/test_layer_backward_torch.py. Source: torch 2.13 CPU, transformers 5.24.
"""
from __future__ import annotations


def measure(h: int, ffn: int, heads: int, kv: int, b: int, s: int, dtype: str = "bf16",
            amp: bool = False) -> int:
    import torch

    from memledger.engine import probe
    from memledger.engine.cases import tiny_llama
    from memledger.engine.stage import build_hf
    wdt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    hf = build_hf(tiny_llama(h, 1, heads, kv, ffn, 256), dtype=wdt)
    layer, rot = hf.model.layers[0], hf.model.rotary_emb
    x = torch.randn(b, s, h, dtype=wdt, requires_grad=True)  # a stage's received input
    pos = torch.arange(s).unsqueeze(0)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            return layer(x, attention_mask=None, position_embeddings=rot(x, position_ids=pos),
                         position_ids=pos)
    dy = torch.randn(b, s, h, dtype=wdt)
    forward().backward(dy)  # every .grad exists from here on
    x.grad = None
    live = probe.LiveBytes(points=1)
    live.track(*hf.parameters(), *(p.grad for p in hf.parameters()), x, dy, *rot.buffers())
    with live:
        y = forward()
        start = live.current
        live.peak = start  # the backward's own peak
        y.backward(dy)
    return live.peak - start
