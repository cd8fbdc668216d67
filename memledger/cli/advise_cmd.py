"""`memledger advise`: seed 1's four questions for one configuration, and a plan that fits.

Same flags as `ledger`, plus --target-gib (default: the --gpu's HBM). --json prints the answers
as one object with integer bytes."""
from __future__ import annotations

import json
import math
from dataclasses import asdict

from memledger.advisor import advise
from memledger.advisor.text import flops_text, price
from memledger.cli.args import add_config_args, specs_from_args
from memledger.errors import SpecError
from memledger.ledger import build_ledger
from memledger.units import GIB, gib


def add(sub) -> None:
    p = sub.add_parser("advise", help="the four questions: static rows, activations, staircase, buffers")
    add_config_args(p)
    p.add_argument("--target-gib", type=float, default=None,
                   help="memory target per GPU in GiB (default: the --gpu's capacity)")
    p.add_argument("--json", action="store_true", help="one JSON object, bytes as integers")
    p.set_defaults(run=run)


def _jsonable(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def advice_dict(a) -> dict:
    return _jsonable(asdict(a))


def run(args) -> int:
    m, p, t, rt, hw = specs_from_args(args)
    target = None
    if args.target_gib is not None:
        if not 0 < args.target_gib <= 100_000:
            raise SpecError("target_gib", f"must be in (0, 100000], got {args.target_gib}")
        target = int(args.target_gib * GIB)
    a = advise(build_ledger(m, p, t, rt, hw), target, args.mfu)
    print(json.dumps(advice_dict(a)) if args.json else render(a))
    return 0


def _g(n: int) -> str:
    return f"{gib(n):.2f} GiB"


def render(a) -> str:
    s, act, st, b, pl = a.static, a.activations, a.staircase, a.buffers, a.plan
    verdict = "fits" if a.fits else f"does NOT fit (over by {_g(a.peak_bytes - a.target_bytes)})"
    out = [f"most loaded: pp rank {a.most_loaded_rank}, {_g(a.peak_bytes)} against {_g(a.target_bytes)}: {verdict}",
           "", f"1. static rows: {_g(s.static_bytes)} (" + ", ".join(f"{k} {_g(v)}" for k, v in s.rows.items())
           + f"); budget after activations/buffers/runtime {_g(s.budget_bytes)}"
           + (" — under budget" if s.under_budget else f" — smallest change: {s.smallest or 'none of these'}")]
    for o in s.options:
        out.append(f"   {o.label:<44} " + (f"invalid: {o.error}" if o.error else
                   f"static {_g(o.static_bytes)}, peak {_g(o.peak_bytes)}{'  fits' if o.fits else ''}"))
    out += ["", f"2. activations: {_g(act.activation_bytes)}; largest layer {act.largest_layer} "
            f"({_g(act.largest_layer_bytes)} per layer per micro-batch); largest tensor "
            f"{act.largest_tensor} [{act.largest_tensor_class}] {_g(act.largest_tensor_bytes)} "
            f"over {act.largest_tensor_copies:,} copies (layers × micro-batches), "
            f"{_g(act.largest_tensor_bytes // max(act.largest_tensor_copies, 1))} each"]
    for c in act.currencies:
        out.append(f"   {c.policy:<12} saves {_g(c.saved_bytes):>12}  costs {price(c)}"
                   f"{'  → fits' if c.fits else ''}")
    mb = act.smaller_micro_batch
    out.append(f"   smaller micro-batch, no offload: {mb.micro_batch} × {mb.micro_batches} per step → "
               f"{_g(mb.peak_bytes)}" if mb else "   smaller micro-batch: none fits without offload")
    out += ["", f"3. staircase: activations per rank " + ", ".join(f"{gib(x):.1f}" for x in st.activation_bytes)
            + f" GiB; first/last = {st.steepness:.2f}"]
    if st.transfers:
        out.append("   levelled activations " + ", ".join(f"{gib(x):.1f}" for x in st.levelled_activation_bytes)
                   + " GiB")
        out.append("   levelled peaks " + ", ".join(f"{gib(x):.1f}" for x in st.levelled_peak_bytes)
                   + f" GiB; {st.bytes_per_step / 1e9:.1f} GB/step moved; "
                   + ("fits after levelling" if st.fits_after and not st.fits_before else
                      "fits" if st.fits_after else "still over"))
        out += [f"   rank {x.src} → rank {x.dst}: {_g(x.bytes)}" for x in st.transfers]
        out += [f"   rank {v.pp_rank} sends {v.bytes_per_micro_batch / 1e9:.2f} GB/micro-batch over "
                f"{v.link}: {'hidden' if v.hidden else f'exposed {v.exposed_s_per_step:.3f} s/step'}"
                for v in st.verdicts]
    out += ["", f"4. buffers: {_g(b.communication_bytes)}"]
    if b.a2a_bytes:
        out.append(f"   MoE all-to-all sized '{b.a2a_mode}'" + (" (worst case)" if b.worst_case_sized else "")
                   + "; " + ", ".join(f"{k} {_g(v)}" for k, v in b.a2a_bytes.items())
                   + f"; static shapes save {_g(b.static_saving_bytes)} against the worst case")
    out += [f"   {n}: {_g(v)}" for n, v in b.items]
    ft = a.finetune
    if ft is not None:
        out += ["", f"5. fine-tuning ({ft.mode}): {ft.trainable_pct:.2f}% of the rank's parameters train"]
        out += [f"   {o.label:<50} " + (f"invalid: {o.error}" if o.error else
                f"trains {o.trainable_pct:.3f}%, saves {_g(o.saved_bytes)}, peak {_g(o.peak_bytes)}"
                f"{'  fits' if o.fits else ''}") for o in ft.options]
    out += ["", "plan: " + "; ".join(pl.steps), f"   peak after: {_g(pl.peak_bytes)} — "
            + ("fits" if pl.fits else "still does not fit")] + [f"note: {n}" for n in a.notes]
    return "\n".join(out)
