"""The core imports neither streamlit nor plotly, and prints nothing."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
FACES = {"cli", "views"}  # faces may print / draw; everything else under memledger is core


def core_modules():
    for path in sorted((ROOT / "memledger").rglob("*.py")):
        rel = path.relative_to(ROOT / "memledger")
        if rel.parts[0] in FACES or rel.name == "__main__.py":
            continue
        yield path, "memledger." + ".".join(rel.with_suffix("").parts).removesuffix(".__init__")


def test_core_imports_neither_streamlit_nor_plotly():
    mods = [name for _, name in core_modules() if not name.startswith("memledger.trace")]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in mods) +
            "bad = [m for m in sys.modules if m.split('.')[0] in ('streamlit', 'plotly')]\n"
            "print(','.join(bad))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ""


def test_core_never_prints():
    offenders = [str(p) for p, _ in core_modules() if re.search(r"^\s*print\(", p.read_text(), re.M)]
    assert offenders == []
