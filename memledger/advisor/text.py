"""The price of a currency in words, one function for the CLI and the Strategies page.

Each currency is priced in its own unit: recompute in FLOPs and seconds per step, quantisation in
mantissa bits (magnitude bits relative to the block maximum for int formats), offload in bytes per
step over a named link and the time it leaves exposed. Bytes per step are decimal GB (10^9).
"""
from __future__ import annotations

from memledger.advisor.answers import Currency


def flops_text(flops: int) -> str:
    return f"{flops / 1e12:,.1f} TFLOP" if flops >= 1e12 else f"{flops / 1e9:,.1f} GFLOP"


def _bits(c: Currency) -> str:
    rel = " relative to the block max" if c.policy.startswith("int") else ""
    return f"{c.bits_lost} mantissa bits{rel}"


def _offload(c: Currency) -> str:
    if c.link:
        return (f"{c.offload_bytes_per_step / 1e9:,.1f} GB/step over {c.link}, needs "
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
