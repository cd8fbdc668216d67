"""The dashboard's pages, in menu order. Pages built on other branches are listed here too and
registered only when their file exists, so the menu lists only pages that exist."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PageInfo:
    file: str  # relative to the app's root
    title: str
    icon: str
    url_path: str


PAGES = (
    PageInfo("app_pages/ledger.py", "Ledger", ":material/account_balance_wallet:", "ledger"),
    PageInfo("app_pages/staircase.py", "Pipeline staircase", ":material/stairs:", "staircase"),
    PageInfo("app_pages/where_memory_goes.py", "Where memory goes", ":material/donut_small:", "where"),
    PageInfo("app_pages/strategies.py", "Strategies", ":material/alt_route:", "strategies"),
    PageInfo("app_pages/planner.py", "Planner", ":material/grid_view:", "planner"),
    PageInfo("app_pages/validation.py", "Validation", ":material/fact_check:", "validation"),
)


def available(root: Path) -> list[PageInfo]:
    """The pages whose file exists under `root`; the first one is the default page."""
    return [p for p in PAGES if (root / p.file).is_file()]
