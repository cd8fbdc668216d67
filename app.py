"""memledger dashboard: `streamlit run app.py`.

A classic Streamlit multipage app: every file in `pages/` is a page, served at its file name;
this script is the root URL and shows the Ledger page. Each page draws its own frame (menu,
config, sidebar) — see memledger.views.frame. The URL is the state: each page reads and writes
its settings as query parameters.
"""
import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).parent / "pages" / "ledger.py"), run_name="__main__")
