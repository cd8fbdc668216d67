"""torchtitan engine cases as data, and their ledger translation (pure: no torch imported).

A case names one of torchtitan's own training configurations (its config registry, e.g.
`torchtitan/models/llama3/config_registry.py: llama3_8b`) and the layout torchtitan would run it
with at real scale: world size, tensor / context parallel degrees, the activation-checkpointing
mode, sequence length and local batch. FSDP2 takes the leftover ranks
(`data_parallel_shard_degree = -1`, torchtitan/config/configs.py ParallelismConfig), split
into `dp_replicate` copies under HSDP (`data_parallel_replicate_degree`). The
numbers the harness measures come from torchtitan's code; this module only says what to run
and how memledger spells the same configuration:

| torchtitan                                        | memledger                              |
|---------------------------------------------------|----------------------------------------|
| fp32 params, MixedPrecisionPolicy(bf16, fp32)     | precision="fsdp2-mixed"                |
|   (training.dtype / mixed_precision_param/_reduce) |                                        |
| FSDP2 over dp_shard (fully_shard per block + root) | zero=3, zero3_impl="fsdp"              |
| HSDP: data_parallel_replicate_degree R, fully_shard | dp_replicate=R (dp = R × dp_shard; the  |
|   on the (dp_replicate, fsdp) mesh; experts on    |   states shard over dp·cp/R, experts   |
|   (dp_replicate, efsdp) (parallel_dims.py)        |   over world/(pp·ep·R))                |
| SelectiveAC (per-op save list)                    | recompute="op"                         |
| FullAC                                            | recompute="full"                       |
| AdamW (fused), zero_grad(set_to_none)             | loop="torchtitan"                      |
| ChunkedLossWrapper (logits per chunk)             | loss="chunked"                         |
| TP with loss parallel, SP on                      | tp, sp=True, tp_engine="dtensor"       |
| CP: k, v all-gathered per block, inputs sharded   | cp (FSDP over dp·cp = torchtitan's     |
|   (context_parallel/api.py, head-tail balancer)   |   "fsdp" mesh, dp_shard × cp)          |
| EP: AllToAllTokenDispatcher, experts Shard(1)     | ep, FSDP2 "dim1-if-fewer" (auto under  |
|   when efsdp·ep > experts (distributed/fsdp.py)   |   loop torchtitan), a2a="dynamic"      |
| PP: pipeline_llm + torch.distributed.pipelining   | pp, schedule, vpp, layout, pp_engine   |
| 0.2 optimizer.early_step_in_backward              | optimizer_in_backward=True             |

The DeepSeek-V3 flavors have no memledger preset with the same layers (the preset keeps the
release's MTP layer, torchtitan's flavors build none): they are spelled as config.json tuples
(DSV3_16B, DSV3_671B), like Qwen3-32B. The EP cases run torchtitan's MoE with balanced
all-to-all splits (memledger/engine/titan_parallel.py says why and what else stays
torchtitan's).

Pipeline parallel cases (pp > 1) run torchtitan's `pipeline_llm` and torch.distributed.pipelining's
schedule for one rank of pp rank `pp_rank` (engine/titan_pp.py: the stand-ins for the fake
process group's P2P and why): `schedule` is torchtitan's `pipeline_parallel_schedule` ("1F1B": one stage per rank;
"Interleaved1F1B": two), `microbatch_size` its `pipeline_parallel_microbatch_size`, so
local_batch / microbatch_size micro-batches. memledger spells them pp, schedule "1f1b" /
"interleaved" with vpp = 2, layout = torchtitan's split (`schedules.torchtitan_layout`),
micro_batch = microbatch_size, micro_batches = that count, pp_engine="pytorch".
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.errors import SpecError
# torchtitan's flavors spelled as config.json pairs (no preset with the same layers)
from memledger.model.titan_flavors import DSV3_16B, DSV3_671B, QWEN3_32B
from memledger.specs.loop_implied import implied

AC_MODES = ("selective", "full", "none", "interval")
SCHEDULES = ("1F1B", "Interleaved1F1B")  # torchtitan's pipeline_parallel_schedule names
FAMILIES = ("llama3", "qwen3", "deepseek_v3")
# chunked: the config registry's ChunkedLossWrapper (0.3's own); materialized: its inner
# CrossEntropyLoss on the whole logits (the TOML eras' loss, memledger's --loss auto)
LOSSES = ("chunked", "materialized")
RESHARD = ("default", "always", "never")  # torchtitan/config/configs.py fsdp_reshard_after_forward


@dataclass(frozen=True, kw_only=True)
class TitanCase:
    name: str
    family: str  # torchtitan.models.<family>
    config_fn: str  # the config registry function, e.g. "llama3_8b"
    flavor: str = ""  # another model_registry flavor under that config ("" = the config's own)
    preset: str  # memledger model preset with the same architecture ("" = hf_config)
    hf_config: tuple = ()  # (key, value) pairs of a config.json when no preset matches
    world: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    ac: str = "selective"
    ac_every: int = 0  # interval: 0.2's selective_ac_option "<k>" (engine/titan_ac.py)
    seq: int = 8192
    local_batch: int = 1
    pp: int = 1
    schedule: str = "1F1B"  # pipeline_parallel_schedule
    microbatch_size: int = 1  # pipeline_parallel_microbatch_size
    pp_rank: int = 0  # the pipeline rank measured (global rank pp_rank · world / pp)
    loss: str = "chunked"  # LOSSES
    dp_replicate: int = 1  # HSDP: copies of the FSDP shard group (data_parallel_replicate_degree)
    # torchtitan 0.2 optimizer.early_step_in_backward: one optimizer per parameter, stepped by
    # its post-accumulate-grad hook (0.2 OptimizersInBackwardContainer, built: titan_inbwd)
    early_step: bool = False
    reshard: str = "default"  # parallelism.fsdp_reshard_after_forward: default | always | never
    keep_grads: bool = False  # zero_grad(set_to_none=False), 0.3's CUDA-graph step (titan_graphs)

    def __post_init__(self):
        for field, valid in (("family", FAMILIES), ("ac", AC_MODES), ("loss", LOSSES),
                             ("schedule", SCHEDULES), ("reshard", RESHARD)):
            if getattr(self, field) not in valid:
                raise SpecError(field, f"{getattr(self, field)!r}; valid: {', '.join(valid)}")
        if (self.ac == "interval") != (self.ac_every >= 1) or self.ac_every < 0:
            raise SpecError("ac_every", f"{self.ac_every}: ac=interval needs k >= 1, others 0")
        if self.world % (self.tp * self.cp * self.pp):
            raise SpecError("world", f"{self.world} is not divisible by tp·cp·pp = "
                                     f"{self.tp * self.cp * self.pp}")
        if not 0 <= self.pp_rank < self.pp:
            raise SpecError("pp_rank", f"{self.pp_rank}; valid: 0..{self.pp - 1}")
        if self.local_batch % self.microbatch_size:
            raise SpecError("microbatch_size", f"{self.microbatch_size} does not divide "
                                               f"local_batch = {self.local_batch}")
        if self.dp_replicate < 1 or self.dp % self.dp_replicate:  # parallel_dims._validate
            raise SpecError("dp_replicate", f"{self.dp_replicate} must be ≥ 1 and divide dp = "
                                            f"world/(tp·cp·pp) = {self.dp}")
        if self.keep_grads and (self.pp > 1 or self.ep > 1 or self.early_step):
            raise SpecError("keep_grads", "no CUDA-graph step with PP, EP, the step in backward")
        if self.early_step and (self.pp > 1 or self.ep > 1):  # torchtitan 0.2 build_optimizers
            raise SpecError("early_step", f"torchtitan runs no optimizer in backward with "
                                          f"pp={self.pp}, ep={self.ep} (both must be 1)")
        if self.early_step and self.loss != "materialized":  # 0.2's loss: the whole logits
            raise SpecError("early_step", "torchtitan 0.2 runs its loss on the whole logits: "
                                          "add loss=materialized (a chunked loss would step "
                                          "lm_head every chunk)")
        group = self.world // (self.pp * self.dp_replicate)  # one replica: dp_shard·cp·tp
        if self.ep < 1 or group % self.ep:  # torchtitan: efsdp = dp_shard·cp·tp / ep
            raise SpecError("ep", f"{self.ep} must be ≥ 1 and divide world/(pp·dp_replicate) "
                                  f"= {group}")

    @property
    def dp(self) -> int:
        """The data-parallel degree, replicas included (torchtitan's batch mesh: dp_replicate ×
        dp_shard)."""
        return self.world // (self.tp * self.cp * self.pp)

    @property
    def micro_batches(self) -> int:
        """torchtitan's n_microbatches: local_batch // microbatch_size (1 without PP)."""
        return self.local_batch // self.microbatch_size if self.pp > 1 else 1


CASES: tuple[TitanCase, ...] = (
    TitanCase(name="llama3-8b fsdp8 op-ac", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=8, ac="selective"),
    TitanCase(name="llama3-8b fsdp8 full-ac", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=8, ac="full"),
    TitanCase(name="llama3-8b fsdp128 op-ac", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=128, ac="selective"),
    TitanCase(name="llama3-8b fsdp8 no-ac seq2048", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=8, ac="none", seq=2048),
    # HSDP: 4 copies of the FSDP-8 shard group (the replicas hold fsdp8 op-ac's shards)
    TitanCase(name="llama3-8b hsdp4 fsdp8 op-ac", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=32, dp_replicate=4, ac="selective"),
    TitanCase(name="llama3-8b fsdp4 tp2 op-ac", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=8, tp=2, ac="selective"),
    TitanCase(name="llama3-8b fsdp4 tp2 op-ac materialized loss", family="llama3",
              config_fn="llama3_8b", preset="llama3-8b", world=8, tp=2, ac="selective",
              loss="materialized"),
    TitanCase(name="llama3-70b fsdp32 tp8 full-ac", family="llama3", config_fn="llama3_70b",
              preset="llama3-70b", world=256, tp=8, ac="full"),
    TitanCase(name="qwen3-32b fsdp16 tp4 full-ac", family="qwen3", config_fn="qwen3_32b",
              preset="", hf_config=QWEN3_32B, world=64, tp=4, ac="full", seq=4096,
              local_batch=2),
    TitanCase(name="llama3-8b fsdp4 cp2 op-ac seq32768", family="llama3",
              config_fn="llama3_8b", preset="llama3-8b", world=8, cp=2, ac="selective",
              seq=32768),
    TitanCase(name="llama3-8b fsdp4 tp2 cp2 full-ac seq65536", family="llama3",
              config_fn="llama3_8b", preset="llama3-8b", world=16, tp=2, cp=2, ac="full",
              seq=65536),
    TitanCase(name="dsv3-16b fsdp512 ep64 op-ac", family="deepseek_v3",
              config_fn="deepseek_v3_16b", preset="", hf_config=DSV3_16B, world=512, ep=64,
              ac="selective", seq=4096),
    TitanCase(name="dsv3-16b fsdp256 cp2 ep64 op-ac seq8192", family="deepseek_v3",
              config_fn="deepseek_v3_16b", preset="", hf_config=DSV3_16B, world=512, cp=2,
              ep=64, ac="selective", seq=8192),
    TitanCase(name="dsv3-671b fsdp512 ep64 op-ac", family="deepseek_v3",
              config_fn="deepseek_v3_671b", preset="", hf_config=DSV3_671B, world=512, ep=64,
              ac="selective", seq=4096),
    TitanCase(name="qwen3-30b-a3b fsdp64 ep8 full-ac", family="qwen3",
              config_fn="qwen3_30b_a3b", preset="qwen3-30b-a3b", world=64, ep=8, ac="full",
              seq=4096, local_batch=2),
    TitanCase(name="qwen3-30b-a3b fsdp64 ep8 op-ac", family="qwen3",
              config_fn="qwen3_30b_a3b", preset="qwen3-30b-a3b", world=64, ep=8,
              ac="selective", seq=4096, local_batch=2),
    # HSDP over EP: 2 copies of fsdp64 ep8 (dense states over fsdp 64, experts over efsdp 8)
    TitanCase(name="qwen3-30b-a3b hsdp2 fsdp64 ep8 op-ac", family="qwen3",
              config_fn="qwen3_30b_a3b", preset="qwen3-30b-a3b", world=128, dp_replicate=2,
              ep=8, ac="selective", seq=4096, local_batch=2),
    # EP over TP: the MoE reuses the TP axis for tokens, no FFN reduce-scatter (moe_sharding.py)
    TitanCase(name="qwen3-30b-a3b fsdp8 tp2 ep8 op-ac", family="qwen3",
              config_fn="qwen3_30b_a3b", preset="qwen3-30b-a3b", world=16, tp=2, ep=8,
              ac="selective", seq=4096),
    # the loss's own peak: F.cross_entropy's backward (tp 1) over the RS buffers; b > 1 copies
    # the hidden states' chunks; tied weights: [tok_embeddings, norm, lm_head] one kept unit
    TitanCase(name="llama3-8b fsdp16 full-ac seq4096 lb4", family="llama3",
              config_fn="llama3_8b", preset="llama3-8b", world=16, ac="full", seq=4096,
              local_batch=4),
    TitanCase(name="llama3.2-1b fsdp4 full-ac lb4 tied", family="llama3", config_fn="llama3_8b",
              flavor="1B", preset="llama3.2-1b", world=4, ac="full", local_batch=4),
    # pipeline parallel: torchtitan's pipeline_llm and schedule (titan_pp.py), pp rank 0
    TitanCase(name="llama3-8b fsdp2 pp4 1f1b full-ac", family="llama3", config_fn="llama3_8b",
              preset="llama3-8b", world=8, pp=4, ac="full", local_batch=8),
    TitanCase(name="llama3-8b fsdp2 pp4 1f1b full-ac last stage", family="llama3",
              config_fn="llama3_8b", preset="llama3-8b", world=8, pp=4, ac="full",
              local_batch=8, pp_rank=3),
    # the published 405B runs' layout (benchmarks/llama3_h100_202412_torchtitan.md, Table 5):
    # local batch 32 in 8 micro-batches (Dec 2024: pipeline_parallel_microbatches = pp)
    # llama3_405b() builds a Float8 converter that refuses a CPU: the 405B flavor runs under
    # llama3_70b()'s trainer config (TP 8, FullAC, chunked loss, AdamW: the same as 405B's)
    TitanCase(name="llama3.1-405b fsdp8 tp8 pp8 1f1b full-ac", family="llama3",
              config_fn="llama3_70b", flavor="405B", preset="llama3.1-405b", world=512, tp=8, pp=8,
              ac="full", local_batch=32, microbatch_size=4),
    TitanCase(name="llama3.1-405b fsdp8 tp8 pp8 interleaved full-ac", family="llama3",
              config_fn="llama3_70b", flavor="405B", preset="llama3.1-405b", world=512, tp=8, pp=8,
              schedule="Interleaved1F1B", ac="full", local_batch=32, microbatch_size=4),
    # the pp ranks the ledger finds the most loaded (1F1B: stage 1, 16 layers, 7 micro-batches;
    # interleaved: stages 6 and 14)
    TitanCase(name="llama3.1-405b fsdp8 tp8 pp8 1f1b full-ac pp rank 1", family="llama3",
              config_fn="llama3_70b", flavor="405B", preset="llama3.1-405b", world=512, tp=8,
              pp=8, ac="full", local_batch=32, microbatch_size=4, pp_rank=1),
    TitanCase(name="llama3.1-405b fsdp8 tp8 pp8 interleaved full-ac pp rank 6", family="llama3",
              config_fn="llama3_70b", flavor="405B", preset="llama3.1-405b", world=512, tp=8,
              pp=8, schedule="Interleaved1F1B", ac="full", local_batch=32, microbatch_size=4,
              pp_rank=6),
)
# torchtitan's llama3 "debugmodel" flavor (models/llama3/__init__.py `_debugmodel`: dim 256,
# 16 heads, 6 layers, ffn compute_ffn_hidden_dim(256, multiple_of=256) = 768, vocab 2048, fused
# wqkv, untied head) spelled as a config.json; RoPE theta and scaling change no bytes
LLAMA3_DEBUG = (("model_type", "llama"), ("hidden_size", 256), ("num_hidden_layers", 6),
                ("num_attention_heads", 16), ("num_key_value_heads", 16), ("head_dim", 16),
                ("intermediate_size", 768), ("vocab_size", 2048),
                ("tie_word_embeddings", False), ("rms_norm_eps", 1e-5),
                ("max_position_embeddings", 131072), ("hidden_act", "silu"))


def _debug(name: str, **kw) -> TitanCase:
    return TitanCase(name=name, family="llama3", config_fn="llama3_debugmodel", preset="",
                     hf_config=LLAMA3_DEBUG, **{"seq": 1024, "local_batch": 2, **kw})


# small sizes for real: one gloo CPU process per rank (engine/titan_gloo.py), each case also
# run under fake mode at the same world size
GLOO_CASES: tuple[TitanCase, ...] = (
    _debug("llama3-debug fsdp2 op-ac", world=2, ac="selective"),
    _debug("llama3-debug fsdp2 full-ac", world=2, ac="full"),
    _debug("llama3-debug fsdp2 no-ac seq256", world=2, ac="none", seq=256, local_batch=1),
    # HSDP: 2 copies of fsdp2 op-ac's shard group, FSDP2's all-reduce over gloo for real
    _debug("llama3-debug hsdp2 fsdp2 op-ac", world=4, dp_replicate=2, ac="selective"),
    _debug("llama3-debug tp2 op-ac", world=2, tp=2, ac="selective"),
    _debug("llama3-debug cp2 op-ac", world=2, cp=2, ac="selective"),
    _debug("llama3-debug fsdp2 tp2 op-ac", world=4, tp=2, ac="selective"),
    _debug("llama3-debug fsdp2 tp2 full-ac", world=4, tp=2, ac="full"),
    _debug("llama3-debug tp2 cp2 full-ac", world=4, tp=2, cp=2, ac="full"),
    _debug("llama3-debug pp2 1f1b full-ac", world=2, pp=2, ac="full"),
    _debug("llama3-debug fsdp2 pp2 1f1b full-ac", world=4, pp=2, ac="full"),
    _debug("llama3-debug tp2 pp2 1f1b full-ac", world=4, tp=2, pp=2, ac="full"),
)
BY_NAME = {c.name: c for c in CASES}


def case_by_name(name: str, pool: tuple[TitanCase, ...] = CASES) -> TitanCase:
    by = {c.name: c for c in pool}
    if name not in by:
        raise SpecError("case", f"unknown torchtitan case {name!r}; valid: " + "; ".join(by))
    return by[name]


def _pipeline(case: TitanCase, n_layers: int) -> dict:
    """pp, schedule, chunks and torchtitan's stage split in ParallelSpec's words."""
    if case.pp == 1:
        return {}
    from memledger.ledger.pipeline.schedules import torchtitan_layout
    vpp = 2 if case.schedule == "Interleaved1F1B" else 1  # 1 stage per rank, 2 when looped
    return {"pp": case.pp, "schedule": "interleaved" if vpp > 1 else "1f1b", "vpp": vpp,
            "layout": torchtitan_layout(n_layers, case.pp * vpp)}


def _etp(case: TitanCase) -> int:
    """The routed experts' TP degree torchtitan runs (specs.loop_implied's "etp" rule)."""
    rules = implied("torchtitan", dp=case.dp, cp=case.cp, tp=case.tp, pp=case.pp,
                    dp_replicate=case.dp_replicate, ep=case.ep)
    return rules.get("etp", (1,))[0]


def ledger_config(case: TitanCase, n_layers: int = 0, moe: bool = False) -> dict:
    """The same run in memledger's specs, as plain keyword dicts (ModelSpec by preset; n_layers
    of the model places torchtitan's pipeline split; `moe`: it has routed experts)."""
    recompute, pp = {"selective": "op"}.get(case.ac, case.ac), case.pp > 1
    return {"model": case.preset or {"hf_config": dict(case.hf_config)},
            "parallel": {"tp": case.tp, "cp": case.cp, "dp": case.dp, "ep": case.ep, "zero": 3,
                         "etp": _etp(case) if moe else 1,
                         "dp_replicate": case.dp_replicate, "sp": case.tp > 1,
                         **_pipeline(case, n_layers)},
            "train": {"seq": case.seq,
                      "micro_batch": case.microbatch_size if pp else case.local_batch,
                      "micro_batches": case.micro_batches,
                      "precision": "fsdp2-mixed", "recompute": recompute, "profile": "hf",
                      "recompute_every": case.ac_every, "vocab_pad": 1},
            "runtime": {"loop": "torchtitan", "loss": case.loss, "zero3_impl": "fsdp",
                        "tp_engine": "dtensor", "cuda_context_bytes": 0,
                        "nccl_channels": 0,  # fake process group and gloo: no NCCL buffers
                        **({"pp_engine": "pytorch"} if pp else {}),  # torch.distributed.pipelining
                        **({"optimizer_in_backward": True} if case.early_step else {}),
                        "fsdp_reshard_after_forward": case.reshard,
                        "cuda_graphs": "on" if case.keep_grads else "off",
                        "allocator_slack_pct": 0}}
