"""Megatron-Core engine cases as data, and their ledger translation (pure: no torch imported).

A case is one small Llama-like (or, with experts, Mixtral-like) GPTModel built by Megatron-Core
from its local layer spec (`get_gpt_layer_local_spec(num_experts, normalization="RMSNorm")`,
megatron/core/models/gpt/gpt_layer_specs.py: no Transformer Engine) and the layout it runs with
on gloo CPU processes: tensor parallel degree, data parallel degree (Megatron's
DistributedOptimizer over it), expert parallel degree, recompute granularity. How memledger
spells the same run:

| Megatron-Core                                              | memledger                         |
|------------------------------------------------------------|-----------------------------------|
| bf16 params, fp32 main grads (DDP grad_reduce_in_fp32),    | precision="megatron"              |
|   fp32 main params + AdamW moments in the DistributedOptimizer |                               |
| DistributedOptimizer over dp                               | zero=1                            |
| num_distributed_optimizer_instances N (partial DistOpt)    | dp_replicate = N                  |
| TP; sequence parallel (the local spec's torch norm refuses it: a stand-in) | tp, sp           |
| PP with 1F1B, deallocate_pipeline_outputs (as Megatron-LM sets it) | pp, schedule="1f1b"  |
| recompute_granularity full, uniform, 1 layer               | recompute="full"                  |
| recompute_granularity selective, recompute_modules' default (core_attn) | recompute="selective" |
| no recompute                                               | recompute="none"                  |
| flash attention (TEDotProductAttention; here SDPA)         | profile="megatron"                |
| vocab not padded (the case's vocab is a multiple of 128·tp) | vocab_pad=1                      |
| hidden_dropout (attention_dropout 0)                       | hidden_dropout_pct                |
| gloo, no GPU                                               | nccl_channels=0, no CUDA context  |
| MoELayer: num_moe_experts, topk, moe_ffn_hidden_size       | a Mixtral config (E, K, fe)       |
| moe_shared_expert_intermediate_size, no gate               | n_shared=1, shared_ffn            |
| expert_model_parallel_size / expert_tensor_parallel_size   | ep / etp                          |
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.errors import SpecError

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("sdpa", "local")
NORMS = ("fused", "torch-cpu")
DISPATCHERS = ("alltoall", "allgather")


@dataclass(frozen=True, kw_only=True)
class MegatronCase:
    name: str
    hidden: int = 512
    layers: int = 4
    heads: int = 8
    kv_heads: int = 2
    ffn: int = 1408
    vocab: int = 4096
    seq: int = 1024
    micro_batch: int = 1
    tp: int = 1
    pp: int = 1  # Megatron's 1F1B (forward_backward_pipelining_without_interleaving)
    micro_batches: int = 1
    sp: bool = False  # the local spec's torch norm refuses it (torch_norm.py:32): a stand-in
    dp: int = 1
    recompute: str = "none"
    # sdpa: core attention replaced by scaled_dot_product_attention, standing in for TE's flash
    # attention (what the megatron profile models); local: Megatron's own DotProductAttention
    attention: str = "sdpa"
    # fused: torch.nn.RMSNorm keeps what the CUDA kernels keep (input + fp32 rstd: torch's
    # _fused_rms_norm on CUDA, TENorm, Apex FusedRMSNorm); torch-cpu: torch's CPU dispatch as it
    # is (a composite that keeps fp32 copies of the input and of the normalised input)
    norm: str = "fused"
    # MoE (0 experts: dense): every layer's MLP is Megatron's MoELayer (TopKRouter with the
    # switch aux loss, the token dispatcher, SequentialMLP experts: the local spec's)
    experts: int = 0
    top_k: int = 2
    moe_ffn: int = 704
    shared_ffn: int = 0  # moe_shared_expert_intermediate_size (0: none), no gate
    ep: int = 1
    etp: int = 1
    dispatcher: str = "alltoall"
    # hidden_dropout (0: none): the bias-dropout-add after attention and after the MLP and the
    # embedding dropout keep their masks; attention dropout stays 0 (flash runs it in-kernel)
    hidden_dropout: float = 0.0
    # DistributedDataParallelConfig / initialize_model_parallel num_distributed_optimizer_instances
    # (Megatron-LM --num-distributed-optimizer-instances): the optimizer shards over dp/N ranks
    # (experts: expert dp/N), N copies of that group, an all-reduce of the shard across them
    instances: int = 1

    def __post_init__(self):
        if self.recompute not in RECOMPUTE:
            raise SpecError("recompute", f"{self.recompute!r}; valid: {', '.join(RECOMPUTE)}")
        if self.attention not in ATTENTION:
            raise SpecError("attention", f"{self.attention!r}; valid: {', '.join(ATTENTION)}")
        if self.sp and (self.tp == 1 or self.norm != "fused"):
            raise SpecError("sp", "sequence parallel needs tp > 1 and norm='fused' (the norm "
                                  "stand-in; Megatron's torch norm refuses it)")
        if self.norm not in NORMS:
            raise SpecError("norm", f"{self.norm!r}; valid: {', '.join(NORMS)}")
        for name in ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "seq",
                     "micro_batch", "tp", "pp", "micro_batches", "dp", "instances"):
            if getattr(self, name) < 1:
                raise SpecError(name, f"must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.hidden_dropout < 1.0:
            raise SpecError("hidden_dropout", f"must be in [0, 1), got {self.hidden_dropout}")
        if self.dispatcher not in DISPATCHERS:
            raise SpecError("dispatcher", f"{self.dispatcher!r}; valid: {', '.join(DISPATCHERS)}")
        if self.experts:
            if not 1 <= self.top_k <= self.experts or self.experts % self.ep:
                raise SpecError("experts", f"{self.experts} experts need 1 <= top_k "
                                           f"({self.top_k}) <= experts and ep ({self.ep}) dividing it")
            if (self.tp * self.dp) % (self.ep * self.etp) or self.moe_ffn % self.etp:
                raise SpecError("ep", f"ep*etp = {self.ep}*{self.etp} must divide tp*dp = "
                                      f"{self.tp * self.dp} and etp the moe_ffn {self.moe_ffn}")
        elif self.ep != 1 or self.etp != 1:
            raise SpecError("ep", f"ep {self.ep} / etp {self.etp} need experts > 0")
        expert_dp = self.tp * self.dp // (self.ep * self.etp)
        if self.dp % self.instances or (self.experts and expert_dp % self.instances):
            raise SpecError("instances", f"{self.instances} distributed optimizer instances must "
                                         f"divide dp {self.dp} (and expert dp {expert_dp}): "
                                         "parallel_state.py:833-836, :1263-1265")
        if self.heads % self.kv_heads or self.kv_heads % self.tp:
            raise SpecError("kv_heads", f"heads {self.heads} / kv_heads {self.kv_heads} / tp "
                                        f"{self.tp} must divide: heads % kv_heads == kv_heads % tp == 0")
        if self.layers % self.pp:
            raise SpecError("pp", f"layers {self.layers} must be divisible by pp = {self.pp}")
        if self.ffn % self.tp or self.vocab % self.tp or self.seq % self.tp:
            raise SpecError("tp", f"ffn {self.ffn}, vocab {self.vocab} and seq {self.seq} must be "
                                  f"divisible by tp = {self.tp}")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def hf_config(self) -> dict:
        """The same model as a Llama (MoE: Mixtral) config.json (memledger.model.hf_config reads
        it); the shared expert, which Mixtral has not, is added by `shared_expert`."""
        moe = {"model_type": "mixtral", "num_local_experts": self.experts,
               "num_experts_per_tok": self.top_k} if self.experts else {}
        return {"model_type": "llama", "hidden_size": self.hidden,
                "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads, "intermediate_size": self.ffn,
                "vocab_size": self.vocab, "tie_word_embeddings": False,
                "max_position_embeddings": self.seq, "hidden_act": "silu",
                **moe, **({"intermediate_size": self.moe_ffn} if self.experts else {})}


CASES: tuple[MegatronCase, ...] = (
    MegatronCase(name="gpt-local tp1 dp1"),
    MegatronCase(name="gpt-local tp1 dp1 full recompute", recompute="full"),
    MegatronCase(name="gpt-local tp1 dp1 selective recompute", recompute="selective"),
    MegatronCase(name="gpt-local tp2 dp1", tp=2),
    MegatronCase(name="gpt-local tp2 sp dp1", tp=2, sp=True),
    MegatronCase(name="gpt-local tp1 dp2 distopt", dp=2),
    # partial DistOpt: 2 instances of the dp-2 distributed optimizer over dp 4
    MegatronCase(name="gpt-local tp1 dp4 distopt instances2", dp=4, instances=2),
    MegatronCase(name="gpt-local pp2 1f1b m4", pp=2, micro_batches=4),
    MegatronCase(name="gpt-local tp1 dp1 torch-cpu rmsnorm", norm="torch-cpu"),
    MegatronCase(name="gpt-local tp1 dp1 DotProductAttention", attention="local"),
    # Megatron-LM's default --hidden-dropout 0.1: bool masks after attention, MLP and embedding
    MegatronCase(name="gpt-local tp1 dp1 hidden dropout 0.1", hidden_dropout=0.1),
    MegatronCase(name="gpt-local tp2 sp dp1 hidden dropout 0.1", tp=2, sp=True,
                 hidden_dropout=0.1),
    # 8 experts, top-2, fe = 704, every layer MoE, the switch aux loss on; ep 2 over dp 2
    MegatronCase(name="gpt-local moe e8 top2 ep2 dp2 alltoall", experts=8, dp=2, ep=2),
    MegatronCase(name="gpt-local moe e8 top2 shared ep2 dp2 alltoall", experts=8, dp=2, ep=2,
                 shared_ffn=1024),
    # partial DistOpt with experts: dp 4 / 2 instances (dense intra group 2), expert dp 4/ep 2
    # = 2 / 2 instances (intra expert group 1: whole expert states): ep2 dp2's ranks again
    MegatronCase(name="gpt-local moe e8 top2 ep2 dp4 distopt instances2 alltoall", experts=8,
                 dp=4, ep=2, instances=2),
    MegatronCase(name="gpt-local moe e8 top2 ep2 dp2 allgather", experts=8, dp=2, ep=2,
                 dispatcher="allgather"),
    MegatronCase(name="gpt-local moe e8 top2 tp2 sp ep2 dp2 alltoall", experts=8, tp=2, sp=True,
                 dp=2, ep=2),
    MegatronCase(name="gpt-local moe e8 top2 tp2 sp ep2 etp2 dp2 alltoall", experts=8, tp=2,
                 sp=True, dp=2, ep=2, etp=2),
)
BY_NAME = {c.name: c for c in CASES}


def case_by_name(name: str) -> MegatronCase:
    if name not in BY_NAME:
        raise SpecError("case", f"unknown megatron-core case {name!r}; valid: " + "; ".join(BY_NAME))
    return BY_NAME[name]


def ledger_config(case: MegatronCase) -> dict:
    """The same run in memledger's specs, as plain keyword dicts."""
    return {"model": {"hf_config": case.hf_config()},
            "parallel": {"tp": case.tp, "pp": case.pp, "dp": case.dp, "zero": 1, "sp": case.sp,
                         "ep": case.ep, "etp": case.etp, "dp_replicate": case.instances},
            "train": {"seq": case.seq, "micro_batch": case.micro_batch, "micro_batches": case.micro_batches,
                      "precision": "megatron", "recompute": case.recompute,
                      "profile": "megatron-local", "vocab_pad": 1,
                      "hidden_dropout_pct": round(100 * case.hidden_dropout)},
            "runtime": {"loop": "megatron", "cuda_context_bytes": 0, "allocator_slack_pct": 0,
                        "nccl_channels": 0}}  # gloo: no NCCL buffers
