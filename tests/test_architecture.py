"""The core's shape (docs/architecture.md): no import cycles between modules, and imports go one
way between the layers — errors/units → specs → model/presets → ledger → costs → advisor →
planner → trace/validation/engine/snapshot → views → cli. Function-level (lazy) imports count too."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "memledger"
LAYERS = (("memledger.errors", "memledger.units", "memledger.divisors", "memledger.safe_json"),
          ("memledger.specs",),
          ("memledger.model", "memledger.presets"), ("memledger.configs",), ("memledger.ledger",),
          ("memledger.costs",),
          ("memledger.advisor",), ("memledger.planner",),
          ("memledger.trace", "memledger.validation", "memledger.engine", "memledger.snapshot"),
          ("memledger.views",), ("memledger.cli",))
MAX_CORE_LINES = 300
# The planner read top-down by the stage of a search (memledger/planner/__init__.py): a stage
# imports only the stages before it; the package's own __init__ re-exports the answer.
PLANNER_STAGES = ("memledger.planner.question", "memledger.planner.memory", "memledger.planner.time",
                  "memledger.planner.sweep", "memledger.planner.answer")


def modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: dict) -> set[str]:
    """Every memledger module `name` imports, at any depth of its code."""
    found = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("memledger")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("memledger"):
                continue
            subs = {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known}
            found |= subs or {mod}
            if len(subs) < len(node.names):
                found.add(mod)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {n: imports(n, p, known) for n, p in known.items()}


def layer(name: str) -> int | None:
    for i, group in enumerate(LAYERS):
        if any(name == g or name.startswith(g + ".") for g in group):
            return i
    return None


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_between_modules():
    assert cycles(graph()) == []


def test_cycle_detector_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_go_down_the_layers():
    upward = [(a, b) for a, deps in graph().items() for b in deps
              if layer(a) is not None and layer(b) is not None and layer(b) > layer(a)]
    assert upward == []


def planner_stage(name: str) -> int | None:
    for i, stage in enumerate(PLANNER_STAGES):
        if name == stage or name.startswith(stage + "."):
            return i
    return None


def test_planner_stages_import_only_earlier_stages():
    g = graph()
    later = [(a, b) for a, deps in g.items() for b in deps
             if planner_stage(a) is not None and planner_stage(b) is not None
             and planner_stage(b) > planner_stage(a)]
    assert later == []
    # nothing inside the stages reaches back up to the package's front door
    assert [a for a, deps in g.items() if planner_stage(a) is not None
            and "memledger.planner" in deps] == []


def test_every_planner_module_is_in_a_stage():
    loose = [n for n in modules() if n.startswith("memledger.planner.") and planner_stage(n) is None]
    assert loose == []


def test_every_module_belongs_to_a_layer():
    loose = [n for n in modules() if layer(n) is None and n not in ("memledger", "memledger.__main__")]
    assert loose == []


def test_core_modules_are_small():
    big = {n: len(p.read_text().splitlines()) for n, p in modules().items()
           if not n.startswith(("memledger.views", "memledger.cli"))}
    assert {n: k for n, k in big.items() if k > MAX_CORE_LINES} == {}


def test_pages_hold_no_arithmetic():
    """Pages wire widgets to specs, the core and chart builders: no arithmetic on numbers."""
    offenders = []
    for page in sorted((ROOT / "pages").glob("*.py")):
        for node in ast.walk(ast.parse(page.read_text())):
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div, ast.FloorDiv,
                                                                     ast.Pow, ast.Mod)):
                if not isinstance(node.left, ast.Constant) or not isinstance(node.left.value, str):
                    offenders.append(f"{page.name}:{node.lineno}")
    assert offenders == []
