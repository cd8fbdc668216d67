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


def merge_measurements(path: Path, doc: dict, cases, same: tuple[str, ...],
                       refreshed: tuple[str, ...] = ()) -> dict:
    """The stored run at `path` with `doc`'s measurements in place of their namesakes (or
    added), ordered as `cases` (names not in it last); the stored environment kept, but for the
    `refreshed` keys, taken from this run. A stored run whose environment differs in a `same`
    key (another torch, framework or backend) is not mixed in: one line saying so."""
    import json
    if not path.exists():
        return doc
    try:
        stored = json.loads(path.read_text())
        old = stored["measurements"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SpecError("merge", f"cannot read {path} to merge into: {e}") from None
    env = stored.get("environment", {})
    diff = [k for k in same if env.get(k) != doc["environment"][k]]
    if diff:
        raise SpecError("merge", f"{path} was measured with another {', '.join(diff)} ("
                                 + ", ".join(str(env.get(k)) for k in diff)
                                 + "): re-measure every case (--force) instead of merging")
    new = {e["case"]: e for e in doc["measurements"]}
    entries = [new.pop(e["case"], e) for e in old] + list(new.values())
    order = {c.name: i for i, c in enumerate(cases)}
    entries.sort(key=lambda e: order.get(e["case"], len(order)))  # stable
    if refreshed:
        stored = {**stored, "environment": {**env, **{k: doc["environment"][k]
                                                      for k in refreshed}}}
    return {**stored, "measurements": entries}
