"""Walk one configuration through `build_ledger` and count how the call path crosses modules.

Run: python benchmarks/walk.py
Reports, for one cold build of a Llama-3 70B ledger (tp8 pp4 dp2, ZeRO-1, selective recompute):
  modules entered      distinct memledger modules whose code runs
  module calls         calls that cross from one memledger module into another
  back up              calls into a module that is already on the call stack below the caller
                       (the path re-enters a layer it came from instead of returning to it)
  entries per module   calls into a module from another module: how often the walk comes back
                       to it (one row's data computed once and passed down enters each once)
  returns              calls into a module the walk had entered and already left
  visits to pipeline/  calls into memledger.ledger.pipeline.* from outside it; "asked" also counts
                       the calls its cached functions answer from their cache (invisible above)
Used for the restructure's before/after figures (docs/architecture.md).
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import memledger  # noqa: E402
from memledger import ParallelSpec, TrainSpec, build_ledger, model  # noqa: E402

ROOT = str(Path(memledger.__file__).parent)


def module_of(frame) -> str | None:
    f = frame.f_code.co_filename
    return frame.f_globals.get("__name__") if f.startswith(ROOT) else None


def walk(fn) -> tuple[set, Counter, Counter, Counter]:
    entered, crossings, back_up, returns = set(), Counter(), Counter(), Counter()
    stack: list[str | None] = []

    def tracer(frame, event, arg):
        if event == "call":
            mod = module_of(frame)
            caller = next((s for s in reversed(stack) if s), None)
            if mod:
                if caller and caller != mod:
                    crossings[(caller, mod)] += 1
                    if mod in stack:
                        back_up[(caller, mod)] += 1
                    elif mod in entered:
                        returns[mod] += 1
                entered.add(mod)
            stack.append(mod)
            return tracer
        if event == "return" and stack:
            stack.pop()
        return tracer

    sys.setprofile(None)
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return entered, crossings, back_up, returns


def cached_asks(fn) -> Counter:
    """(caller module, callee module) of every call to another module's lru_cache, hits included:
    each module's imported cached functions are wrapped in a counter for the run."""
    import functools
    asks, patched = Counter(), []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("memledger."):
            continue
        for key, f in list(vars(mod).items()):
            if isinstance(f, functools._lru_cache_wrapper) and f.__module__ != name \
                    and f.__module__.startswith("memledger."):
                def counted(*a, _f=f, _k=(name, f.__module__), **kw):
                    asks[_k] += 1
                    return _f(*a, **kw)
                setattr(mod, key, counted)
                patched.append((mod, key, f))
    try:
        fn()
    finally:
        for mod, key, f in patched:
            setattr(mod, key, f)
    return asks


def clear_caches() -> None:
    import functools
    import gc
    for obj in gc.get_objects():
        if isinstance(obj, functools._lru_cache_wrapper) and getattr(obj, "__module__", "").startswith("memledger"):
            obj.cache_clear()


def main() -> None:
    m = model("llama3-70b")
    p = ParallelSpec(tp=8, pp=4, dp=2, sp=True, zero=1)
    t = TrainSpec(seq=8192, micro_batches=16, recompute="selective")
    build_ledger(m, p, t)  # import everything first: imports are not the walk
    clear_caches()
    entered, crossings, back_up, returns = walk(lambda: build_ledger(m, p, t))
    print(f"modules entered: {len(entered)}")
    print(f"module calls: {sum(crossings.values())} ({len(crossings)} distinct caller→callee pairs)")
    print(f"back up: {sum(back_up.values())} calls ({len(back_up)} distinct pairs)")
    for (a, b), n in back_up.most_common():
        print(f"  {a} → {b}: {n}")
    both = sorted({tuple(sorted(k)) for k in crossings if (k[1], k[0]) in crossings})
    print(f"two-way module pairs (each calls the other): {len(both)}")
    for a, b in both:
        print(f"  {a.removeprefix('memledger.')} ⇄ {b.removeprefix('memledger.')}")
    callers = {}
    for (a, b) in crossings:
        callers.setdefault(b, set()).add(a)
    print("modules calling into each activation module:")
    for mod in sorted(callers):
        if "activ" in mod or "act_" in mod:
            print(f"  {len(callers[mod]):3d}  {mod.removeprefix('memledger.')}: "
                  + ", ".join(sorted(c.removeprefix('memledger.') for c in callers[mod])))
    entries = {}
    for (_, b), n in crossings.items():
        entries[b] = entries.get(b, 0) + n
    print("entries per module:")
    for mod, n in sorted(entries.items(), key=lambda kv: -kv[1]):
        print(f"  {n:6d}  {mod.removeprefix('memledger.')}")
    print(f"returns (calls into a module entered and left before): {sum(returns.values())}")
    clear_caches()
    asks = cached_asks(lambda: build_ledger(m, p, t))
    pipe = "memledger.ledger.pipeline."
    into = {k: n for k, n in crossings.items()
            if k[1].startswith(pipe) and not k[0].startswith(pipe)}
    asked = {k: n for k, n in asks.items() if k[1].startswith(pipe) and not k[0].startswith(pipe)}
    print(f"visits to pipeline/: {sum(into.values())} calls from outside it; "
          f"{sum(asked.values())} calls of its cached functions from outside it, hits included")
    for (a, b), n in sorted({**{k: 0 for k in asked}, **into}.items()):
        print(f"  {a.removeprefix('memledger.')} → {b.removeprefix('memledger.')}: {n}"
              + (f" ({asked[(a, b)]} of cached functions)" if (a, b) in asked else ""))
    print("modules:", ", ".join(sorted(x.removeprefix("memledger.") for x in entered)))


if __name__ == "__main__":
    main()
