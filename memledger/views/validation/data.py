"""The Validation page's data: stored measurements, re-predicted by the ledger as it is now.

`load_results` reads every `validation-<device>.json` that `memledger validate` wrote and keeps
what it cannot use as a problem (missing folder, bad JSON, wrong shape) instead of raising;
`score` re-predicts every measurement with `memledger.validation.report.rescore` (measurements
are facts of a run, predictions come from the code: design note 8), so the stored predictions in
the files are never shown. The frames are for display and download (GiB = 2^30 bytes, labelled);
the bytes stay exact integers. Pure: no Streamlit.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from memledger import safe_json
from memledger.errors import SpecError
from memledger.ledger.items import ROW_LABELS
from memledger.units import GIB
from memledger.validation.report import TOLERANCE, rescore

ROOT = Path(__file__).resolve().parents[3]
ENV_VAR = "MEMLEDGER_VALIDATION_DIR"  # another results folder (a deployment, a test)
ROW_ORDER = tuple(TOLERANCE)  # weights, gradients, optimizer, activations, peak_allocated
LABELS = {**{r: ROW_LABELS[r] for r in ROW_ORDER if r in ROW_LABELS},
          "peak_allocated": "Peak allocated"}
ENVIRONMENTS = {"cuda": "GPU", "cpu": "CPU"}
MAX_FILE_BYTES = 20_000_000
EXPORT_COLUMNS = ["case", "row", "measured_on", "environment", "predicted_bytes", "measured_bytes",
                  "rel_error", "tolerance", "ok", "seq", "micro_batch", "micro_batches",
                  "precision", "optimizer", "attention", "recompute"]


def results_dir() -> Path:
    return Path(os.environ.get(ENV_VAR) or ROOT / "validation")


def shown_path(folder: Path) -> str:
    """A folder as a viewer may see it: relative to the project, never the server's absolute
    path (which tells a visitor the host's layout)."""
    try:
        return Path(folder).resolve().relative_to(ROOT.resolve()).as_posix() or "."
    except ValueError:
        return f"…/{Path(folder).name}"


def signature(folder: Path) -> tuple:
    """(name, size, mtime) of each results file: a cache key that changes when a file does."""
    if not folder.is_dir():
        return ()
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                 for p in sorted(folder.glob("validation-*.json")))


@dataclass
class Results:
    docs: list[dict] = field(default_factory=list)  # each with "environment", "measurements"
    problems: list[str] = field(default_factory=list)


def load_results(folder: Path) -> Results:
    """Every validation-*.json in `folder`; what cannot be read becomes a problem, not an error."""
    out = Results()
    if not folder.is_dir():
        out.problems.append(f"No validation results: the folder {shown_path(folder)} does not "
                            "exist.")
        return out
    paths = sorted(folder.glob("validation-*.json"))
    if not paths:
        out.problems.append(f"No validation results: no validation-*.json in "
                            f"{shown_path(folder)}.")
    for path in paths:
        try:
            out.docs.append(_read(path))
        except OSError as e:  # str(e) would carry the absolute path
            out.problems.append(f"{path.name} could not be used: {e.strerror or type(e).__name__}")
        except ValueError as e:
            out.problems.append(f"{path.name} could not be used: {e}")
    return out


def _read(path: Path) -> dict:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"larger than {MAX_FILE_BYTES:,} bytes")
    doc = safe_json.loads(path.read_bytes(), "file", MAX_FILE_BYTES)  # SpecError is a ValueError
    if not isinstance(doc, dict) or not isinstance(doc.get("environment"), dict):
        raise ValueError("expected a JSON object with an 'environment' object")
    if not isinstance(doc.get("measurements"), list):
        raise ValueError("expected a 'measurements' list (written by memledger validate)")
    return {**doc, "file": path.name}


def environment_kind(env: dict) -> str:
    return "cuda" if env.get("device") == "cuda" else "cpu"


def environment_short(env: dict) -> str:
    """'GPU · NVIDIA H200' or 'CPU': the table's and the legend's label."""
    return f"GPU · {env.get('gpu', 'unknown')}" if environment_kind(env) == "cuda" else "CPU"


def environment_label(env: dict) -> str:
    """The whole environment in one line: device, memory, software versions."""
    sw = (f"torch {env.get('torch', '?')}, transformers {env.get('transformers', '?')}, "
          f"Python {env.get('python', '?')}")
    if environment_kind(env) == "cuda":
        mem = env.get("gpu_total_bytes")
        size = f" ({mem / GIB:,.1f} GiB)" if isinstance(mem, int) else ""
        return f"GPU: {env.get('gpu', 'unknown')}{size}, CUDA {env.get('cuda', '?')}, {sw}"
    return f"CPU: {sw}; saved-tensor bytes only, no allocator peak"


@dataclass
class Scored:
    frame: pd.DataFrame  # one line per case and row
    environments: list[tuple[str, str, int]]  # (file, environment label, cases)
    problems: list[str]


def score(results: Results) -> Scored:
    """Re-predict every stored measurement with the current ledger."""
    rows, envs, problems = [], [], list(results.problems)
    for doc in sorted(results.docs, key=lambda d: environment_kind(d["environment"]) != "cuda"):
        env = doc["environment"]
        try:
            records = rescore(doc)
        except (KeyError, TypeError, ValueError, SpecError) as e:  # a hand-edited file
            problems.append(f"{doc['file']} could not be re-predicted: {type(e).__name__}: {e}")
            continue
        cases = {r["case"] for r in records}
        unknown = len(doc["measurements"]) - len(cases)
        if unknown > 0:
            problems.append(f"{doc['file']}: {unknown} measurement(s) of cases this version does "
                            "not define were skipped.")
        envs.append((doc["file"], environment_label(env), len(cases)))
        rows += [{**r, "environment": environment_short(env)} for r in records]
    return Scored(_frame(rows), envs, problems)


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(dict.fromkeys(EXPORT_COLUMNS + list(
        rows[0] if rows else []))))
    df["row"] = pd.Categorical(df["row"], ROW_ORDER, ordered=True)
    df["predicted_gib"] = df["predicted_bytes"].astype(float) / GIB
    df["measured_gib"] = df["measured_bytes"].astype(float) / GIB
    df["error_pct"] = 100 * df["rel_error"].astype(float)
    return df.sort_values(["measured_on", "case", "row"], ascending=[False, True, True],
                          kind="stable").reset_index(drop=True)


def case_names(df: pd.DataFrame) -> tuple[str, ...]:
    return tuple(sorted(df["case"].unique()))


def select(df: pd.DataFrame, rows: tuple[str, ...], env: str, case: str) -> pd.DataFrame:
    """The records the filters keep: rows (empty = all), environment (all/cuda/cpu), case."""
    keep = df["row"].isin(rows or ROW_ORDER)
    if env != "all":
        keep &= df["measured_on"] == env
    if case != "all":
        keep &= df["case"] == case
    return df[keep]


@dataclass(frozen=True)
class RowSummary:
    row: str
    label: str
    bar_pct: float
    worst_pct: float | None  # None: no measurement of this row
    worst_case: str
    count: int
    ok: bool


def summary(df: pd.DataFrame) -> list[RowSummary]:
    """Worst |error| per row, over every case and environment, against the accuracy bar."""
    out = []
    for row in ROW_ORDER:
        d = df[df["row"] == row]
        bar = 100 * TOLERANCE[row]
        if d.empty:
            out.append(RowSummary(row, LABELS[row], bar, None, "", 0, True))
            continue
        worst = d.loc[d["error_pct"].abs().idxmax()]
        out.append(RowSummary(row, LABELS[row], bar, abs(float(worst["error_pct"])),
                              f"{worst['case']} ({worst['environment']})", len(d),
                              bool(d["ok"].all())))
    return out


def verdict(df: pd.DataFrame) -> tuple[bool, str]:
    """One sentence: are all predictions within the bar, on how many cases and environments."""
    if df.empty:
        return False, "No measurements to compare."
    parts = []
    for kind, name in ENVIRONMENTS.items():
        d = df[df["measured_on"] == kind]
        if len(d):
            parts.append(f"{len(d)} on the {name} ({d['case'].nunique()} cases)")
    misses = int((~df["ok"].astype(bool)).sum())
    where = ": " + ", ".join(parts)
    if misses == 0:
        return True, f"All {len(df)} predictions are within the accuracy bar{where}."
    return False, f"{misses} of {len(df)} predictions are outside the accuracy bar{where}."


def table(df: pd.DataFrame) -> pd.DataFrame:
    """The on-page table: one line per case and row."""
    return pd.DataFrame({
        "row": [LABELS[r] for r in df["row"]],
        "environment": df["environment"].to_list(),
        "case": df["case"].to_list(),
        "predicted GiB": df["predicted_gib"].to_list(),
        "measured GiB": df["measured_gib"].to_list(),
        "error %": df["error_pct"].to_list(),
        "bar ±%": (100 * df["tolerance"].astype(float)).to_list(),
        "within": df["ok"].astype(bool).to_list(),
    })


def to_csv(df: pd.DataFrame) -> str:
    """The selected records in exact bytes (what `memledger validate` writes, re-predicted)."""
    return df[EXPORT_COLUMNS].astype({"row": str}).to_csv(index=False)


def to_json(df: pd.DataFrame, environments: list[tuple[str, str, int]]) -> str:
    records = json.loads(df[EXPORT_COLUMNS].astype({"row": str}).to_json(orient="records"))
    return json.dumps({"environments": [{"file": f, "environment": e, "cases": n}
                                        for f, e, n in environments],
                       "records": records}, indent=1)
