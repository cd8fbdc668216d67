"""Keeps the URL, the session and the widgets in step (Streamlit glue; no memory arithmetic).

The URL is read when a session starts and when the user arrives on a page with parameters that
this session did not write (a link from the planner, browser navigation); otherwise the widgets
are the truth and the URL is rewritten from them after every run. The session keeps only the
last configuration, so a page switch that drops the query string restores it. Problems in a
link are reported once, as `ParamIssue`s; moves the app makes after a user's change (a preset
whose layer count rules out pp=4, ...) as notes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from urllib.parse import urlencode

import streamlit as st

from memledger.specs import ModelSpec
from memledger.views.options import repair
from memledger.views.state import (CONFIG_KEYS, KEYS, Config, PageParam, ParamIssue, load_model,
                                   page_to_params, parse_page_params, parse_params, start_of,
                                   to_params)

CFG, PAGE, RECENT = "_ml_cfg", "_ml_page", "_ml_recent"
W, P = "sb_", "pg_"  # widget key prefixes: shared (sidebar) settings, page settings
RECENT_KEEP = 16
# Typed numbers are rounded to a valid value rather than moving the parallel layout for them.
# fine-tuning text and rank: a refused value is moved back (with st.error in the sidebar)
# rather than switching fine-tuning off
NEVER_PINNED = frozenset({"seq", "lora_targets", "freeze", "lora_r"})


@dataclass
class Resolved:
    cfg: Config
    model: ModelSpec
    page: dict
    issues: list[ParamIssue] = field(default_factory=list)  # from the URL: shown as errors
    notes: list[str] = field(default_factory=list)  # the app's own moves: shown as notices
    started: str = ""  # where a newly chosen preset's layout comes from (shown once)


def _query() -> dict[str, str]:
    qp = st.query_params
    return {k: qp.get_all(k)[-1] for k in qp.keys()}


def _fingerprint(params: dict[str, str]) -> str:
    return urlencode(sorted(params.items()))


def _from_url(query: dict, specs) -> Resolved:
    cfg, issues = parse_params(query)
    m = load_model(cfg.model)  # parse_params has already checked the model
    cfg, moves = repair(m, cfg)
    page, page_issues = parse_page_params(query, specs)
    # A link is blamed only for what it contains; moving a default it left out is the app's own
    # adjustment (a notice), not an error in the link.
    final = {a.key: _show(a.new) for a in moves}
    bad = {i.key for i in issues}
    found = [replace(i, fallback=final.get(i.key, i.fallback)) for i in issues] + page_issues + [
        ParamIssue(a.key, _show(a.old), f"not valid here: {a.reason}", _show(a.new))
        for a in moves if a.key in query and a.key not in bad]
    for k in list(st.session_state):  # stale widget values must not override the link
        if isinstance(k, str) and (k.startswith(W) or k.startswith(P)):
            del st.session_state[k]
    return Resolved(cfg, m, page, issues=found,
                    notes=[str(a) for a in moves if a.key not in query])


def _show(v) -> str:
    return ("1" if v else "0") if isinstance(v, bool) else str(v)


def _from_widgets(specs) -> Resolved:
    ss = st.session_state
    prev: Config = ss[CFG]
    cfg = replace(prev, **{k: ss[W + k] for k in CONFIG_KEYS if W + k in ss})
    started = ""
    if cfg.model != prev.model:  # a newly chosen preset starts from its own layout
        cfg, started = start_of(cfg.model, cfg)
    pinned = frozenset(k for k in CONFIG_KEYS if getattr(cfg, k) != getattr(prev, k)) - NEVER_PINNED
    m = load_model(cfg.model)
    cfg, moves = repair(m, cfg, pinned)
    page = {s.key: ss.get(P + s.key, ss.get("_ml_pv", {}).get(s.key, s.default)) for s in specs}
    return Resolved(cfg, m, page, notes=[str(a) for a in moves], started=started)


def resolve(page_name: str, specs: tuple[PageParam, ...] = ()) -> Resolved:
    """This run's configuration; seeds every widget key with it (call before the widgets)."""
    ss = st.session_state
    query = _query()
    ours = query and _fingerprint(query) in ss.get(RECENT, ())
    arrived = ss.get(PAGE) != page_name
    if CFG not in ss or (arrived and query and not ours):
        res = _from_url(query, specs)
    else:
        res = _from_widgets(specs)
    ss[CFG], ss[PAGE], ss["_ml_pv"] = res.cfg, page_name, dict(res.page)
    for k in CONFIG_KEYS:
        ss[W + k] = getattr(res.cfg, k)
    for s in specs:
        ss[P + s.key] = res.page[s.key]
    return res


def params_for(res: Resolved, specs: tuple[PageParam, ...],
               page: dict | None = None) -> dict[str, str]:
    return to_params(res.cfg) | page_to_params(page if page is not None else res.page, specs)


def write_url(res: Resolved, specs: tuple[PageParam, ...] = (), page: dict | None = None) -> dict:
    """Rewrite the query string from this run's settings (only when it changed)."""
    ss = st.session_state
    if page is not None:
        ss["_ml_pv"] = dict(page)
    params = params_for(res, specs, page)
    recent = list(ss.get(RECENT, ()))
    fp = _fingerprint(params)
    ss[RECENT] = tuple((recent + [fp])[-RECENT_KEEP:]) if fp not in recent else tuple(recent)
    if _query() != params:
        st.query_params.from_dict(params)
    return params


def share_url(params: dict[str, str]) -> str:
    """The full link: the page's address in the user's browser plus the query string."""
    base = st.context.url or "http://localhost:8501/"
    query = urlencode({k: params[k] for k in sorted(params, key=_url_order)})
    return base + ("?" + query if query else "")


def _url_order(k: str) -> tuple[int, str]:
    return (KEYS.index(k), k) if k in KEYS else (len(KEYS), k)
