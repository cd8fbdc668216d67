"""The price of a currency in words, one function for the CLI and the Strategies page.

Each currency is priced in its own unit: recompute in FLOPs and seconds per step, quantisation in
what the stored format keeps (`QUANT_PRICE`: a float format's mantissa bits and relative error, an
integer format's levels over its block's range — not "0 mantissa bits", which reads as free),
offload in bytes per step over a named link and the time it leaves exposed. Bytes per step are
GiB (2^30) like every byte count on the page; link speeds stay in the datasheets' GB/s (10^9).
"""
from __future__ import annotations

from memledger.advisor.answers import Currency


def flops_text(flops: int) -> str:
    return f"{flops / 1e12:,.1f} TFLOP" if flops >= 1e12 else f"{flops / 1e9:,.1f} GFLOP"


# What each quantised store keeps (memledger.specs.policy.QUANT_FORMATS, memledger.units): e4m3
# keeps 3 of bf16's 7 mantissa bits at any magnitude (the per-block scale sets the range, ±448 ×
# scale); an integer format keeps uniform steps over ±(block max), so a value well below its
# block's largest loses relative precision (100× below it, int8's step is ~40 % of the value).
QUANT_PRICE = {
    "fp8": "e4m3 + a scale per 128 values: 3 mantissa bits (bf16 has 7), ≤ 6.3 % relative "
           "rounding error at any magnitude",
    "int8": "int8 + a scale per 128 values: 255 uniform levels over ± the block's max, error "
            "≤ max/254 (0.4 % of the max; a value 100× below it can be off by 40 %)",
    "int4": "int4 + a scale per 64 values: 15 uniform levels over ± the block's max, error "
            "≤ max/14 (7 % of the max)",
}


def _bits(c: Currency) -> str:
    return QUANT_PRICE[c.policy.split("+")[0]]


def _offload(c: Currency) -> str:
    if c.link:
        return (f"{c.offload_bytes_per_step / 2**30:,.1f} GiB/step over {c.link}, needs "
                f"{c.required_bytes_per_s / 1e9:,.1f} of {c.link_bytes_per_s / 1e9:,.0f} GB/s, "
                f"exposed {c.exposed_s_per_step:.3f} s/step")
    if "offload-pp" in c.policy:
        return "nothing to move: no later pipeline rank has room (or pp = 1)"
    return "bandwidth not priced: no GPU given (--gpu)"


def price(c: Currency) -> str:
    """`c`'s cost in its own currency (a stacked policy such as fp8+offload-cpu pays both)."""
    if c.peak_bytes < 0:
        return "not valid for this configuration"
    if c.policy == "recompute":
        return f"{flops_text(c.recompute_flops_per_step)}/step ≈ {c.recompute_s_per_step:.3f} s"
    parts = []
    if c.policy.split("+")[0] in ("fp8", "int8", "int4"):
        parts.append(_bits(c))
    if "offload" in c.policy:
        parts.append(_offload(c))
    return "; ".join(parts) or "free"
