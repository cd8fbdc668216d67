"""Apply an activation storage policy to one tensor: what stays on the GPU and what it costs.

For every saved tensor the ledger records a `TensorMove`: its bytes as the profile stores it, as
stored under the policy, on the GPU at the activation peak, and the price in each currency
(seed 1, "搬走一行，付一种货币"):
  recompute  FLOPs to re-create one copy = rows × ActTensor.flops ÷ the tensor's parallel split
  quantise   bytes = rows × format_bytes(fmt, values per row): block scales never straddle
             rows (DeepSeek-V3 §3.3: 1×128 tiles along the hidden dimension); the price is the
             mantissa bits lost, units.NumberFormat.mantissa_bits(native) − (quantised)
             (for int formats: magnitude bits relative to the block's absmax)
  offload    the stored bytes leave the GPU in forward and come back in backward: bytes per
             micro-batch = stored × copies made per micro-batch; bandwidth in memledger.costs.bandwidth
Which policy a tensor gets: an explicit rule for its class wins; otherwise, inside transformer
layers, recompute="selective" recomputes the profile's selective classes (Megatron semantics:
layers only); otherwise keep. Integer/mask tensors are never quantised. A tensor with no
producer to re-run (flops = 0: the layer input, token ids, routed-token copies) is kept when its
class says recompute, and the move says so.
Ignores: recompute dependencies between classes (a recomputed tensor's inputs are assumed
available, as a kept tensor or a recomputed one), and the gradient buffers of offloaded tensors.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from memledger.ledger.activations import get_profile
from memledger.ledger.activations.inventory import (ActTensor, divisor, routed_rows, tensor_bytes,
                                                    tokens_on_rank)
from memledger.ledger.activations.torchtitan_ac import COMPILE_RECOMPUTES
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.policy import KEEP, TensorPolicy
from memledger.specs.train import TrainSpec
from memledger.units import ceil_div, fmt

NON_FLOAT = frozenset({"int64", "int32", "bool", "uint8"})


class TensorMove(NamedTuple):
    """One tensor's storage decision on one rank; bytes are per copy unless named otherwise.
    Immutable; a NamedTuple because every rank of every ledger builds dozens of them."""

    section: str  # "dense layers", "moe layers", "first stage", "last stage"
    tensor: str
    cls: str
    policy: str  # the policy actually applied
    copies: int  # copies held at the activation peak (layer-micro-batches or micro-batches)
    per_micro_batch: int  # copies one micro-batch creates on this rank
    native_bytes: int  # one copy as the profile stores it (0 for an added checkpoint)
    stored_bytes: int  # one copy after quantisation: what is kept or moved
    gpu_bytes: int  # one copy on this GPU at the peak (offload-pp: before the levelling)
    recompute_flops: int = 0  # paid: FLOPs to re-create one copy in backward (0 unless recomputed)
    producer_flops: int = 0  # what recomputing one copy would cost (the alternative's price)
    bits_lost: int = 0
    offload: str | None = None  # "cpu" | "pp"
    formula: str = ""

    @property
    def gpu_total(self) -> int:
        return self.gpu_bytes * self.copies

    @property
    def saved_bytes(self) -> int:
        """GPU bytes this decision saves at the peak against keeping the tensor as is."""
        return (self.native_bytes - self.gpu_bytes) * self.copies

    @property
    def host_bytes(self) -> int:
        """Bytes in host memory at the peak (offload-cpu)."""
        return self.stored_bytes * self.copies if self.offload == "cpu" else 0

    @property
    def host_bytes_per_micro_batch(self) -> int:
        """Bytes each micro-batch sends to the host in forward (and fetches back in backward)."""
        return self.stored_bytes * self.per_micro_batch if self.offload == "cpu" else 0

    @property
    def movable_bytes(self) -> int:
        """Bytes marked offload-pp: the levelling (memledger.ledger.pipeline.levelling) decides how many move."""
        return self.stored_bytes * self.copies if self.offload == "pp" else 0

    @property
    def movable_bytes_per_micro_batch(self) -> int:
        return self.stored_bytes * self.per_micro_batch if self.offload == "pp" else 0

    @property
    def recompute_flops_per_micro_batch(self) -> int:
        return self.recompute_flops * self.per_micro_batch


def row_shape(x: ActTensor, m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> tuple[int, int]:
    """(rows, values per row) of one copy of x on this rank."""
    rows = routed_rows(m, t, p) if x.per == "routed" else tokens_on_rank(t, p)
    d = divisor(x, p)
    if x.split == "sp":
        return ceil_div(rows, d), x.values
    return rows, ceil_div(x.values, d)


def native_fmt(x: ActTensor, t: TrainSpec) -> str:
    return t.recipe.act_fmt if x.fmt == "act" else x.fmt


def quantised_bytes(x: ActTensor, m, t, p, fmt_name: str) -> int:
    rows, values = row_shape(x, m, t, p)
    return rows * fmt(fmt_name).bytes_for(values)


def recompute_flops(x: ActTensor, m, t, p) -> int:
    rows = routed_rows(m, t, p) if x.per == "routed" else tokens_on_rank(t, p)
    return ceil_div(rows * x.flops, divisor(x, p))


def chosen(x: ActTensor, t: TrainSpec, in_layer: bool, compiled: bool = False) -> TensorPolicy:
    for c, _ in t.policy.rules:
        if c == x.cls:
            return t.policy.get(c)
    if in_layer and t.recompute == "selective" and x.cls in get_profile(t.profile).selective:
        return TensorPolicy(recompute=True)
    if in_layer and compiled and x.cls in COMPILE_RECOMPUTES:  # the partitioner's choice
        return TensorPolicy(recompute=True)
    return KEEP


@lru_cache(maxsize=65536)
def _decision(x: ActTensor, m, t, p, in_layer: bool, native: int | None = None,
              compiled: bool = False) -> tuple:
    """Everything about x's storage that does not depend on how many copies a rank holds
    (cached: every rank and every layer of a kind asks the same question)."""
    pol = chosen(x, t, in_layer, compiled)
    native = tensor_bytes(x, m, t, p) if native is None else native  # the inventory's, if given
    producer = recompute_flops(x, m, t, p)
    if pol.recompute and x.flops:
        return ("recompute", native, 0, 0, 0, None, producer, producer, "recomputed in backward: ", "")
    note = " (recompute asked, but it has no producer to re-run: kept)" if pol.recompute else ""
    pol = KEEP if pol.recompute else pol
    nf = native_fmt(x, t)
    stored, bits, q = native, 0, pol.quant
    if q and nf not in NON_FLOAT:
        stored = quantised_bytes(x, m, t, p, pol.quant_fmt)
        bits = max(0, fmt(nf).mantissa_bits - fmt(pol.quant_fmt).mantissa_bits)
    else:
        q = None
    applied = str(TensorPolicy(quant=q, offload=pol.offload))
    gpu = 0 if pol.offload == "cpu" else stored  # pp moves are decided by the levelling
    where = {"cpu": "offloaded to host memory", "pp": "movable to later pipeline ranks"}.get(pol.offload, "")
    suffix = (f" → {pol.quant_fmt}: {stored} B per copy" if q else "") + (
        f" → {where}" if where else "") + note
    return (applied, native, stored, gpu, bits, pol.offload, producer, 0, "", suffix)


def decide(x: ActTensor, m, t, p, *, section: str, copies: int, per_mb: int,
           in_layer: bool, base_formula: str, native: int | None = None) -> TensorMove:
    """The move for tensor x held `copies` times at the peak, created `per_mb` times per
    micro-batch (`native`: its bytes per copy, when the caller's inventory has them)."""
    decision = _decision(x, m, t, p, in_layer, native)
    return move(x, decision, section=section, copies=copies, per_mb=per_mb,
                base_formula=base_formula)


def move(x: ActTensor, decision: tuple, *, section: str, copies: int, per_mb: int,
         base_formula: str) -> TensorMove:
    """A TensorMove from a decision made once per tensor (see `_decision`)."""
    policy, native, stored, gpu, bits, off, producer, paid, prefix, suffix = decision
    return TensorMove(section=section, tensor=x.name, cls=x.cls, policy=policy, copies=copies,
                      per_micro_batch=per_mb, native_bytes=native, stored_bytes=stored,
                      gpu_bytes=gpu, recompute_flops=paid, producer_flops=producer, bits_lost=bits,
                      offload=off, formula=prefix + base_formula + suffix)


def payments(moves, micro_batches: int) -> dict[str, int]:
    """What a rank's storage decisions cost, in integers: bytes saved at the peak, host bytes at
    the peak and moved per micro-batch / per step (each direction), bytes marked for later ranks,
    recompute FLOPs per micro-batch / per step, and the most mantissa bits any tensor lost."""
    host_mb = sum(mv.host_bytes_per_micro_batch for mv in moves)
    flops_mb = sum(mv.recompute_flops_per_micro_batch for mv in moves)
    return {"saved_bytes": sum(mv.saved_bytes for mv in moves),
            "host_bytes": sum(mv.host_bytes for mv in moves),
            "host_bytes_per_micro_batch": host_mb, "host_bytes_per_step": host_mb * micro_batches,
            "movable_bytes": sum(mv.movable_bytes for mv in moves),
            "recompute_flops_per_micro_batch": flops_mb,
            "recompute_flops_per_step": flops_mb * micro_batches,
            "max_bits_lost": max((mv.bits_lost for mv in moves), default=0)}
