"""Views: everything between the core and the Streamlit pages, grouped by page.

Shared, one module each: `state` (URL parameters ⇄ a configuration), `model_codec` (an imported
model carried in the URL), `options` (valid values per widget and the repair of bad settings,
decided by the core's checks), `compute` (memoised ledgers for a configuration), `palette` (one
colour per ledger row), `figures` (the house chart style, capacity line, verdict), `tables`
(the ledger's CSV/JSON downloads), `export` (kaleido PNG/SVG, standalone HTML), `navigation`
(the page list). Streamlit glue: `frame` (page config and menu), `sync` (URL ⇄ session ⇄
widgets), `sidebar` (the shared settings), `ui` (link errors, the share link, a chart with its
downloads). `devserver` runs the app in headless Chromium for tests, benchmarks and screenshots.

Per page, its state, charts and tables: `ledger/`, `staircase/`, `where/`, `strategies/`,
`planner/`, `validation/`. Pages hold no arithmetic: they call these.
"""
