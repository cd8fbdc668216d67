"""Planner page: every layout of a model on a GPU budget that fits, fastest first.

Widgets → PlanSpec → memledger.planner.plan → chart/table builders (memledger.views.
planner_charts) → st.plotly_chart / st.dataframe. Every input round-trips through
st.query_params (defaults omitted), so the URL is the share link; the selected configuration
yields a link to the Ledger page. Register with `st.Page("pages/planner.py", title="Planner")`
(running this file calls render()).
"""
from __future__ import annotations

from urllib.parse import urlencode

import streamlit as st

from memledger.errors import SpecError
from memledger.presets import GPUS, MODELS, gpu, model
from memledger.specs.train import OPTIMIZERS, RECIPES

LEDGER_PAGE = "ledger"  # url path of the Ledger page (set where app.py registers it)
CHOICE = {"model": list(MODELS), "gpu": list(GPUS), "precision": list(RECIPES),
          "optimizer": list(OPTIMIZERS), "profile": ["megatron", "paper"],
          "zero": ["any", "0", "1", "2", "3"], "recompute": ["any", "none", "selective", "full"],
          "schedule": ["any", "1f1b", "interleaved", "dualpipe"]}
# key: (default, lowest, highest); 0 means "search this axis" / "no bound"
NUMBER = {"seq": (8192, 1, 1 << 20), "gb": (64, 1, 1 << 24), "gpn": (8, 1, 64),
          "headroom": (0, 0, 90), "top": (20, 1, 500), "row": (1, 1, 500),
          "tp": (0, 0, 1024), "pp": (0, 0, 1024), "vpp": (0, 0, 256), "ep": (0, 0, 1024),
          "etp": (0, 0, 1024), "cp": (0, 0, 1024), "mb": (0, 0, 4096), "max_vpp": (0, 0, 256),
          "max_cp": (0, 0, 1024), "max_mb": (0, 0, 4096)}
DEFAULT = {"model": "llama3-8b", "gpu": "h100", "world": "8", "precision": "megatron",
           "optimizer": "adamw", "profile": "megatron", "zero": "any", "recompute": "any",
           "schedule": "any", **{k: v[0] for k, v in NUMBER.items()}}
LABEL = {"model": "Model", "gpu": "GPU", "world": "World size(s), comma separated",
         "seq": "Sequence length", "gb": "Global batch (sequences)", "gpn": "GPUs per node",
         "precision": "Precision", "optimizer": "Optimizer", "profile": "Activation profile",
         "headroom": "Headroom (% of HBM kept free)", "top": "Top K", "zero": "ZeRO stage",
         "recompute": "Recompute", "schedule": "Schedule", "tp": "tp (0 = search)",
         "pp": "pp (0 = search)", "vpp": "vpp (0 = search)", "ep": "ep (0 = search)",
         "etp": "etp (0 = search)", "cp": "cp (0 = search)", "mb": "micro-batch (0 = search)",
         "max_vpp": "max vpp (0 = none)", "max_cp": "max cp (0 = none)",
         "max_mb": "max micro-batch (0 = none)", "row": "Configuration # to open in the Ledger"}


def parse_query(params) -> tuple[dict, list[str]]:
    """Query values → widget values; a bad value is reported and replaced by its default."""
    values, errors = {}, []
    for key, default in DEFAULT.items():
        raw = params.get(key)
        if raw is None:
            values[key] = default
        elif key in CHOICE and raw not in CHOICE[key]:
            errors.append(f"{key}: unknown value {raw!r}; valid: {', '.join(CHOICE[key])}")
            values[key] = default
        elif key in NUMBER:
            lo, hi = NUMBER[key][1:]
            if raw.isdigit() and lo <= int(raw) <= hi:
                values[key] = int(raw)
            else:
                errors.append(f"{key}: expected an integer {lo}..{hi}, got {raw!r}")
                values[key] = default
        else:
            values[key] = raw
    return values, errors


def _widgets() -> dict:
    ss = st.session_state
    c1, c2, c3 = st.columns(3)
    c1.selectbox(LABEL["model"], CHOICE["model"], key="pl_model")
    c1.selectbox(LABEL["gpu"], CHOICE["gpu"], key="pl_gpu")
    c1.text_input(LABEL["world"], key="pl_world")
    for key, col in (("seq", c2), ("gb", c2), ("gpn", c2)):
        col.number_input(LABEL[key], *NUMBER[key][1:], key=f"pl_{key}")
    for key in ("precision", "optimizer", "profile"):
        c3.selectbox(LABEL[key], CHOICE[key], key=f"pl_{key}")
    with st.expander("Constraints and search bounds"):
        cols = st.columns(4)
        for i, key in enumerate(("zero", "recompute", "schedule")):
            cols[i].selectbox(LABEL[key], CHOICE[key], key=f"pl_{key}")
        cols[3].number_input(LABEL["headroom"], *NUMBER["headroom"][1:], key="pl_headroom")
        cols = st.columns(5)
        for i, key in enumerate(("tp", "pp", "vpp", "ep", "etp", "cp", "mb", "max_vpp", "max_cp",
                                 "max_mb")):
            cols[i % 5].number_input(LABEL[key], *NUMBER[key][1:], key=f"pl_{key}")
    st.number_input(LABEL["top"], *NUMBER["top"][1:], key="pl_top")
    return {k: ss[f"pl_{k}"] for k in DEFAULT if k != "row"}


@st.cache_resource(max_entries=2, show_spinner="Evaluating every configuration…")
def _plan(items: tuple):
    from memledger.planner import Constraints, PlanSpec, plan
    v = dict(items)
    worlds = tuple(int(x) for x in v["world"].replace(" ", "").split(",") if x)
    fixed = {k: (v[q] or None) for k, q in (("tp", "tp"), ("pp", "pp"), ("vpp", "vpp"),
                                             ("ep", "ep"), ("etp", "etp"), ("cp", "cp"),
                                             ("micro_batch", "mb"), ("max_vpp", "max_vpp"),
                                             ("max_cp", "max_cp"), ("max_micro_batch", "max_mb"))}
    choice = {k: (None if v[k] == "any" else (int(v[k]) if k == "zero" else v[k]))
              for k in ("zero", "recompute", "schedule")}
    spec = PlanSpec(model=model(v["model"]), hardware=gpu(v["gpu"]), worlds=worlds,
                    seq=v["seq"], global_batch=v["gb"], gpus_per_node=v["gpn"],
                    precision=v["precision"], optimizer=v["optimizer"], profile=v["profile"],
                    headroom=v["headroom"] / 100, constraints=Constraints(**fixed, **choice))
    return plan(spec)


def render() -> None:
    from memledger.views.planner_charts import ledger_query, plan_scatter, top_table
    st.title("Planner")
    st.caption("Every parallel layout that fits, ranked by an estimated step time. Peaks are "
               "the ledger's, byte for byte; times are a simple model (memledger.steptime).")
    ss = st.session_state
    if "pl_init" not in ss:
        values, errors = parse_query(st.query_params)
        ss.update({f"pl_{k}": v for k, v in values.items()}, pl_init=True)
        for e in errors:
            st.error(e)
    values = _widgets()
    try:
        if not all(x.strip().isdigit() for x in values["world"].split(",")):
            raise SpecError("world", f"expected positive integers, comma separated, got "
                                     f"{values['world']!r}")
        result = _plan(tuple(sorted(values.items())))
    except SpecError as e:
        _write_query({**values, "row": ss["pl_row"]})
        st.error(str(e))
        return
    c = result.counts()
    m = st.columns(5)
    m[0].metric("layouts", f"{c['structural']:,}", f"{c['invalid']:,} invalid",
                delta_color="off")
    m[1].metric("configurations", f"{c['evaluated']:,}")
    m[2].metric("over capacity", f"{c['over_capacity']:,}")
    m[3].metric("fit", f"{c['fits']:,}")
    m[4].metric("search time", f"{result.wall_s:.2f} s")
    if result.reason:
        _write_query({**values, "row": ss["pl_row"]})
        st.warning(result.reason)
        return
    table = top_table(result, values["top"])
    ss["pl_row"] = min(ss["pl_row"], len(table))
    st.number_input(LABEL["row"], 1, len(table), key="pl_row")
    _write_query({**values, "row": ss["pl_row"]})
    row = result.rows(result.top(values["top"]))[ss["pl_row"] - 1]
    st.plotly_chart(plan_scatter(result, selected=row), width="stretch")
    st.dataframe(table, width="stretch")
    query = urlencode(ledger_query(result, row, values["model"], values["gpu"]))
    st.markdown(f"**Share link (Ledger page):** [{LEDGER_PAGE}?{query}]({LEDGER_PAGE}?{query})")
    st.code(f"{LEDGER_PAGE}?{query}", language=None)


def _write_query(values: dict) -> None:
    st.query_params.from_dict({k: str(v) for k, v in values.items() if v != DEFAULT[k]})


if __name__ == "__main__":
    render()
