"""Fit per-token byte formulas to traces taken at several sizes, and check them on another.

Each traced storage is matched across traces by (layer, module path inside the layer, dtype,
class, order of save); where a group's count differs between traces (routing-dependent saves of
an eager per-expert loop) the group is summed into one row. For a fixed micro-batch of b
sequences, with T = b·s tokens and w = traced width / full width (memledger.trace.shrink),
a row's bytes are
    bytes(s, w) = T·A(w) + T·s·Q(w) + C(w)       A, Q, C affine in w
(Q: eager attention's s×s tensors; C: per-micro-batch constants such as padded labels or
expert offsets). The seq terms are chosen per row as the smallest set, in the order below,
that reproduces every traced seq exactly at every traced width (three or more seqs fit all
three), each coefficient then a line through the widths (one width: a constant). Arithmetic is
exact (fractions). `residual` predicts another traced size and compares per layer and in total.
Pure: reads Trace objects, no torch.
Ignores: parameter copies (weight-sized, see records.py); terms in s³ or beyond; anything not
affine in the widths (it shows as a residual).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction as F
from itertools import combinations

from memledger.trace.records import SavedTensor, Trace

TERMS = ("T", "Ts", "1")
_ORDER = (("T",), ("Ts",), ("1",), ("T", "1"), ("T", "Ts"), ("Ts", "1"), ("T", "Ts", "1"))


class FitError(ValueError):
    """The traces cannot be fitted (too few sizes); the message says which."""


@dataclass(frozen=True)
class Point:
    """One traced size: `trace` of a micro-batch of `batch` sequences of `seq` tokens, at
    `width` = traced / full widths (1 for a model traced at its own size)."""

    seq: int
    width: F
    trace: Trace
    batch: int = 1


@dataclass(frozen=True)
class Coef:
    """An affine function of the width: full + slope·(w − 1); `full` is its value at w = 1."""

    full: F
    slope: F = F(0)

    def at(self, w: F) -> F:
        return self.full + self.slope * (w - 1)


@dataclass(frozen=True)
class Row:
    layer: int | None  # traced layer index; None outside the layers
    module: str  # module path inside the layer ("" = root)
    dtype: str
    cls: str
    n: int | None  # order within its (layer, module, dtype, cls) group; None = group summed
    shape: str  # per-token shape of the saved view at full width ("s": seq-sized, "?": varies)
    terms: dict  # term ("T", "Ts", "1") -> Coef, in bytes
    idx: int = 0  # order among the rows of its (layer, module): the name's number

    def bytes_at(self, seq: int, w: F, batch: int) -> F:
        T = batch * seq
        basis = {"T": T, "Ts": T * seq, "1": 1}
        return sum((c.at(w) * basis[k] for k, c in self.terms.items()), F(0))

    def full(self, term: str) -> F:
        c = self.terms.get(term)
        return c.full if c else F(0)

    @property
    def name(self) -> str:
        where = self.module or ("(root)" if self.layer is None else "(layer)")
        return f"{where}#{self.idx if self.n is not None else 'all'}"


# -- matching ------------------------------------------------------------------------------
def _rel(x: SavedTensor) -> str:
    if x.layer is None:
        return x.module
    return x.module.split(f"layers.{x.layer}.", 1)[-1] if f"layers.{x.layer}." in x.module else ""


def _groups(trace: Trace) -> dict[tuple, list[SavedTensor]]:
    out: dict[tuple, list[SavedTensor]] = {}
    for x in trace.activations:
        out.setdefault((x.layer, _rel(x), x.dtype, x.cls), []).append(x)
    return out


def matched(points: list[Point]) -> dict[tuple, list[list[SavedTensor]]]:
    """key (layer, module, dtype, cls, n) -> per point, the storages of that row."""
    per_point = [_groups(p.trace) for p in points]
    keys = list(dict.fromkeys(k for g in per_point for k in g))
    out = {}
    for k in keys:
        lists = [g.get(k, []) for g in per_point]
        if len({len(xs) for xs in lists}) == 1:
            for n in range(len(lists[0])):
                out[k + (n,)] = [[xs[n]] for xs in lists]
        else:  # the group's count varies between traces: one summed row
            out[k + (None,)] = lists
    return out


# -- exact linear algebra --------------------------------------------------------------------
def _solve(a: list[list[F]], b: list[F]) -> list[F] | None:
    """Solve the square system a·x = b exactly; None when singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        piv = next((r for r in range(c, n) if m[r][c] != 0), None)
        if piv is None:
            return None
        m[c], m[piv] = m[piv], m[c]
        for r in range(n):
            if r != c and m[r][c] != 0:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def _basis(term: str, seq: int, batch: int) -> int:
    return {"T": batch * seq, "Ts": batch * seq * seq, "1": 1}[term]


def _fit_seq(samples: list[tuple[int, int, int]], terms: tuple) -> list[F] | None:
    """Coefficients of `terms` reproducing every (seq, batch, bytes) sample exactly, or None."""
    distinct = list({s: (s, b, y) for s, b, y in samples}.values())
    if len(distinct) < len(terms):
        return None
    for pick in combinations(distinct, len(terms)):
        x = _solve([[F(_basis(t, s, b)) for t in terms] for s, b, _ in pick], [F(y) for *_, y in pick])
        if x is not None:
            break
    else:
        return None
    ok = all(sum(c * _basis(t, s, b) for c, t in zip(x, terms)) == y for s, b, y in samples)
    return x if ok else None


def _line(ws: list[F], ys: list[F]) -> Coef:
    """Least-squares line through (w, y), as a Coef (exact through two points)."""
    if len(set(ws)) == 1:
        return Coef(sum(ys, F(0)) / len(ys))
    n, sw, sy = len(ws), sum(ws, F(0)), sum(ys, F(0))
    sww, swy = sum((w * w for w in ws), F(0)), sum((w * y for w, y in zip(ws, ys)), F(0))
    slope = (n * swy - sw * sy) / (n * sww - sw * sw)
    icpt = (sy - slope * sw) / n
    return Coef(icpt + slope, slope)


def _fit_row(points: list[Point], sizes: list[int]) -> dict:
    widths = sorted({p.width for p in points})
    by_w = {w: [(p.seq, p.batch, y) for p, y in zip(points, sizes) if p.width == w] for w in widths}
    n_seqs = min(len({s for s, _, _ in v}) for v in by_w.values())
    for terms in _ORDER:
        if len(terms) > n_seqs:
            break
        fits = {w: _fit_seq(v, terms) for w, v in by_w.items()}
        if all(f is not None for f in fits.values()):
            return {t: _line(widths, [fits[w][i] for w in widths]) for i, t in enumerate(terms)}
    # Nothing reproduces the traces exactly: the fullest model the seqs allow, solved on the
    # first seqs (the residual check shows how far off it is).
    terms = _ORDER[-1] if n_seqs >= 3 else ("T", "1") if n_seqs == 2 else ("T",)
    coefs = {w: _solve([[F(_basis(t, s, b)) for t in terms] for s, b, _ in v[:len(terms)]],
                       [F(y) for *_, y in v[:len(terms)]]) or [F(0)] * len(terms)
             for w, v in by_w.items()}
    return {t: _line(widths, [coefs[w][i] for w in widths]) for i, t in enumerate(terms)}


# -- shapes ----------------------------------------------------------------------------------
def _shape(points: list[Point], shapes: list[tuple | None]) -> str:
    """Per-token shape at full width: token dims dropped, extra seq dims as "s", widths scaled."""
    got = [(p, s) for p, s in zip(points, shapes) if s is not None]
    if not got or len({len(s) for _, s in got}) != 1:
        return "?"
    p0, s0 = got[0]
    other_seq = next(((p, s) for p, s in got if p.width == p0.width and p.seq != p0.seq), None)
    other_w = next(((p, s) for p, s in got if p.seq == p0.seq and p.width != p0.width), None)
    seq_dims = [i for i in range(len(s0)) if other_seq and other_seq[1][i] != s0[i]]
    out, rows = [], ""
    for i, d in enumerate(s0):
        if i in seq_dims:
            if i != seq_dims[0]:
                out.append("s")
            elif d not in (p0.seq, p0.batch * p0.seq):
                rows = f"{F(d, p0.batch * p0.seq)}× "  # rows per token (routed: top-k)
            continue
        if i == 0 and seq_dims and d == p0.batch:
            continue  # the batch dim
        if other_w:
            (p1, s1) = other_w
            slope = F(s1[i] - d) / (p1.width - p0.width)
            d = d + slope * (1 - p0.width)
        out.append(str(d))
    return rows + "[" + ", ".join(out) + "]"


def fit(points: list[Point]) -> list[Row]:
    """Fit every matched row over `points` (at least two seqs; widths optional)."""
    if len({p.seq for p in points}) < 2:
        raise FitError("fitting needs traces at two or more sequence lengths")
    if len({p.batch for p in points}) != 1:
        raise FitError("all fit traces must use the same micro-batch")
    rows, seen = [], {}
    for (layer, module, dtype, cls, n), per_point in matched(points).items():
        sizes = [sum(x.storage_bytes for x in xs) for xs in per_point]
        shapes = [xs[0].shape if len(xs) == 1 else None for xs in per_point]
        idx = seen[layer, module] = seen.get((layer, module), -1) + 1
        shape = _shape(points, shapes) if n is not None else "?"
        if any(len(xs) == 1 and xs[0].tensor_bytes < xs[0].storage_bytes for xs in per_point):
            shape += " (view)"  # a saved view: its whole (larger) storage is what is kept
        rows.append(Row(layer, module, dtype, cls, n, shape, _fit_row(points, sizes), idx))
    return rows


def residual(rows: list[Row], point: Point) -> dict:
    """Predicted vs traced bytes at `point`, per traced layer, outside, and in total."""
    traced = {str(k): v for k, v in point.trace.layer_bytes().items()}
    traced["outside"] = point.trace.outside_bytes
    pred: dict[str, F] = {k: F(0) for k in traced}
    for r in rows:
        k = "outside" if r.layer is None else str(r.layer)
        pred[k] = pred.get(k, F(0)) + r.bytes_at(point.seq, point.width, point.batch)
    out = {}
    for k in list(traced) + [k for k in pred if k not in traced]:
        p, t = round(pred.get(k, 0)), traced.get(k, 0)
        out[k] = {"predicted_bytes": p, "traced_bytes": t, "rel_error": (p - t) / t if t else 0.0}
    p, t = sum(v["predicted_bytes"] for v in out.values()), sum(v["traced_bytes"] for v in out.values())
    out["total"] = {"predicted_bytes": p, "traced_bytes": t, "rel_error": (p - t) / t if t else 0.0}
    return out
