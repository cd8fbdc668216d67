"""`memledger trace`: trace what a PyTorch model saves for backward at several sizes, fit
per-token byte formulas, check them on a larger size, and write a profile the ledger reads
(`memledger ledger --profile traced:OUT.json`). Needs torch (and transformers for --hf-config).
"""
from __future__ import annotations

import argparse
import json
from fractions import Fraction as F
from pathlib import Path

from memledger.errors import SpecError

EPILOG = """\
sources:
  --hf-config PATH   a Hugging Face config.json. The model is built from scratch (random weights,
                     nothing downloaded) with --layers layers and every width (hidden, FFN and
                     expert sizes, head dims, MLA ranks, vocabulary) divided by k·2 and k·4 for
                     the fit and by k for the check, k = --scale (default: the smallest power of
                     two that keeps the check model under 25M parameters). Heads, KV heads and
                     top-k are kept. Bytes per token are affine in 1/divisor, so the fit gives
                     the full model's figures; the profile describes the full config.
  --module MOD:FUNCTION
                     any PyTorch model. FUNCTION takes no arguments and returns
                     (model, make_inputs): a torch.nn.Module and a callable
                     make_inputs(batch, seq) giving one training forward's inputs for batch
                     sequences of seq tokens: a dict (model(**inputs)) or a tuple
                     (model(*inputs)). MOD is a dotted module importable from the current
                     directory, or a path to a .py file. The model is traced as built (no
                     width fit); put it on the device and dtype you train in.
fit: per tensor (matched by module path within a layer), bytes = a·T + b·T·s + c with
T = batch·seq tokens (b: eager attention's s×s terms; c: per-micro-batch constants), each
coefficient a line in the width. The check trace (--check-seq, width /k) is predicted and
compared per layer and in total.
output: a per-layer inventory (tensor, class, dtype, shape per token, bytes per token) and the
check's residuals; --out writes the profile (the --json document) for
`memledger ledger --profile traced:PATH`. Not in the profile: parameter copies (autocast
weight casts), per-micro-batch constants, backward transients. Bad input: exit 2, one line."""


MAX_SEQS, MAX_TRACE_SEQ = 16, 65_536  # traces run real models: bounded work per call
MAX_TRACE_TOKENS = 1 << 20


def add(sub) -> None:
    p = sub.add_parser("trace", help="trace saved tensors, fit per-token formulas, write a profile",
                       description=__doc__.split("\n\n")[0], epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json")
    src.add_argument("--module", metavar="MOD:FUNCTION", help="a function returning (model, make_inputs)")
    p.add_argument("--seq", default="32,64", help="fit sequence lengths, comma separated (>= 2)")
    p.add_argument("--check-seq", type=int, default=None, help="check size (default: 2 × the largest)")
    p.add_argument("--batch", type=int, default=1, help="sequences per traced micro-batch")
    g = p.add_argument_group("--hf-config only")
    g.add_argument("--layers", type=int, default=2, help="layers traced (2-4)")
    w = g.add_mutually_exclusive_group()
    w.add_argument("--scale", type=int, default=None, metavar="K", help="width divisor of the check trace")
    w.add_argument("--hidden", type=int, default=None, help="hidden size of the check trace (sets K)")
    g.add_argument("--precision", choices=("bf16", "fp32", "amp"), default="bf16",
                   help="bf16 weights, fp32, or fp32 weights under bf16 autocast")
    g.add_argument("--attention", choices=("flash", "eager"), default="flash",
                   help="flash = attn_implementation sdpa")
    g.add_argument("--experts", choices=("grouped_mm", "eager"), default="grouped_mm")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    g.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", metavar="PATH", help="write the profile JSON here")
    p.add_argument("--json", action="store_true",
                   help="print the profile JSON (bytes as integers; 'n/d' where a per-token "
                        "share is fractional)")
    p.set_defaults(run=run)


def _seqs(text: str) -> list[int]:
    try:
        seqs = sorted({int(x) for x in text.split(",") if len(x.strip()) <= 12})
    except ValueError:
        raise SpecError("seq", f"expected comma-separated integers, got {text!r}") from None
    if len(seqs) < 2 or seqs[0] < 1:
        raise SpecError("seq", f"need two or more distinct lengths >= 1, got {text[:60]!r}")
    if len(seqs) > MAX_SEQS or seqs[-1] > MAX_TRACE_SEQ:
        raise SpecError("seq", f"at most {MAX_SEQS} lengths, each 1..{MAX_TRACE_SEQ:,}")
    return seqs


def _config_source(args):
    from memledger.model.hf_config import from_hf_config
    from memledger.model.params import layer_kind
    from memledger.safe_json import load_file
    from memledger.trace.shrink import choose_shrink
    from memledger.trace.sources import ConfigSource, resolve_device
    path = Path(args.hf_config)
    cfg = load_file(path, "hf-config")  # bounded in size and nesting before parsing
    full = from_hf_config(cfg, path.stem)
    scale = args.scale
    if args.hidden is not None:
        if args.hidden < 1 or full.hidden % args.hidden:
            raise SpecError("hidden", f"must divide hidden_size={full.hidden}, got {args.hidden}")
        scale = full.hidden // args.hidden
    device = resolve_device(args.device)
    shrink = choose_shrink(cfg, args.layers, scale, head_multiple=8 if device == "cuda" else 2)
    small = from_hf_config(shrink.config(cfg, shrink.k))
    src = ConfigSource(cfg, shrink, precision=args.precision, attention=args.attention,
                       experts=args.experts, device=device, seed=args.seed)
    model = {"name": full.name, "model_type": cfg["model_type"], "hidden": full.hidden,
             "vocab": full.vocab, "n_layers": full.n_layers}
    kinds = {i: layer_kind(small, i) for i in range(small.n_layers)}
    return src, shrink.divisors, kinds, (full.moe.top_k if full.moe else None), model


def framework_errors(fn, args, flag: str | None = None):
    """Run fn(args); an error raised inside torch or transformers (not a SpecError) becomes one
    line naming the model source flag, instead of a traceback."""
    flag = flag or ("hf-config" if getattr(args, "hf_config", None) else "module")
    try:
        return fn(args)
    except SpecError:
        raise
    except (RuntimeError, ValueError, TypeError, KeyError, AttributeError, IndexError,
            NotImplementedError, ImportError, AssertionError, MemoryError, OverflowError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise SpecError(flag, f"failed in the framework: {type(e).__name__}: "
                              f"{first}") from None


def _guess_kinds(trace) -> dict[int, str]:
    kinds: dict[int, str] = {}
    for x in trace.activations:
        if x.layer is not None:
            moe = x.cls.startswith("expert") or x.cls == "router"
            kinds[x.layer] = "moe" if moe or kinds.get(x.layer) == "moe" else "dense"
    return kinds


def measure(args):
    """(rows, check point, profile doc) for parsed arguments."""
    from memledger.trace.fit import Point, fit, residual
    from memledger.trace.fitted import profile_doc
    try:
        import torch
    except ImportError:
        raise SpecError("trace", "needs torch (and transformers for --hf-config): "
                                 "pip install 'memledger[trace]'") from None
    seqs, batch = _seqs(args.seq), args.batch
    check_seq = args.check_seq or 2 * seqs[-1]
    if batch < 1 or check_seq < 1:
        raise SpecError("batch", f"batch and --check-seq must be >= 1, got {batch}, {check_seq}")
    if batch * max(check_seq, seqs[-1]) > MAX_TRACE_TOKENS:
        raise SpecError("batch", f"--batch x the longest sequence = {batch * max(check_seq, seqs[-1]):,}"
                                 f" tokens; at most {MAX_TRACE_TOKENS:,} per traced micro-batch")
    if args.hf_config:
        src, divisors, kinds, top_k, model = _config_source(args)
    else:
        from memledger.trace.sources import ModuleSource
        src, divisors, kinds, top_k, model = ModuleSource(args.module), (1, 1), None, None, {}
    fit_divs, check_div = sorted(set(divisors[:-1])), divisors[-1]
    points = [Point(s, F(1, d), src.trace(s, d, batch), batch) for d in fit_divs for s in seqs]
    check = Point(check_seq, F(1, check_div), src.trace(check_seq, check_div, batch), batch)
    rows = fit(points)
    res = residual(rows, check)
    meta = {"model": model, **src.meta(), "batch": batch,
            "fit": {"seqs": seqs, "widths": [f"1/{d}" for d in fit_divs]},
            "check": {"seq": check_seq, "width": f"1/{check_div}"},
            "torch": torch.__version__}
    doc = profile_doc(rows, kinds or _guess_kinds(check.trace), check, top_k=top_k,
                      meta=meta, residual=res)
    return rows, check, doc


def run(args) -> int:
    rows, check, doc = framework_errors(measure, args)
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    if args.json:
        print(json.dumps(doc))
        return 0
    print(render(doc))
    if args.out:
        print(f"wrote {args.out}: memledger ledger ... --profile traced:{args.out}")
    return 0


def _amount(v) -> str:
    x = F(v)
    return f"{x.numerator:,}" if x.denominator == 1 else f"{float(x):,.2f}"


def _table(title: str, tensors: list[dict]) -> list[str]:
    lines = [title, f"  {'tensor':<40} {'class':<11} {'dtype':<9} {'shape/token':<24} "
                    f"{'bytes/token':>12} {'+ ×s':>9} {'const/mb':>9}"]
    tot = [F(0), F(0)]
    for x in tensors:
        a, q = F(x["bytes_per_token"]), F(x["bytes_per_token_seq"])
        tot = [tot[0] + a, tot[1] + q]
        lines.append(f"  {x['name'][:40]:<40} {x['cls']:<11} {x['dtype']:<9} {x['shape'][:24]:<24} "
                     f"{_amount(a):>12} {_amount(q) if q else '':>9} "
                     f"{_amount(x['bytes_const']) if F(x['bytes_const']) else '':>9}")
    lines.append(f"  {'total':<87} {_amount(tot[0]):>12} {_amount(tot[1]) if tot[1] else '':>9}")
    return lines


def render(doc: dict) -> str:
    m, meta = doc["meta"].get("model") or {}, doc["meta"]
    head = meta.get("source") or f"{m.get('name')} ({m.get('model_type')}, {m.get('n_layers')} layers)"
    fit = meta["fit"]
    lines = [f"{head}: fit at seqs {', '.join(map(str, fit['seqs']))}, widths "
             f"{', '.join(fit['widths'])}; check at seq {meta['check']['seq']}, width "
             f"{meta['check']['width']}; micro-batch {meta['batch']}"
             + (f"; {meta['device']} {meta['precision']} {meta['attention']}" if "device" in meta else ""),
             "bytes per token at full width (T = batch·seq tokens; '+ ×s' is per token per "
             "sequence position: s×s tensors; const/mb is per micro-batch, not in the profile)"]
    for kind, k in doc["kinds"].items():
        lines += _table(f"{kind} layer (traced layer {k['layer']}):", k["tensors"])
    lines += _table("outside the layers, first stage:", doc["first"])
    lines += _table("outside the layers, last stage:", doc["last"])
    lines.append(f"check at seq {meta['check']['seq']}, width {meta['check']['width']}: "
                 "predicted vs traced bytes")
    for k, r in doc["residual"].items():
        label = f"layer {k}" if k.isdigit() else k
        lines.append(f"  {label:<10} {r['predicted_bytes']:>14,} {r['traced_bytes']:>14,} "
                     f"{100 * r['rel_error']:+8.3f}%")
    return "\n".join(lines)
