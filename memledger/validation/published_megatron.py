"""Published Megatron-Core runs re-predicted: validation/published-megatron.json's rows (golden
values of Megatron-LM's functional tests on DGX H100) against the ledger's peak allocated of the
last pipeline rank.

The published figure is `mem-max-allocated-bytes` (torch's `allocated_bytes.all.peak`), logged
only by the last rank (Megatron's TensorBoard writer). Every row is spelled as memledger runs
Megatron-Core: loop megatron, precision megatron (bf16 weights, fp32 main grads, fp32 main params
and Adam moments in the distributed optimizer, zero=1), profile megatron (flash attention, TE),
the run's hidden dropout (Megatron-LM's default 0.1 where the config does not set it).
NCCL's buffers are left out (`nccl_channels=0`): NCCL allocates them itself, outside the caching
allocator whose statistics the figure reads. Ignores what the ledger does not itemise for
Megatron (TE / cuBLAS workspaces, fused cross-entropy, MTP activations): named per row.
"""
from __future__ import annotations

from pathlib import Path

from memledger.validation import published_titan
from memledger.validation.published_titan import BAR, summary  # noqa: F401 - the same bar

DATA = Path(__file__).resolve().parents[2] / "validation" / "published-megatron.json"


def load(path: Path = DATA) -> list[dict]:
    return published_titan.load(path)


def _model(spelling: dict):
    """A row's model: a config.json (`hf_config`) or ModelSpec fields (`spec`, MoE as a dict)."""
    from memledger.model.hf_config import from_hf_config
    from memledger.specs.model import ModelSpec, MoESpec
    if "hf_config" in spelling:
        return from_hf_config(dict(spelling["hf_config"]), "published-megatron")
    fields = dict(spelling["spec"])
    if "moe" in fields:
        fields["moe"] = MoESpec(**fields["moe"])
    return ModelSpec(**fields)


def specs(ml: dict):
    """(model, ParallelSpec, TrainSpec, RuntimeSpec) of a row's memledger spelling."""
    from memledger.specs import ParallelSpec, TrainSpec
    from memledger.specs.runtime import RuntimeSpec

    m = _model(ml["model"])
    p = ParallelSpec(tp=ml["tp"], pp=ml["pp"], vpp=ml.get("vpp", 1), cp=ml["cp"], dp=ml["dp"],
                     ep=ml["ep"], etp=ml["etp"], zero=1, sp=ml["sp"],
                     schedule=ml.get("schedule", "1f1b"))
    t = TrainSpec(seq=ml["seq"], micro_batch=ml["micro_batch"], micro_batches=ml["micro_batches"],
                  precision="megatron", recompute=ml["recompute"], profile="megatron",
                  vocab_pad=ml["vocab_pad"], hidden_dropout_pct=ml["hidden_dropout_pct"])
    rt = RuntimeSpec(loop="megatron", nccl_channels=0, cuda_context_bytes=0,
                     allocator_slack_pct=0, a2a=ml["a2a"],
                     capacity_factor_pct=ml["capacity_factor_pct"])
    return m, p, t, rt


def predict(row: dict) -> dict:
    """The ledger's peak allocated and static rows (bytes) of the last rank and the relative
    error of the peak against the published figure."""
    from memledger.ledger import build_ledger

    r = build_ledger(*specs(row["memledger"])).ranks[-1]
    static = r.rows["weights"] + r.rows["gradients"] + r.rows["optimizer"]
    pub = row["published_bytes"]
    return {"id": row["id"], "published_bytes": pub, "peak_bytes": r.peak_allocated_bytes,
            "static_bytes": static, "between_steps_bytes": row["between_steps_bytes"],
            "error": (r.peak_allocated_bytes - pub) / pub}

