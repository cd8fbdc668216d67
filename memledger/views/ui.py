"""Page furniture shared by every page (Streamlit glue): link problems, the share link, a chart
with its export buttons, and the ledger's table downloads. Exports are built on click."""
from __future__ import annotations

import re

import streamlit as st

from memledger.ledger import Ledger
from memledger.specs.parallel import SCHEDULES
from memledger.views import export, tables
from memledger.views.state import PageParam, hardware
from memledger.views.sync import Resolved, share_url, write_url

SCHEDULE_HELP = "\n".join(f"- **{k}**: {v}" for k, v in SCHEDULES.items())


def issues(res: Resolved) -> None:
    """Bad values in the link (errors naming the parameter) and the app's own moves."""
    for i in res.issues:
        st.error(f"Share link: `{_code(i.key)}={_code(i.value)}`: {md_escape(i.message)}. "
                 f"Using `{_code(i.key)}={_code(i.fallback)}`.", icon=":material/link_off:")
    for text in res.notes:
        st.toast(md_escape(f"Adjusted {text}"), icon=":material/tune:")
    if res.started:
        st.info(md_escape(res.started) + ".", icon=":material/flag:")


def md_escape(text: str) -> str:
    """Backslash-escape Markdown (and Streamlit's $…$ LaTeX) so messages show as written."""
    return re.sub(r"([\\`*_{}\[\]()<>#+\-.!|~$])", r"\\\1", text)


def _code(text: str) -> str:
    """A user-supplied value inside a code span: no backticks, and cut to a readable length."""
    text = str(text).replace("`", "'")
    return text if len(text) <= 40 else text[:37] + "..."


def header(title: str):
    """The page title with a "Share link" popover beside it (filled in by `finish`)."""
    left, right = st.columns([4, 1], vertical_alignment="center")
    left.subheader(title)
    with right.container(horizontal_alignment="right"):
        share = st.popover("Share link", icon=":material/link:", width="content",
                           help="A link that opens exactly this view")
    return share


def finish(res: Resolved, specs: tuple[PageParam, ...] = (), page: dict | None = None,
           share=None) -> str:
    """Write the URL from this run's settings and put the share link in the header popover."""
    params = write_url(res, specs, page)
    url = share_url(params)
    with share if share is not None else st.sidebar:
        st.caption("Opens exactly this view. Copy it with the Copy button at the box's top "
                   "right.")
        st.code(url, language=None, wrap_lines=True)
        if link_is_local(url):
            st.warning("This link names this machine (localhost): it opens only here. To share "
                       "it, serve memledger on an address your team can reach — see Hosting in "
                       "the README.", icon=":material/lan:")
        _copy_as(res)
    return url


def _copy_as(res: Resolved) -> None:
    """The current configuration in a framework's own form (memledger.configs.export)."""
    from memledger.views.config_io import COPY_AS, copy_as
    choice = st.selectbox("Copy as", list(COPY_AS), index=None, key="share_copy_as",
                          placeholder="Megatron flags, torchtitan config, DeepSpeed JSON")
    if choice is None:
        return
    try:
        text = copy_as(res.cfg, COPY_AS[choice])
    except ValueError as e:  # the framework cannot express a setting: say which
        st.caption(md_escape(f"{choice}: {e}."))
        return
    st.code(text, language={"megatron": "bash", "torchtitan": "toml"}.get(COPY_AS[choice], "json"),
            wrap_lines=True)


def chart(fig, stem: str, key: str, led: Ledger | None = None, setting: str = "") -> None:
    """A Plotly chart, then its downloads behind a toggle (built only while shown; each file
    only when clicked): the chart as PNG, SVG and standalone HTML — stamped with `setting`
    (see `setting`), the version and the date — and, given a ledger, its table as CSV and
    JSON."""
    st.plotly_chart(fig, config=export.modebar_config(stem), key=key, theme=None,
                    width="stretch")
    # six buttons re-rendered on every slider move cost the browser more than a click to show
    # them (a toggle, not an expander: some charts already sit in an expander)
    if st.toggle("Downloads: PNG, SVG, HTML" + (", CSV, JSON" if led is not None else ""),
                 key=f"{key}_dl"):
        _downloads(fig, stem, key, led, setting)


def _downloads(fig, stem: str, key: str, led: Ledger | None, setting: str) -> None:
    stamp = export.stamp_text(setting)
    # stamped when a download is clicked: copying a figure costs ~20 ms of a slider move
    out = lambda: export.stamped(fig, stamp)  # noqa: E731
    status = export.status()
    why = status.reason or "Rendered on the server (kaleido), 1200 px wide."
    with st.container(horizontal=True, gap="small"):
        st.download_button("PNG", lambda: export.to_image(out(), "png"), f"{stem}.png",
                           "image/png", key=f"{key}_png", disabled=not status.ok, help=why,
                           on_click="ignore", icon=":material/image:")
        st.download_button("SVG", lambda: export.to_image(out(), "svg"), f"{stem}.svg",
                           "image/svg+xml", key=f"{key}_svg", disabled=not status.ok, help=why,
                           on_click="ignore", icon=":material/draw:")
        st.download_button("HTML", lambda: export.to_html(out(), stem), f"{stem}.html", "text/html",
                           key=f"{key}_html", on_click="ignore", icon=":material/code:",
                           help="A standalone interactive page (plotly.js inlined, works offline).")
        if led is not None:
            _ledger_downloads(led, stem)


def _ledger_downloads(led: Ledger, stem: str) -> None:
    """CSV and JSON of the whole ledger: the integers the CLI's --json prints."""
    st.download_button("Rows per rank (CSV)", lambda: tables.ranks_csv(led), f"{stem}_ranks.csv",
                       "text/csv", key="dl_ranks_csv", on_click="ignore", icon=":material/table:",
                       help="One line per pipeline rank: the six rows and the peaks, in bytes.")
    st.download_button("Items (CSV)", lambda: tables.items_csv(led), f"{stem}_items.csv",
                       "text/csv", key="dl_items_csv", on_click="ignore", icon=":material/list:",
                       help="Every item of every rank, in bytes, with its formula and source.")
    st.download_button("Ledger (JSON)", lambda: tables.ledger_json(led), f"{stem}.json",
                       "application/json", key="dl_json", on_click="ignore",
                       icon=":material/data_object:",
                       help="Exactly what `memledger ledger --json` prints for this configuration.")


def model_key(res: Resolved) -> str:
    """The model as a file name part: the preset key, or an imported model's name."""
    return res.cfg.model if not res.cfg.model.startswith("spec:") else res.model.name


def stem(res: Resolved, page: str) -> str:
    """A download's file name: the layout's degrees (HSDP replicas only when on)."""
    c = res.cfg
    model = model_key(res)
    hsdp = f"hsdp{c.dp_replicate}" if c.dp_replicate > 1 else ""
    return export.file_stem(page, model, f"tp{c.tp}", f"pp{c.pp}", f"ep{c.ep}", f"cp{c.cp}",
                            f"dp{c.dp}", hsdp, f"zero{c.zero}", f"mb{c.mb}x{c.seq}")


def grid(items, n_cols: int):
    """(column, item) pairs that fill `n_cols` columns row by row: one layout for every
    grid of small widgets."""
    cols = st.columns(n_cols)
    return [(cols[i % n_cols], x) for i, x in enumerate(items)]


def setting(res: Resolved) -> str:
    """World size and GPU of the shared configuration, for exported charts."""
    return f"{res.cfg.world:,} × {hardware(res.cfg).name}"


LOOPBACK = ("localhost", "127.0.0.1", "0.0.0.0", "::1", "[::1]")


def link_is_local(url: str) -> bool:
    """True when the link's host is this machine's loopback name or address."""
    from urllib.parse import urlsplit
    host = (urlsplit(url).hostname or "").lower()
    return host in LOOPBACK or host.startswith("127.")


def fit_banner(led: Ledger, hw) -> None:
    """Fits / over on the GPU, as the Ledger page says it: the most loaded rank's peak total
    (views.figures.Fit.sentence, labelled by views.peaks)."""
    from memledger.views.figures import fit

    v = fit(led, hw)
    (st.success if v.fits else st.error)(f"**{v.sentence(hw.name)}**",
                                          icon=":material/check_circle:" if v.fits else ":material/error:")
