"""ParallelSpec: how the model is cut across GPUs, and the checks that need only these numbers.

world = tp · pp · cp · dp. ZeRO / FSDP shard over dp·cp / dp_replicate ranks: dp_replicate > 1
is HSDP (torchtitan `data_parallel_replicate_degree`, accelerate `dp_replicate_size`, FSDP1
HYBRID_SHARD) or Megatron's `--num-distributed-optimizer-instances`: the shard group is copied
dp_replicate times and each copy holds the same shards. Experts are laid over the same
non-pipeline ranks as ep · etp groups (Megatron-Core "MoE parallel folding"), so ep · etp must
divide one shard group's tp · cp · dp / dp_replicate, and experts shard over
world / (pp · ep · etp · dp_replicate). Checks that also need the model (tp dividing the
heads, ep dividing the experts, ...) live in `memledger.ledger.checks`.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from memledger.errors import SpecError, require, require_choice, require_positive
from memledger.specs.bounds import BOUNDS, check_bound, check_bounds
from memledger.specs.hashing import cache_hash

SCHEDULES: dict[str, str] = {
    "gpipe": "GPipe: all m micro-batches forward, then all backward",
    "1f1b": "1F1B (PipeDream-flush): rank r holds min(p - r, m) micro-batches",
    "interleaved": "Interleaved 1F1B with vpp model chunks per rank (Megatron)",
    "zb-h1": "Zero-bubble H1 (Qi et al. 2023): p micro-batches per rank under PyTorch's I/W split",
    "zb-v": "Zero-bubble V (Qi et al. 2024): two chunks per rank in a V, 2p stage-micro-batches",
    "dualpipe": "DualPipe (DeepSeek-V3): two stages per rank (2x parameters), p+1 micro-batches",
    "dualpipev": "DualPipeV (cut-in-half DualPipe): two chunks per rank in a V, 2p+1 "
                 "stage-micro-batches",
}
V_SHAPED = frozenset({"zb-v", "dualpipev"})
ZERO_STAGES = (0, 1, 2, 3)


@cache_hash
@dataclass(frozen=True, kw_only=True)
class ParallelSpec:
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    ep: int = 1
    etp: int = 1
    cp: int = 1
    dp: int = 1
    dp_replicate: int = 1  # copies of the ZeRO / FSDP shard group (HSDP); divides dp
    sp: bool = False
    zero: int = 0
    schedule: str = "1f1b"
    layout: tuple[int, ...] | None = None  # layers per virtual stage, in virtual-stage order

    def __post_init__(self):
        for f in ("tp", "pp", "vpp", "ep", "etp", "cp", "dp", "dp_replicate"):
            require_positive(f, getattr(self, f))
        check_bounds(self, ("tp", "pp", "vpp", "ep", "etp", "cp", "dp", "dp_replicate"))
        check_bound("world", self.world)
        if self.zero not in ZERO_STAGES:
            raise SpecError("zero", f"ZeRO stage must be one of 0, 1, 2, 3, got {self.zero!r}")
        require_choice("schedule", self.schedule, SCHEDULES)
        if self.schedule == "interleaved":
            require(self.vpp >= 2, "vpp", f"schedule=interleaved needs vpp >= 2, got vpp={self.vpp}")
            require(self.pp >= 2, "pp", f"schedule=interleaved (vpp={self.vpp}) needs pp >= 2, "
                                        f"got pp={self.pp}")
        elif self.vpp != 1:
            raise SpecError("vpp", f"vpp={self.vpp} needs schedule=interleaved (got {self.schedule})")
        require(self.dp % self.dp_replicate == 0, "dp_replicate",
                f"dp_replicate={self.dp_replicate} must divide dp={self.dp} (HSDP: dp = "
                f"dp_replicate x the shard group)")
        dense_ranks = self.tp * self.cp * self.dp // self.dp_replicate
        over = (f"tp*cp*dp = {self.tp}*{self.cp}*{self.dp}" if self.dp_replicate == 1 else
                f"tp*cp*dp/dp_replicate = {self.tp}*{self.cp}*{self.dp}/{self.dp_replicate}")
        require(dense_ranks % (self.ep * self.etp) == 0, "ep",
                f"ep*etp = {self.ep}*{self.etp} = {self.ep * self.etp} must divide "
                f"{over} = {dense_ranks}")
        if self.schedule == "dualpipe":
            require(self.pp % 2 == 0, "pp", f"schedule=dualpipe needs an even pp, got pp={self.pp}")
        if self.layout is not None:
            want = self.n_stages
            require(len(self.layout) == want, "layout",
                    f"needs one entry per pipeline stage ({want} for pp={self.pp}, "
                    f"schedule={self.schedule}, vpp={self.vpp}), got {len(self.layout)}")
            require(all(isinstance(n, int) and 0 <= n <= BOUNDS["n_layers"].limit
                        for n in self.layout), "layout",
                    f"entries must be integers 0..{BOUNDS['n_layers'].limit}, got "
                    f"{_shown(self.layout)}")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def chunks(self) -> int:
        """Model chunks held by one pipeline rank."""
        if self.schedule in V_SHAPED or self.schedule == "dualpipe":
            return 2
        return self.vpp

    @property
    def n_stages(self) -> int:
        """Pipeline stages the layers are cut into (DualPipe mirrors p stages on p ranks)."""
        return self.pp if self.schedule == "dualpipe" else self.pp * self.chunks

    def rank_stages(self, r: int) -> tuple[int, ...]:
        """Stages held by pipeline rank r, in the order its chunks are numbered."""
        p = self.pp
        if self.schedule in V_SHAPED:
            return (r, 2 * p - 1 - r)
        if self.schedule == "dualpipe":
            return (r, p - 1 - r)
        return tuple(c * p + r for c in range(self.vpp))

    @property
    def dense_dp(self) -> int:
        """Group over which dense parameters' optimizer state is sharded (Megatron: dp·cp;
        under HSDP one of the dp_replicate copies: torchtitan's `fsdp` mesh = dp_shard·cp)."""
        return self.dp * self.cp // self.dp_replicate

    @property
    def expert_dp(self) -> int:
        """Group over which expert parameters are sharded: world / (pp · ep · etp), over
        dp_replicate under HSDP (torchtitan's `efsdp` = dp_shard·cp·tp / ep)."""
        return self.world // (self.pp * self.ep * self.etp * self.dp_replicate)

    @property
    def seq_split(self) -> int:
        """How many ways a micro-batch's tokens are split on one rank outside attention."""
        return self.cp * (self.tp if self.sp else 1)

    @classmethod
    def from_world(cls, world: int, **kw) -> "ParallelSpec":
        """Derive dp from a world size; the message says which product must divide it."""
        require_positive("world", world)
        check_bound("world", world)
        for f in ("tp", "pp", "cp"):  # positive before dividing by them
            require_positive(f, kw.get(f, 1))
        per_replica = kw.get("tp", 1) * kw.get("pp", 1) * kw.get("cp", 1)
        require(world % per_replica == 0, "world",
                f"world={world} is not divisible by tp*pp*cp={per_replica}")
        return cls(dp=world // per_replica, **kw)


def replicas_kept(dp: int, dp_replicate: int) -> int:
    """HSDP copies a changed dp keeps: the most of them that still divide it."""
    return gcd(dp, dp_replicate)


def _shown(values: tuple, n: int = 8) -> str:
    """A long tuple in a message: its first n entries and the count."""
    head = ", ".join(map(str, values[:n]))
    return f"({head})" if len(values) <= n else f"({head}, ... {len(values)} in all)"
