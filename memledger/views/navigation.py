"""The dashboard's pages, in menu order: one file each under the top-level `pages/` folder.

The app is a classic Streamlit multipage app: Streamlit serves every file in `pages/` at its
file name (`/staircase`, `/where`, …), and `app.py` (the root URL) shows the Ledger page. Each
page draws the frame itself (`memledger.views.frame`), so a share link that is the first request
of a fresh server opens with the same menu and sidebar as any other.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PageInfo:
    file: str  # relative to the app's root
    title: str
    icon: str

    @property
    def url_path(self) -> str:
        """Streamlit's path for a file in pages/: the file name without `.py`."""
        return Path(self.file).stem


PAGES = (
    PageInfo("pages/ledger.py", "Ledger", ":material/account_balance_wallet:"),
    PageInfo("pages/staircase.py", "Pipeline staircase", ":material/stairs:"),
    PageInfo("pages/where.py", "Where memory goes", ":material/donut_small:"),
    PageInfo("pages/strategies.py", "Strategies", ":material/alt_route:"),
    PageInfo("pages/planner.py", "Planner", ":material/grid_view:"),
    PageInfo("pages/validation.py", "Validation", ":material/fact_check:"),
)


def available(root: Path) -> list[PageInfo]:
    """The pages whose file exists under `root`; the first one is the default page."""
    return [p for p in PAGES if (root / p.file).is_file()]


def page(url_path: str) -> PageInfo:
    return next(p for p in PAGES if p.url_path == url_path)
