"""PlanSpec: the question the planner answers — which layouts of this model fit these GPUs.

A frozen, validated request: model, GPU preset, GPUs per node, one or more world sizes, sequence
length, global batch in sequences, precision / optimizer / activation profile, the runtime knobs
of the ledger, a headroom fraction kept free on every GPU, and `Constraints` (fixed values for
any axis, upper bounds for the open ones). Every choice the search makes is a field here, so a
plan can be reproduced from its spec alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from memledger.costs.compute import DEFAULT_MFU_PCT
from memledger.costs.overlap import framework
from memledger.errors import SpecError, require, require_choice, require_positive
from memledger.specs.finetune import FinetuneSpec
from memledger.specs.bounds import check_bound, check_length
from memledger.specs.hardware import Hardware
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ZERO_STAGES
from memledger.specs.runtime import RuntimeSpec
from memledger.specs.train import TrainSpec

PLAN_SCHEDULES = ("1f1b", "interleaved", "dualpipe")  # dualpipe is searched for MoE models only
PLAN_RECOMPUTE = ("none", "selective", "full")
AXES = ("tp", "pp", "vpp", "ep", "etp", "cp", "dp")


@dataclass(frozen=True, kw_only=True)
class Constraints:
    """Fixed values (None = search it) and upper bounds for the searched axes.

    max_tp / max_etp default to the GPUs per node: a tensor-parallel group (dense or expert)
    that spans nodes puts per-layer all-reduces on the network, which no practical layout does.
    max_cp, max_vpp and max_micro_batch are unbounded unless given.
    """

    tp: int | None = None
    pp: int | None = None
    vpp: int | None = None
    ep: int | None = None
    etp: int | None = None
    cp: int | None = None
    dp: int | None = None
    zero: int | None = None
    micro_batch: int | None = None
    recompute: str | None = None
    schedule: str | None = None
    max_tp: int | None = None
    max_etp: int | None = None
    max_cp: int | None = None
    max_vpp: int | None = None
    max_micro_batch: int | None = None

    def __post_init__(self):
        for f in AXES + ("micro_batch", "max_tp", "max_etp", "max_cp", "max_vpp", "max_micro_batch"):
            if getattr(self, f) is not None:
                require_positive(f, getattr(self, f))
                bound = {"max_vpp": "vpp", "micro_batch": "micro_batch",
                         "max_micro_batch": "micro_batch"}.get(f, "world")
                check_bound(bound, getattr(self, f), f)
        if self.zero is not None and self.zero not in ZERO_STAGES:
            raise SpecError("zero", f"ZeRO stage must be one of 0, 1, 2, 3, got {self.zero!r}")
        if self.recompute is not None:
            require_choice("recompute", self.recompute, PLAN_RECOMPUTE)
        if self.schedule is not None:
            require_choice("schedule", self.schedule, PLAN_SCHEDULES)

    def allows(self, axis: str, value) -> bool:
        fixed = getattr(self, axis)
        return fixed is None or fixed == value


@dataclass(frozen=True, kw_only=True)
class PlanSpec:
    model: ModelSpec
    hardware: Hardware
    worlds: tuple[int, ...]
    seq: int
    global_batch: int  # sequences per optimizer step, over all data-parallel replicas
    gpus_per_node: int | None = None  # None: the hardware preset's
    precision: str = "megatron"
    optimizer: str = "adamw"
    profile: str = "megatron"
    attention: str = "flash"
    headroom: float = 0.0  # fraction of HBM kept free
    mfu_pct: int = DEFAULT_MFU_PCT  # the offload verdicts' MFU; step times use costs.stepmodel
    framework: str = "megatron-core"  # what overlaps (memledger.costs.overlap)
    runtime: RuntimeSpec = field(default_factory=RuntimeSpec)
    constraints: Constraints = field(default_factory=Constraints)
    finetune: FinetuneSpec = field(default_factory=FinetuneSpec)  # specs/finetune.py

    def __post_init__(self):
        require(isinstance(self.worlds, tuple) and len(self.worlds) > 0, "world",
                f"needs at least one world size, got {self.worlds!r}")
        check_length("worlds", len(self.worlds), "world")
        require(len(set(self.worlds)) == len(self.worlds), "world",
                f"world sizes repeat: {self.worlds!r}")
        for w in self.worlds:
            require_positive("world", w)
            check_bound("world", w)
        require_positive("seq", self.seq)
        require_positive("global_batch", self.global_batch)
        check_bound("seq", self.seq)
        check_bound("global_batch", self.global_batch)
        if self.gpus_per_node is not None:
            require_positive("gpus_per_node", self.gpus_per_node)
            check_bound("gpus_per_node", self.gpus_per_node)
        require(isinstance(self.headroom, (int, float)) and 0 <= self.headroom < 1, "headroom",
                f"must be a fraction in [0, 1), got {self.headroom!r}")
        require(isinstance(self.mfu_pct, int) and 0 < self.mfu_pct <= 100, "mfu_pct",
                f"must be an integer percentage 1..100, got {self.mfu_pct!r}")
        # the vectorised sweep shards as Megatron does; per-tensor partitions are not vectorised
        for knob, default in (("tp_engine", "megatron"), ("zero1_partition", "even"),
                              ("fsdp_reshard_after_forward", "default"), ("torch_compile", False),
                              ("fsdp_expert_shard", "auto"), ("compile_loss", "auto"),
                              ("float8", "off"), ("float8_fsdp_all_gather", False),
                              ("optimizer_in_backward", False)):
            value = getattr(self.runtime, knob)
            require(value == default, knob, f"the planner sweeps {knob}={default} only, got "
                                            f"{value!r}; check a layout with `memledger ledger`")
        # torch.distributed.pipelining's own buffers (ledger.torch_pipelining) need every
        # rank's stages and in-flight counts per stage, which the vectorised sweep does not keep
        require(self.runtime.pipeline_engine != "pytorch", "pp_engine",
                "the planner sweeps Megatron's pipeline buffers (pp_engine auto, megatron or "
                "deepseek), got 'pytorch'" + (" (auto under --loop torchtitan: it pipelines "
                "with torch.distributed.pipelining; --pp-engine megatron sweeps Megatron's "
                "order)" if self.runtime.pp_engine == "auto" else "")
                + "; check a layout with `memledger ledger`")
        # torchtitan's FSDP2 layout (ledger.fsdp2: PP-held unsharded copies, torchtitan's units)
        # is not vectorised
        require(not self.precision.startswith("fsdp2"), "precision",
                f"the planner does not sweep {self.precision} (torchtitan's FSDP2 lifetimes); "
                f"check a layout with `memledger ledger --loop torchtitan --precision "
                f"{self.precision}`")
        self._check_framework()
        self.base_train()  # validates precision, optimizer, profile, attention
        from memledger.ledger.activations.finetune import graphless_layers
        require(graphless_layers(self.model, self.base_train()) == 0, "freeze",
                "leading frozen layers keep no activations, which the planner's per-kind "
                "tables do not express; check this fine-tuning with `memledger ledger`")
        for knob in ("optimizer_offload", "grad_offload", "param_offload"):
            require(not getattr(self.runtime, knob), knob,
                    "the planner does not model ZeRO-Offload or parameter offload; check such "
                    "a layout with `memledger ledger`")

    def _check_framework(self) -> None:
        """A fixed value the framework cannot run is refused here, with what it can run."""
        fw, c = framework(self.framework), self.constraints
        for axis, can in (("schedule", fw.schedules), ("zero", fw.zero_stages),
                          ("recompute", fw.recompute),
                          ("cp", None if fw.context_parallel else (1,))):
            value = getattr(c, axis)
            require(value is None or can is None or value in can, axis,
                    f"{fw.name} does not run {axis}={value!r}; it runs "
                    f"{', '.join(map(str, can or ()))}")

    @property
    def fw(self):
        """The framework's overlap and what it can run (`costs.overlap.Framework`)."""
        return framework(self.framework)

    @property
    def node_size(self) -> int:
        return self.gpus_per_node or self.hardware.gpus_per_node

    @property
    def capacity_bytes(self) -> int:
        return self.hardware.hbm_bytes

    @property
    def limit_bytes(self) -> int:
        """Largest peak that fits: capacity × (1 − headroom), rounded down to a byte."""
        return int(self.hardware.hbm_bytes * (1 - self.headroom))

    def sequence_parallel(self, tp: int) -> bool:
        """Whether the ledger's rows at this tp run sequence parallelism: with tp > 1, where the
        framework has it (Korthikanti et al. 2022, arXiv 2205.05198; Megatron-LM in 2021 did not,
        `costs.overlap.FRAMEWORKS`). The one place the planner's memory side decides it."""
        return tp > 1 and self.fw.sp

    @property
    def max_tp(self) -> int:
        return self.constraints.max_tp or self.node_size

    @property
    def max_etp(self) -> int:
        return self.constraints.max_etp or self.node_size

    def base_train(self, micro_batch: int = 1, micro_batches: int = 1,
                   recompute: str = "none") -> TrainSpec:
        return TrainSpec(micro_batch=micro_batch, seq=self.seq, micro_batches=micro_batches,
                         precision=self.precision, optimizer=self.optimizer, profile=self.profile,
                         attention=self.attention, recompute=recompute, finetune=self.finetune)
