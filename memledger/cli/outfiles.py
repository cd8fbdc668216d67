"""Where `memledger validate` writes: stored results (the ones the tests re-predict) are kept
unless --force, checked before anything is measured."""
from __future__ import annotations

from pathlib import Path

from memledger.errors import SpecError


def keep_existing(targets: list[Path], force: bool) -> None:
    """Refuse to replace a stored result (the tests re-predict the committed ones) unless
    --force: one line naming the file and what to do instead. Checked before measuring."""
    if not force and any(t.exists() for t in targets):
        raise SpecError("out", f"{targets[0]} exists: write to another folder (e.g. out/validation/)"
                               f" or pass --force to replace it")
