"""Whether an optional framework the engines run (torchtitan, Megatron-Core) is installed: a
SpecError naming the one line that installs it, which the CLI prints and exits 2 on."""
from __future__ import annotations

import importlib

from memledger.errors import SpecError


def require_module(module: str, package: str, install: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise SpecError("engine", f"{package} is not installed ({e}); install it with: "
                                  f"{install}") from None
