"""One Validation-page section for a framework's own code run under memledger's probe
(torchtitan at real scale under fake tensors, Megatron-Core on gloo CPU processes): the stored
file's re-predicted rows (from the engine's `rescore`), a verdict, the case picker, the rows
chart of one case's first rank and the per-row table. What differs between engines is data
(`EngineRun`); the arithmetic is the engines' compare modules', not this one's.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from memledger.validation.report import worst_by_row
from memledger.views import ui
from memledger.views.validation import engine_charts as charts


@dataclass(frozen=True, kw_only=True)
class EngineRun:
    engine: str  # as the page names it: "torchtitan", "Megatron-Core"
    file: str  # under the validation folder
    subheader: str
    install: str  # what to run when the file is missing (markdown)
    scope: str  # what one prediction is: "rank-0", "per-rank"
    key: str  # widget key prefix
    chart: str  # the chart's export name
    how: str  # the "How … measured" markdown
    caption: Callable[[dict], str]  # the stored environment, in words
    rank_column: bool  # the table lists ranks (all ranks stored) or cases (rank 0 only)
    rescore: Callable[[dict], list[dict]]  # the engine's compare module: stored doc → records
    chart_title: str = ""  # "{case}" is filled in; "" = the chart's default


_RESCORE: dict[str, Callable[[dict], list[dict]]] = {}  # engine → rescore, set by load_run


def read(path: Path, rescore) -> tuple[dict, list[dict]]:
    doc = json.loads(path.read_text())
    return doc, rescore(doc)


@st.cache_data(show_spinner="Re-predicting the stored runs…", max_entries=12)
def _load(engine: str, path: str, signature: tuple):
    del signature  # the file's size and mtime: a new run is read again
    return read(Path(path), _RESCORE[engine])


def load_run(run: EngineRun, path: Path) -> tuple[dict, list[dict]]:
    """(doc, records) of a stored run, cached per file version."""
    _RESCORE[run.engine] = run.rescore
    return _load(run.engine, str(path), (path.stat().st_size, path.stat().st_mtime_ns))


def table(records: list[dict], rank_column: bool) -> pd.DataFrame:
    first = ("rank", "rank") if rank_column else ("case", "case")
    return pd.DataFrame([{first[0]: r[first[1]], "row": r["row"],
                          "predicted": r["predicted_bytes"], "measured": r["measured_bytes"],
                          "error %": 100 * r["rel_error"], "within": r["ok"]} for r in records])


def render(run: EngineRun, folder: Path) -> None:
    st.subheader(run.subheader)
    path = folder / run.file
    if not path.exists():
        st.info(run.install)
        return
    try:
        doc, records = load_run(run, path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        st.error(ui.md_escape(f"{run.file}: cannot be read as a {run.engine} run ({e})"),
                 icon=":material/error:")
        return
    bad = [r for r in records if not r["ok"]]
    worst = worst_by_row(records)
    (st.success if not bad else st.warning)(
        f"{len(records) - len(bad)} of {len(records)} {run.scope} predictions within the bar; "
        "worst |error|: " + ", ".join(f"{k} {100 * v:.2f}%" for k, v in worst.items()))
    st.caption(run.caption(doc))
    cases = list(dict.fromkeys(r["case"] for r in records))
    case = st.selectbox(f"{run.engine} case", cases, key=f"{run.key}_case")
    shown = [r if run.rank_column else {**r, "rank": 0} for r in records if r["case"] == case]
    first = [{**r, "pp_rank": 0} for r in shown if r["rank"] == 0]
    title = run.chart_title.format(case=case) if run.chart_title else ""
    ui.chart(charts.rows_figure(first, case, engine=run.engine, title=title),
             run.chart, key=f"{run.key}_rows")
    st.dataframe(table(shown, run.rank_column), hide_index=True, width="stretch",
                 column_config={"error %": st.column_config.NumberColumn(format="%+.2f")})
    with st.expander(f"How the {run.engine} runs were measured", icon=":material/hub:"):
        st.markdown(run.how)
