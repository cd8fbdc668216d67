"""torchtitan engine cases as data, and their ledger translation (pure: no torch imported).

A case names one of torchtitan's own training configurations (its config registry, e.g.
`torchtitan/models/llama3/config_registry.py: llama3_8b`) and the layout torchtitan would run it
with at real scale: world size, tensor / context parallel degrees, the activation-checkpointing
mode, sequence length and local batch. FSDP2 takes the leftover ranks
(`data_parallel_shard_degree = -1`, torchtitan/config/configs.py ParallelismConfig). The
numbers the harness measures come from torchtitan's code; this module only says what to run
and how memledger spells the same configuration:

| torchtitan                                        | memledger                              |
|---------------------------------------------------|----------------------------------------|
| fp32 params, MixedPrecisionPolicy(bf16, fp32)     | precision="fsdp2-mixed"                |
|   (training.dtype / mixed_precision_param/_reduce) |                                        |
| FSDP2 over dp_shard (fully_shard per block + root) | zero=3, zero3_impl="fsdp"              |
| SelectiveAC (per-op save list)                    | recompute="op"                         |
| FullAC                                            | recompute="full"                       |
| AdamW (fused), zero_grad(set_to_none)             | loop="torchtitan"                      |
| ChunkedLossWrapper (logits per chunk)             | loss="chunked"                         |
| TP with loss parallel, SP on                      | tp, sp=True, tp_engine="dtensor"       |

Not run here: pipeline parallelism (torchtitan's `pipeline_llm` splits the model with
`torch.distributed.pipelining`, whose stage shape inference runs a real forward over the
send/recv ops — see docs/engine-validation.md), expert parallelism (DeepSeek-V3's all-to-all
token dispatch sizes its buffers from data-dependent routing counts, which FakeTensorMode
cannot produce).
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.errors import SpecError

AC_MODES = ("selective", "full", "none")
FAMILIES = ("llama3", "qwen3")


@dataclass(frozen=True, kw_only=True)
class TitanCase:
    name: str
    family: str  # torchtitan.models.<family>
    config_fn: str  # the config registry function, e.g. "llama3_8b"
    preset: str  # memledger model preset with the same architecture ("" = hf_config)
    hf_config: tuple = ()  # (key, value) pairs of a config.json when no preset matches
    world: int
    tp: int = 1
    cp: int = 1
    ac: str = "selective"
    seq: int = 8192
    local_batch: int = 1

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise SpecError("family", f"{self.family!r}; valid: {', '.join(FAMILIES)}")
        if self.ac not in AC_MODES:
            raise SpecError("ac", f"{self.ac!r}; valid: {', '.join(AC_MODES)}")
        if self.world % (self.tp * self.cp):
            raise SpecError("world", f"{self.world} is not divisible by tp·cp = "
                                     f"{self.tp * self.cp}")

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.cp)


# Qwen/Qwen3-32B config.json (its model card), as torchtitan's qwen3 "32B" flavor builds it
QWEN3_32B = (("model_type", "qwen3"), ("hidden_size", 5120), ("num_hidden_layers", 64),
             ("num_attention_heads", 64), ("num_key_value_heads", 8), ("head_dim", 128),
             ("intermediate_size", 25600), ("vocab_size", 151936),
             ("tie_word_embeddings", False), ("rms_norm_eps", 1e-6),
             ("max_position_embeddings", 40960), ("hidden_act", "silu"))

CASES: tuple[TitanCase, ...] = (
    TitanCase(name="llama3-8b fsdp8 op-ac", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=8, ac="selective"),
    TitanCase(name="llama3-8b fsdp8 full-ac", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=8, ac="full"),
    TitanCase(name="llama3-8b fsdp128 op-ac", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=128, ac="selective"),
    TitanCase(name="llama3-8b fsdp8 no-ac seq2048", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=8, ac="none", seq=2048),
    TitanCase(name="llama3-8b fsdp4 tp2 op-ac", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=8, tp=2, ac="selective"),
    TitanCase(name="llama3-70b fsdp32 tp8 full-ac", family="llama3", config_fn="llama3_70b",
              preset="llama3-70b", world=256, tp=8, ac="full"),
    TitanCase(name="qwen3-32b fsdp16 tp4 full-ac", family="qwen3", config_fn="qwen3_32b",
              preset="", hf_config=QWEN3_32B, world=64, tp=4, ac="full", seq=4096,
              local_batch=2),
)
BY_NAME = {c.name: c for c in CASES}


def case_by_name(name: str) -> TitanCase:
    if name not in BY_NAME:
        raise SpecError("case", f"unknown torchtitan case {name!r}; valid: "
                                + "; ".join(BY_NAME))
    return BY_NAME[name]


def ledger_config(case: TitanCase) -> dict:
    """The same run in memledger's specs, as plain keyword dicts (ModelSpec by preset)."""
    recompute = {"selective": "op", "full": "full", "none": "none"}[case.ac]
    return {"model": case.preset or {"hf_config": dict(case.hf_config)},
            "parallel": {"tp": case.tp, "cp": case.cp, "dp": case.dp, "zero": 3,
                         "sp": case.tp > 1},
            "train": {"seq": case.seq, "micro_batch": case.local_batch, "micro_batches": 1,
                      "precision": "fsdp2-mixed", "recompute": recompute, "profile": "hf",
                      "vocab_pad": 1},
            "runtime": {"loop": "torchtitan", "loss": "chunked", "zero3_impl": "fsdp",
                        "tp_engine": "dtensor", "cuda_context_bytes": 0,
                        "allocator_slack_pct": 0}}
