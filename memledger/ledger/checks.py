"""Checks that need more than one spec: every message names the field, the value and what would
be valid. Shared by the ledger, the CLI, the app and the planner (never re-implemented)."""
from __future__ import annotations

from memledger.divisors import divisor_text
from memledger.errors import SpecError
from memledger.ledger.pipeline.engines import resolve_engine
from memledger.ledger.pipeline.schedules import stage_layers
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec


def _divisors(n: int) -> str:
    return divisor_text(n)  # O(sqrt n), truncated: n comes from a user's config


def _must_divide(field: str, value: int, what: str, n: int) -> None:
    if n % value:
        raise SpecError(field, f"{field}={value} must divide {what}={n}; valid: {_divisors(n)}")


def check_model_parallel(m: ModelSpec, p: ParallelSpec) -> None:
    _must_divide("tp", p.tp, "n_heads", m.n_heads)
    if m.mla is None:
        _must_divide("tp", p.tp, "n_kv_heads", m.n_kv_heads)
    if m.n_dense_layers:
        _must_divide("tp", p.tp, "ffn_hidden", m.ffn_hidden)
    if m.moe is None:
        if p.ep > 1 or p.etp > 1:
            raise SpecError("ep", f"ep={p.ep}, etp={p.etp}: the model has no experts; use 1")
    else:
        _must_divide("ep", p.ep, "n_experts", m.moe.n_experts)
        _must_divide("etp", p.etp, "expert_ffn", m.moe.expert_ffn)
        if m.moe.n_shared:
            _must_divide("tp", p.tp, "shared expert ffn", m.moe.n_shared * m.moe.shared_ffn_size)
        if p.tp > 1 and not p.sp:
            raise SpecError("sp", f"MoE with tp={p.tp} needs sequence parallel (sp=True), as in "
                                  "Megatron-Core")
    stage_layers(m, p)  # raises on a layer count the stages cannot split


def check_train(m: ModelSpec, p: ParallelSpec, t: TrainSpec) -> None:
    if p.cp > 1 and t.seq % (2 * p.cp):
        raise SpecError("seq", f"seq={t.seq} must be a multiple of 2·cp={2 * p.cp} (context "
                               "parallel splits each sequence into 2·cp chunks)")
    if p.sp and p.tp > 1 and (t.seq // p.cp) % p.tp:
        raise SpecError("seq", f"seq/cp={t.seq // p.cp} must be a multiple of tp={p.tp} under "
                               "sequence parallel")
    if t.recompute in ("every-k", "interval") and t.recompute_every > m.n_layers:
        raise SpecError("recompute_every", f"recompute_every={t.recompute_every} exceeds "
                                           f"n_layers={m.n_layers}")


def check_schedule(p: ParallelSpec, t: TrainSpec, engine: str = "auto") -> None:
    """A micro-batch count some engine runs for the schedule (docs/schedules.md)."""
    if p.pp > 1:
        resolve_engine(p.schedule, engine, p.pp, t.micro_batches)


def check_all(m: ModelSpec, p: ParallelSpec, t: TrainSpec) -> None:
    check_model_parallel(m, p)
    check_train(m, p, t)
    check_schedule(p, t)
    if t.finetune.mode != "full":
        from memledger.ledger.static.finetune import check_finetune
        check_finetune(m, t.finetune)


def check_offload(p: ParallelSpec, rt) -> None:
    if rt.param_offload and p.zero != 3:
        raise SpecError("param_offload", f"parameter offload moves ZeRO-3 / FSDP shards to the "
                                         f"host; needs zero=3, got zero={p.zero}")


def check_runtime(p: ParallelSpec, t: TrainSpec, rt) -> None:
    """What torchtitan's Trainer.Config refuses: the memory budget is the compiler's."""
    if t.recompute == "memory-budget" and not rt.torch_compile:
        raise SpecError("torch_compile", "recompute=memory-budget is torch.compile's partitioner "
                                         "(torchtitan MemoryBudgetAC requires compile); set "
                                         "torch_compile=True (--torch-compile)")
    check_offload(p, rt)
    if p.pp > 1 and rt.pipeline_engine != rt.pp_engine:  # auto made concrete by the loop
        try:
            resolve_engine(p.schedule, rt.pipeline_engine, p.pp, t.micro_batches)
        except SpecError as e:
            raise SpecError(e.field, f"{e.message} (--loop {rt.loop} pipelines with "
                                     "torch.distributed.pipelining; --pp-engine models another "
                                     "engine's order)") from None
