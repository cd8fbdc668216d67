"""The rules that need the whole configuration after the files and the explicit flags are
merged: micro-batches from a global batch (Megatron global_batch_size / (micro · dp),
megatron/training/arguments.py; torchtitan global / (local · dp), torchtitan/config/job_config.py)
and the world/degree check, with errors naming the file, line and key the numbers came from.
Used by the CLI's --config and the app's import. Pure arithmetic on integers."""
from __future__ import annotations

from memledger.configs.rules import Imported
from memledger.configs.source import ConfigError


def where(imp: Imported, dest: str, fallback: str = "") -> tuple[str, int, str]:
    return imp.origin.get(dest) or imp.origin.get(fallback) or (imp.files[0], 0, "")


def data_parallel(imp: Imported, *, tp: int, pp: int, cp: int, dp: int | None, world: int) -> int:
    """dp as given, else world / (tp·pp·cp) — a ConfigError when that does not divide."""
    if dp is not None:
        return dp
    if world % (tp * pp * cp):
        name, line, key = where(imp, "world", "tp")
        raise ConfigError(name, f"world {world} is not divisible by tp·pp·cp = {tp}·{pp}·{cp} = "
                                f"{tp * pp * cp}", line=line, key=key or "world")
    return world // (tp * pp * cp)


def replicas(imp: Imported, values: dict, *, dp: int) -> int | None:
    """HSDP copies a file implies once dp is known: DeepSpeed MiCS at stage 3 shards inside
    groups of mics_shard_size ranks (None when the file says nothing of it)."""
    shard = values.get("_mics_shard", -1)
    if shard is None or shard <= 0 or values.get("zero") != 3:
        return None
    if dp % shard:
        name, line, key = where(imp, "_mics_shard")
        raise ConfigError(name, f"mics_shard_size {shard} does not divide dp {dp}", line=line,
                          key=key or "zero_optimization.mics_shard_size")
    return dp // shard


def micro_batches(imp: Imported, values: dict, *, dp: int, micro_batch: int) -> int | None:
    """Micro-batches per step from the files' global/local batch; None when they give neither."""
    gb, local = values.get("_global_batch"), values.get("_local_batch")
    if gb in (None, -1) and local is None:
        return None
    if gb not in (None, -1):
        name, line, key = where(imp, "_global_batch")
        per = (micro_batch if local is None else local) * dp
        if gb % per:
            raise ConfigError(name, f"global batch {gb} is not divisible by "
                                    f"{'micro' if local is None else 'local'} batch "
                                    f"{per // dp} × dp {dp} = {per}", line=line, key=key)
        samples = gb // dp
    else:
        samples = local
    if samples % micro_batch:
        name, line, key = where(imp, "micro_batch")
        raise ConfigError(name, f"{samples} samples per dp rank are not a multiple of the "
                                f"micro-batch {micro_batch}", line=line, key=key)
    return samples // micro_batch
