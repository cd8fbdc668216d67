"""Views: everything between the core and the Streamlit pages.

Pure modules (no Streamlit): `state` (URL <-> configuration), `model_codec` (a model in a URL),
`options` (valid values, repair), `palette`, `charts` / `seed_charts` (Plotly figures), `tables`
(pandas frames, CSV/JSON) and `export` (kaleido images, HTML). Streamlit glue lives in `sync`,
`sidebar` and `ui`; pages call those and hold no arithmetic.
"""
