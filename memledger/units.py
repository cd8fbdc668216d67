"""Sizes of numeric formats and the unit conversions at the edges.

Every byte count in the core is an exact integer. Formats smaller than a byte or carrying block
scales (fp8 with 1x128 fp32 scales, int4 with block scales, 8-bit optimizer states) are sized by
`format_bytes(fmt, n_values)`, never by `bits // 8`, so int4 never rounds to zero.
GiB (2**30) and GB (10**9) only appear in the conversion helpers below, always labelled.
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.errors import lookup

GIB = 1024**3
GB = 10**9


@dataclass(frozen=True, kw_only=True)
class NumberFormat:
    """A storage format: `bits` per value plus one `scale_bytes` scale per `block` values."""

    name: str
    bits: int
    block: int = 0
    scale_bytes: int = 0
    mantissa_bits: int = 0  # precision of the stored value, for the "bits lost" currency
    block2: int = 0  # double quantisation: one `scale2_bytes` constant per block2 scales
    scale2_bytes: int = 0
    note: str = ""

    def bytes_for(self, n_values: int) -> int:
        data = -(-n_values * self.bits // 8)
        if self.block:
            scales = -(-n_values // self.block)
            data += scales * self.scale_bytes
            if self.block2:
                data += -(-scales // self.block2) * self.scale2_bytes
        return data


FORMATS: dict[str, NumberFormat] = {
    f.name: f
    for f in (
        NumberFormat(name="fp32", bits=32, mantissa_bits=23),
        NumberFormat(name="bf16", bits=16, mantissa_bits=7),
        NumberFormat(name="fp16", bits=16, mantissa_bits=10),
        NumberFormat(name="fp8", bits=8, mantissa_bits=3, note="e4m3, no scales"),
        NumberFormat(name="int64", bits=64),
        NumberFormat(name="int32", bits=32),
        NumberFormat(name="bool", bits=8),
        NumberFormat(name="uint8", bits=8),
        # DeepSeek-V3 style activation caching: e4m3 with one fp32 scale per 1x128 tile.
        NumberFormat(name="fp8-e4m3-1x128", bits=8, block=128, scale_bytes=4, mantissa_bits=3,
                     note="fp8 e4m3 with a fp32 scale per 128 values (DeepSeek-V3 report §3.3)"),
        NumberFormat(name="int8-block128", bits=8, block=128, scale_bytes=4, mantissa_bits=7,
                     note="int8 with a fp32 absmax scale per 128 values"),
        NumberFormat(name="int4-block64", bits=4, block=64, scale_bytes=2, mantissa_bits=3,
                     note="int4 with a bf16 scale per 64 values (QLoRA-style block size)"),
        # Dettmers et al. 2021 (arXiv 2110.02861): block-wise 8-bit optimizer states, B = 2048.
        NumberFormat(name="int8-block2048", bits=8, block=2048, scale_bytes=4, mantissa_bits=7,
                     note="8-bit optimizer state, fp32 absmax per 2048 values (Dettmers 2021)"),
    )
}


def _quantised(name: str) -> NumberFormat | None:
    """Formats of a quantised base, named with their block sizes:
    "nf4:B:D" — NF4 (QLoRA, arXiv 2305.14314 §3): 4 bits per value, one absmax per B values,
      quantised to 8 bits with one fp32 constant per D absmax values (double quantisation,
      bitsandbytes `compress_statistics`); D = 0: fp32 absmax per B values, no second level.
    "int8row:K" / "fp8row:K" — 8 bits per value and one fp32 scale per row of K inputs
      (bitsandbytes Int8Params SCB; torchao float8 weight-only, per-row granularity)."""
    kind, _, rest = name.partition(":")
    parts = rest.split(":")
    if kind not in ("nf4", "int8row", "fp8row") or not all(x.isdigit() and len(x) < 8 for x in parts):
        return None
    nums = [int(x) for x in parts]
    if kind == "nf4" and len(nums) == 2 and nums[0] > 0:
        b, d = nums
        return NumberFormat(name=name, bits=4, block=b, scale_bytes=1 if d else 4, block2=d,
                            scale2_bytes=4 if d else 0, mantissa_bits=3)
    if kind != "nf4" and len(nums) == 1 and nums[0] > 0:
        return NumberFormat(name=name, bits=8, block=nums[0], scale_bytes=4,
                            mantissa_bits=7 if kind == "int8row" else 3)
    return None


def fmt(name: str) -> NumberFormat:
    if ":" in name:
        q = _quantised(name)
        if q is not None:
            return q
    return lookup("dtype", FORMATS, name, "format")


def format_bytes(name: str, n_values: int) -> int:
    """Exact bytes to store `n_values` values in format `name` (scales included)."""
    f = FORMATS.get(name)  # the plain formats directly: every static item asks
    return (f if f is not None else fmt(name)).bytes_for(n_values)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def gib(n_bytes: int) -> float:
    """Bytes to GiB (2**30) — for display only."""
    return n_bytes / GIB


def gb(n_bytes: int) -> float:
    """Bytes to decimal GB (10**9) — for display only."""
    return n_bytes / GB
