"""Engine cases as data, their ledger translation and the checks an engine run needs (pure).

A case is a Hugging Face config trained for one step on `world = tp · pp · dp` ranks with one
strategy per axis, the way PyTorch spells it:
  zero=3 / zero=2   FSDP2 `fully_shard` per decoder layer + root, reshard after forward on / off
                    (ledger: zero=3 / zero=2 with RuntimeSpec(zero3_impl="fsdp"), the harness loop:
                    persistent gradients, for-loop AdamW)
  zero=1            DDP + `ZeroRedundancyOptimizer` (ledger: zero=1 with
                    RuntimeSpec(zero1_partition="greedy-params"): whole tensors per dp rank)
  zero=0            DDP (dp > 1) or nothing
  tp (+sp)          DTensor `parallelize_module`, torchtitan's Llama plan (vocab-parallel
                    embedding and head, colwise q/k/v/gate/up, rowwise o/down, SP norms;
                    ledger: RuntimeSpec(tp_engine="dtensor"), the embedding's gradient full size)
  pp                `torch.distributed.pipelining` stages of whole decoder layers with the
                    schedule named (gpipe, 1f1b, interleaved with vpp chunks)
  recompute="full"  every decoder layer wrapped in torch's `checkpoint_wrapper` (torchtitan's
                    full activation checkpointing; ledger: TrainSpec(recompute="full"))
All runs are bf16 weights/grads/AdamW states (recipe `bf16`), sdpa attention, persistent
gradients (zero_grad(set_to_none=False)), and the ledger is asked with the `hf-cpu` profile
(activations traced from transformers on the CPU), no CUDA context, slack or NCCL buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from memledger.errors import SpecError
from memledger.ledger import build_ledger
from memledger.model.hf_config import from_hf_config
from memledger.specs import ParallelSpec, TrainSpec
from memledger.specs.runtime import RuntimeSpec

SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "full")


def tiny_llama(hidden=128, layers=4, heads=4, kv=2, ffn=352, vocab=512) -> dict:
    return {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": ffn,
            "vocab_size": vocab, "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
            "max_position_embeddings": 4096, "hidden_act": "silu"}


@dataclass(frozen=True, kw_only=True)
class EngineCase:
    name: str
    config: dict = field(hash=False, compare=False)
    tp: int = 1
    ep: int = 1  # experts over the dp ranks with the harness's all-to-all dispatcher (engine.ep)
    pp: int = 1
    vpp: int = 1
    dp: int = 1
    sp: bool = False
    zero: int = 0
    schedule: str = "gpipe"
    seq: int = 64
    micro_batch: int = 1
    micro_batches: int = 1
    recompute: str = "none"  # "full": every decoder layer checkpointed

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise SpecError("schedule", f"the engine runs {', '.join(SCHEDULES)}; got {self.schedule!r}")
        if self.recompute not in RECOMPUTE:
            raise SpecError("recompute", f"the engine runs {', '.join(RECOMPUTE)}; got {self.recompute!r}")
        if self.zero not in (0, 1, 2, 3):
            raise SpecError("zero", f"must be 0..3, got {self.zero}")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def strategy(self) -> str:
        dp = {3: "fsdp2 reshard", 2: "fsdp2 no-reshard", 1: "ddp+zero-redundancy-opt",
              0: "ddp" if self.dp > 1 else ""}[self.zero]
        parts = [dp] if dp else []
        if self.tp > 1:
            parts.append("dtensor tp" + ("+sp" if self.sp else ""))
        if self.ep > 1:
            parts.append(f"ep={self.ep} all-to-all (harness)")
        if self.pp > 1:
            parts.append(f"pipelining {self.schedule}" + (f" v={self.vpp}" if self.vpp > 1 else ""))
        if self.recompute == "full":
            parts.append("checkpoint_wrapper per layer")
        return " × ".join(parts) or "single rank"

    def parallel(self) -> ParallelSpec:
        # FSDP2 without reshard (FSDP's SHARD_GRAD_OP, "ZeRO-2") keeps parameters sharded at
        # rest and every unit gathered from its forward to its backward: the ledger's ZeRO-3
        # with all units prefetched (see runtime()), not its replicated-weights ZeRO-2
        zero = 3 if self.zero == 2 else self.zero
        return ParallelSpec(tp=self.tp, pp=self.pp, vpp=self.vpp, dp=self.dp, sp=self.sp,
                            zero=zero, schedule=self.schedule, ep=self.ep)

    def train(self) -> TrainSpec:
        return TrainSpec(micro_batch=self.micro_batch, seq=self.seq, micro_batches=self.micro_batches,
                         precision="bf16", optimizer="adamw", profile="hf-cpu", attention="flash",
                         recompute=self.recompute)

    def runtime(self) -> RuntimeSpec:
        n_layers = self.config["num_hidden_layers"]
        units = -(-n_layers // (self.pp * self.vpp)) * self.vpp  # decoder layers per rank
        return RuntimeSpec(zero3_prefetch_layers=units - 1 if self.zero == 2 else 1,
                           cuda_context_bytes=0, allocator_slack_pct=0, nccl_channels=0,
                           zero3_impl="fsdp", optimizer_impl="for-loop",
                           grad_lifetime="persistent",  # the loop the harness runs (worker.py)
                           tp_engine="dtensor", zero1_partition="greedy-params",  # its engines
                           fsdp_expert_shard="dim1-if-fewer",  # parallelize._experts_on_dim1
                           pp_engine="pytorch")  # torch.distributed.pipelining's buffers


def model_spec(case: EngineCase):
    return from_hf_config(case.config, name=case.name)


def predict(case: EngineCase):
    """The ledger for a case, every pipeline rank (raises SpecError like the CLI)."""
    return build_ledger(model_spec(case), case.parallel(), case.train(), case.runtime())


def check_runnable(case: EngineCase) -> None:
    """What the engine itself cannot run, as one SpecError naming the reason (before any process
    starts): the ledger's own checks, plus the engine's: whole layers per pipeline stage."""
    m = model_spec(case)
    layers = m.n_layers
    stages = case.pp * case.vpp
    if layers < stages:
        raise SpecError("pp", f"the model has {layers} layers, fewer than pp·vpp = {stages} "
                              "pipeline stages: every stage needs at least one decoder layer")
    if case.config.get("num_attention_heads", 1) % case.tp:
        raise SpecError("tp", f"tp={case.tp} must divide num_attention_heads="
                              f"{case.config['num_attention_heads']}")
    if case.ep > 1 and (case.ep != case.dp or case.tp > 1 or case.pp > 1 or case.zero in (1, 2)):
        raise SpecError("ep", f"the harness lays experts over the dp ranks: ep must equal dp "
                              f"(got ep={case.ep}, dp={case.dp}) with tp = pp = 1 and zero 0 or 3")
    if case.schedule != "gpipe" and case.pp == 1:
        raise SpecError("schedule", f"schedule={case.schedule} needs pp > 1")
    if case.schedule == "interleaved" and case.micro_batches % case.pp:
        raise SpecError("micro_batches", f"interleaved 1F1B in torch.distributed.pipelining needs "
                                         f"micro_batches ({case.micro_batches}) to be a multiple "
                                         f"of pp={case.pp}")
    predict(case)  # the ledger's own checks (tp | kv heads, layers per stage, seq vs sp, ...)


LLAMA = tiny_llama()
MIXTRAL = {"model_type": "mixtral", "hidden_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256,
           "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 512,
           "max_position_embeddings": 4096, "hidden_act": "silu", "router_jitter_noise": 0.0,
           "tie_word_embeddings": False}
CPU_CASES: tuple[EngineCase, ...] = (
    EngineCase(name="fsdp2 zero-3 dp=2", config=LLAMA, dp=2, zero=3),
    EngineCase(name="fsdp2 zero-2 dp=2 m=2", config=LLAMA, dp=2, zero=2, micro_batches=2),
    EngineCase(name="ddp+zero-1 dp=2", config=LLAMA, dp=2, zero=1, micro_batches=2),
    EngineCase(name="tp=2 sp", config=LLAMA, tp=2, sp=True, micro_batches=2),
    EngineCase(name="pp=2 gpipe m=4", config=LLAMA, pp=2, schedule="gpipe", micro_batches=4),
    EngineCase(name="pp=4 1f1b m=6", config=LLAMA, pp=4, schedule="1f1b", micro_batches=6),
    EngineCase(name="pp=2 interleaved v=2 m=4", config=LLAMA, pp=2, vpp=2, schedule="interleaved",
               micro_batches=4),
    EngineCase(name="dp=2 × tp=2 sp fsdp2 zero-3", config=LLAMA, dp=2, tp=2, sp=True, zero=3,
               micro_batches=2),
    EngineCase(name="pp=2 1f1b × dp=2 zero-1", config=LLAMA, pp=2, dp=2, zero=1,
               schedule="1f1b", micro_batches=4),
    EngineCase(name="mixtral-tiny ep=2 all-to-all", config=MIXTRAL, dp=2, ep=2, micro_batches=2),
    EngineCase(name="mixtral-tiny ep=2 × fsdp2 zero-3", config=MIXTRAL, dp=2, ep=2, zero=3,
               micro_batches=2),
    EngineCase(name="ddp+zero-1 dp=2 full recompute", config=LLAMA, dp=2, zero=1,
               micro_batches=2, recompute="full"),
    EngineCase(name="tp=2 sp full recompute", config=LLAMA, tp=2, sp=True, micro_batches=2,
               recompute="full"),
    EngineCase(name="pp=2 1f1b m=4 full recompute", config=LLAMA, pp=2, schedule="1f1b",
               micro_batches=4, recompute="full"),
)


KEYS = {"tp": "tp", "ep": "ep", "pp": "pp", "vpp": "vpp", "dp": "dp", "zero": "zero", "sp": "sp",
        "schedule": "schedule", "m": "micro_batches", "b": "micro_batch", "seq": "seq",
        "recompute": "recompute"}


def case_from_text(text: str, config: dict | None = None, name: str | None = None) -> EngineCase:
    """An ad-hoc case from "tp=2,pp=2,m=4,schedule=1f1b,..." on the tiny Llama (or `config`)."""
    kw: dict = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in KEYS:
            raise SpecError("engine-config", f"{part!r}: expected key=value with key one of "
                                             f"{', '.join(KEYS)}")
        if key in ("schedule", "recompute"):
            kw[key] = value
        elif key == "sp":
            kw["sp"] = value.lower() in ("1", "true", "yes", "on")
        else:
            try:
                kw[KEYS[key]] = int(value)
            except ValueError:
                raise SpecError(key, f"must be an integer, got {value!r}") from None
    return EngineCase(name=name or f"custom {text}", config=config or LLAMA, **kw)


def case_to_dict(case: EngineCase) -> dict:
    return {f: getattr(case, f) for f in ("name", "config", "tp", "ep", "pp", "vpp", "dp", "sp",
                                          "zero", "schedule", "seq", "micro_batch",
                                          "micro_batches", "recompute")}


def case_from_dict(d: dict) -> EngineCase:
    return EngineCase(**d)


def cases_named(names: list[str] | None, pool=CPU_CASES) -> tuple[EngineCase, ...]:
    from memledger.validation.cases import pick_named
    return pick_named(names, pool, "engine case")


def llama3(size: str, layers: int) -> dict:
    """Llama-3 8B / 70B dimensions (meta-llama config.json), with fewer layers."""
    dims = {"8b": (4096, 32, 8, 14336), "70b": (8192, 64, 8, 28672)}[size]
    h, a, g, f = dims
    return {**tiny_llama(h, layers, a, g, f, 128256), "rope_theta": 500000.0}


def mixtral_8x7b(layers: int) -> dict:
    return {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": layers,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
            "max_position_embeddings": 4096, "hidden_act": "silu", "router_jitter_noise": 0.0,
            "tie_word_embeddings": False}


def qwen3_30b_a3b(layers: int) -> dict:
    return {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": layers,
            "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
            "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
            "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "norm_topk_prob": True, "vocab_size": 151936, "max_position_embeddings": 4096,
            "hidden_act": "silu", "tie_word_embeddings": False}


# Real shapes, few layers, at the world sizes people run (FakeTensorMode + fake process group).
FAKE_CASES: tuple[EngineCase, ...] = (
    EngineCase(name="llama3-8b 4L fsdp2 zero-3 world=64", config=llama3("8b", 4), dp=64, zero=3,
               seq=4096),
    EngineCase(name="llama3-8b 4L fsdp2 zero-3 world=256", config=llama3("8b", 4), dp=256, zero=3,
               seq=4096),
    EngineCase(name="llama3-70b 2L tp=8 sp × fsdp2 zero-3 world=512", config=llama3("70b", 2),
               dp=64, tp=8, sp=True, zero=3, seq=8192),
    EngineCase(name="llama3-70b 2L tp=8 sp × fsdp2 zero-3 world=1024", config=llama3("70b", 2),
               dp=128, tp=8, sp=True, zero=3, seq=8192),
    EngineCase(name="mixtral-8x7b 2L fsdp2 zero-3 world=128", config=mixtral_8x7b(2), dp=128,
               zero=3, seq=4096),
    EngineCase(name="qwen3-30b-a3b 2L fsdp2 zero-3 world=128", config=qwen3_30b_a3b(2), dp=128,
               zero=3, seq=4096),
)
