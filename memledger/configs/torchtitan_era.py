"""Which torchtitan a job configuration was written for, and the loss it runs — read from how
the file spells its keys (the torchtitan importer's part for --torchtitan-version, --loss and
--profile; the eras' rules are memledger.ledger.torchtitan_eras).

| spelling | era | source |
|---|---|---|
| a `model_spec` section (0.3's dumped `Trainer.Config`) | 0.3 | torchtitan 0.3 trainer.py, `debug.save_config_file` |
| parallel degrees under `[training]` / `[experimental]`, `float8.enable_float8_linear` | 2024-12 | config_manager.py at 9dec370 (Dec 2024) |
| `training.compile` as a switch beside `[parallelism]` | 2025-06 | config_manager.py at e7c0cae (June 2025) |
| `[parallelism]` and `[compile]` tables | 0.2 | torchtitan 0.2 config/job_config.py |

0.3's dump names its loss: `loss.num_chunks` is `ChunkedLossWrapper.Config` (components/loss.py)
→ --loss chunked; the TOML eras' `cross_entropy_loss` materialises the logits (the loop's
default). Every era trains plain-PyTorch modules: --profile hf (specs.loop.LOOP_PROFILES).
Ignores: a file mixing spellings of two eras (the oldest spelling found decides).
"""
from __future__ import annotations

from memledger.configs.rules import Imported
from memledger.configs.source import Source
from memledger.specs.loop import CHUNKED_LOSS_CHUNKS as NUM_CHUNKS
from memledger.specs.loop import LOOP_PROFILES

# (keys any of which implies the era, era, source), oldest spelling first
ERA_SPELLINGS = (
    (("training.data_parallel_shard_degree", "training.data_parallel_replicate_degree",
      "training.tensor_parallel_degree", "experimental.pipeline_parallel_degree",
      "experimental.context_parallel_degree", "float8.enable_float8_linear"), "2024-12",
     "torchtitan config_manager.py at 9dec370 (Dec 2024: degrees under [training] / "
     "[experimental])"),
    (("training.compile",), "2025-06",
     "torchtitan config_manager.py at e7c0cae (June 2025: training.compile before [compile])"),
)
DUMP_ERA = ("0.3", "torchtitan 0.3 trainer.py (debug.save_config_file dumps Trainer.Config "
                   "with its model_spec)")
TOML_ERA = ("0.2", "torchtitan 0.2 config/job_config.py ([parallelism], [compile])")
LOSS_SOURCE = "torchtitan 0.3 components/loss.py (ChunkedLossWrapper.Config.num_chunks)"


def era(data: dict, flat: dict) -> tuple[str, str, str]:
    """(era, the key that shows it, source) of a configuration's spelling."""
    if isinstance(data.get("model_spec"), dict):
        return DUMP_ERA[0], "model_spec.name", DUMP_ERA[1]
    for keys, name, source in ERA_SPELLINGS:
        hit = next((k for k in keys if flat.get(k) is not None), None)
        if hit is not None:
            return name, hit, source
    return TOML_ERA[0], "", TOML_ERA[1]


def era_and_loss(data: dict, flat: dict, src: Source, imp: Imported) -> None:
    """--torchtitan-version from the spelling, --loss chunked from 0.3's dumped loss section,
    --profile hf (torchtitan's model code)."""
    name, key, source = era(data, flat)
    # set without a key (the key's own row keeps its own flags); the era gets a row of its own
    imp.set("torchtitan_version", name, src, "", default=not key)
    imp.row("read" if key else "default", key or "(the file's spelling)", src,
            value=flat[key] if key else name,
            flags=(("torchtitan_version", name),), source=source)
    chunks = flat.get("loss.num_chunks")
    if chunks is not None:
        imp.set("loss", "chunked", src, "")
        if chunks != NUM_CHUNKS:
            imp.row("unmodelled", "loss.num_chunks", src, value=chunks,
                    why=f"memledger models ChunkedLossWrapper's {NUM_CHUNKS} chunks (the last "
                        f"chunk's transient is ⌈T/{NUM_CHUNKS}⌉ tokens)")
        else:
            imp.row("read", "loss.num_chunks", src, value=chunks, flags=(("loss", "chunked"),),
                    source=LOSS_SOURCE)
    imp.set("profile", LOOP_PROFILES["torchtitan"], src, "", default=True)
