"""Views: everything between the core and the Streamlit pages.

Pure (no Streamlit): `state` (URL parameters <-> a configuration), `model_codec` (an imported
model carried in the URL), `options` (valid values per widget, repair of bad settings, decided
by the core's validation), `compute` (memoised ledgers for a configuration), `palette` (one
colour per ledger row), `charts` / `seed_charts` (Plotly figures), `summary` (headline numbers),
`tables` (pandas frames, CSV/JSON downloads), `export` (kaleido PNG/SVG, standalone HTML) and
`navigation` (the page list). Streamlit glue: `sync` (URL ⇄ session ⇄ widgets), `sidebar` (the
shared settings) and `ui` (link errors, share link, chart + downloads). `devserver` runs the app
in headless Chromium for the browser test, the benchmark and the screenshots.
Pages hold no arithmetic: they call these.
"""
