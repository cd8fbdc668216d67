"""Divisors of an integer in O(sqrt(n)) steps, and a short list of them for error messages.

An error message such as "tp must divide ffn_hidden; valid: ..." must not cost time in
proportion to the number a user typed (a prime near 10^12 took hours listing divisors by trial
up to n), nor print thousands of them: the list is cut to its smallest and largest entries.
"""
from __future__ import annotations

import math


def divisors(n: int) -> tuple[int, ...]:
    """Every positive divisor of n >= 1, ascending: trial division up to isqrt(n)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


def divisor_text(n: int, limit: int = 12) -> str:
    """'1, 2, 3, ...' with at most `limit` entries: the smallest, '...', the largest, the count."""
    ds = divisors(n)
    if len(ds) <= limit:
        return ", ".join(map(str, ds))
    head, tail = ds[: limit - 2], ds[-2:]
    return f"{', '.join(map(str, head))}, ..., {', '.join(map(str, tail))} ({len(ds)} in all)"
