"""Offload feasibility (docs/design.md §8): does moving bytes hide behind compute?

Compute per micro-batch on pipeline rank r (memledger.model.flops): forward = rank_forward_flops
(2 × active matmul params per token + causal attention, ÷ tp·cp; experts under balanced
routing), backward = 2 × forward + the FLOPs the policy recomputes; seconds = FLOPs ÷
(bf16 peak × MFU). An offload sends bytes device → host (or → a later rank) during the
micro-batch's forward and fetches them back during its backward, so
  required bandwidth out = bytes per micro-batch ÷ forward window,
  required bandwidth in  = bytes per micro-batch ÷ backward window,
against the link: PCIe for the host; for another pipeline rank NVLink when both GPUs share a
node, else the network. Pipeline neighbours sit tp·cp·dp GPUs apart (Megatron's rank order
tp-cp-ep-dp-pp), so ranks i and j share a node when ⌊i·tp·cp·dp / g⌋ = ⌊j·tp·cp·dp / g⌋ for g
GPUs per node. Exposed time per step = m × (max(0, out time − forward) + max(0, in time − backward)).
Alternatives when it does not hide: recompute the same tensors (their producers' FLOPs; a
tensor without producer, such as a layer input, cannot be), or a smaller micro-batch that fits
with no offload at all (`smaller_micro_batch`, same tokens per step).
Ignores: PCIe contention between GPUs behind one switch, copy-engine setup latency, and the
compute slow-down from sharing HBM bandwidth with the copies.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from memledger.costs.compute import DEFAULT_MFU_PCT, rank_forward_flops, seconds
from memledger.errors import SpecError
from memledger.ledger.pipeline.remote import sent_per_micro_batch
from memledger.specs.hardware import Hardware
from memledger.specs.policy import TensorPolicy


@dataclass(frozen=True)
class ComputeTime:
    pp_rank: int
    forward_flops: int  # one micro-batch on this GPU
    recompute_flops: int  # added to the backward by the policy / recompute mode
    forward_s: float
    backward_s: float

    @property
    def micro_batch_s(self) -> float:
        return self.forward_s + self.backward_s


@dataclass(frozen=True)
class OffloadVerdict:
    pp_rank: int
    target: str  # "cpu" or "pp"
    link: str  # "PCIe", "NVLink", "network", or e.g. "NVLink+network"
    link_bytes_per_s: int  # of the slowest link used
    bytes_per_micro_batch: int  # each direction
    bytes_per_step: int  # each direction
    out_s: float  # time to move one micro-batch's bytes out
    in_s: float
    forward_s: float
    backward_s: float
    exposed_s_per_step: float
    alt_recompute_flops_per_step: int  # recomputing the same tensors instead
    alt_recompute_s_per_step: float

    @property
    def required_out_bytes_per_s(self) -> float:
        return self.bytes_per_micro_batch / self.forward_s if self.forward_s else float("inf")

    @property
    def required_in_bytes_per_s(self) -> float:
        return self.bytes_per_micro_batch / self.backward_s if self.backward_s else float("inf")

    @property
    def hidden(self) -> bool:
        return self.exposed_s_per_step == 0


def compute_time(led, r: int, hw: Hardware, mfu_pct: int = DEFAULT_MFU_PCT) -> ComputeTime:
    m, p, t = led.model, led.parallel, led.train
    fwd = rank_forward_flops(m, p, t, r)
    rec = sum(mv.recompute_flops_per_micro_batch for mv in led.ranks[r].moves)
    return ComputeTime(pp_rank=r, forward_flops=fwd, recompute_flops=rec,
                       forward_s=seconds(fwd, hw, mfu_pct),
                       backward_s=seconds(2 * fwd + rec, hw, mfu_pct))


def same_node(p, hw: Hardware, i: int, j: int) -> bool:
    stride = p.tp * p.cp * p.dp
    return (i * stride) // hw.gpus_per_node == (j * stride) // hw.gpus_per_node


def _verdict(led, r, hw, mfu_pct, target, per_link: dict[str, tuple[int, int]], alt_flops_mb) -> OffloadVerdict:
    """per_link: link name -> (bytes per micro-batch, bytes/s)."""
    ct = compute_time(led, r, hw, mfu_pct)
    mbs = led.train.micro_batches
    used = {k: v for k, v in per_link.items() if v[0]}
    t_move = max((b / bw for b, bw in used.values()), default=0.0)
    exposed = mbs * (max(0.0, t_move - ct.forward_s) + max(0.0, t_move - ct.backward_s))
    total = sum(b for b, _ in used.values())
    slowest = min((bw for _, bw in used.values()), default=0)
    return OffloadVerdict(
        pp_rank=r, target=target, link="+".join(used) or "-", link_bytes_per_s=slowest,
        bytes_per_micro_batch=total, bytes_per_step=total * mbs, out_s=t_move, in_s=t_move,
        forward_s=ct.forward_s, backward_s=ct.backward_s, exposed_s_per_step=exposed,
        alt_recompute_flops_per_step=alt_flops_mb * mbs,
        alt_recompute_s_per_step=seconds(alt_flops_mb * mbs, hw, mfu_pct))


def cpu_offload_verdicts(led, hw: Hardware, mfu_pct: int = DEFAULT_MFU_PCT) -> list[OffloadVerdict]:
    """One verdict per pipeline rank that offloads activations to host memory."""
    out = []
    for rl in led.ranks:
        moves = [mv for mv in rl.moves if mv.offload == "cpu"]
        per_mb = sum(mv.host_bytes_per_micro_batch for mv in moves)
        if per_mb:
            alt = sum(mv.producer_flops * mv.per_micro_batch for mv in moves)
            out.append(_verdict(led, rl.pp_rank, hw, mfu_pct, "cpu", {"PCIe": (per_mb, hw.pcie_bw)}, alt))
    return out


def remote_offload_verdicts(led, hw: Hardware, mfu_pct: int = DEFAULT_MFU_PCT) -> list[OffloadVerdict]:
    """One verdict per sending rank of the remote offload (levelling) in the ledger."""
    out = []
    for rl in led.ranks:
        sends = [x for x in rl.transfers if x.src == rl.pp_rank]
        if not sends:
            continue
        moves = [mv for mv in rl.moves if mv.offload == "pp"]
        sent = sum(x.bytes for x in sends)
        per_mb = sent_per_micro_batch(moves, sent)
        links = {"NVLink": [0, hw.intra_node_bw], "network": [0, hw.network_bw]}
        for x in sends:
            key = "NVLink" if same_node(led.parallel, hw, x.src, x.dst) else "network"
            links[key][0] += -(-per_mb * x.bytes // sent)
        movable = sum(mv.movable_bytes for mv in moves)
        alt = sum(mv.producer_flops * mv.per_micro_batch for mv in moves) * sent // movable
        out.append(_verdict(led, rl.pp_rank, hw, mfu_pct, "pp",
                            {k: (v[0], v[1]) for k, v in links.items()}, alt))
    return out


@dataclass(frozen=True)
class MicroBatchAlternative:
    """A smaller micro-batch, same tokens per step, every offload rule turned back into keep."""

    micro_batch: int
    micro_batches: int
    peak_bytes: int


def without_offload(policy):
    """The policy with offload removed from every rule (quantisation and recompute stay)."""
    rules = {}
    for c, text in policy.rules:
        pol = TensorPolicy.parse(text)
        if pol.offload:
            rules[c] = str(TensorPolicy(quant=pol.quant))
    return policy.with_rules(rules) if rules else policy


def smaller_micro_batch(led, target_bytes: int) -> MicroBatchAlternative | None:
    """The largest micro-batch below the current one whose ledger fits `target_bytes` with no
    offload (micro-batches per step raised to keep at least the same tokens per step).

    Found by bisection over 1..b-1: log2(b) ledgers, not b (a link with micro-batch 1024 cost
    29 s rebuilding one per value). The peak grows with the micro-batch (activations in flight
    and the logits transient scale with it); where ceil(tokens/b) rounding bends that by a few
    tokens, the answer still fits and the next larger micro-batch does not."""
    t = led.train
    tokens = t.micro_batch * t.micro_batches
    cache: dict[int, MicroBatchAlternative | None] = {}

    def fitting(b: int) -> MicroBatchAlternative | None:
        if b not in cache:
            cache[b] = _alternative(led, b, -(-tokens // b), target_bytes)
        return cache[b]

    if t.micro_batch <= 1 or fitting(1) is None:
        return None
    lo, hi = 1, t.micro_batch - 1  # fitting(lo) holds; find the largest b <= hi that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fitting(mid) is not None:
            lo = mid
        else:
            hi = mid - 1
    return fitting(lo)


def _alternative(led, b: int, micro_batches: int, target_bytes: int) -> MicroBatchAlternative | None:
    from memledger.ledger import build_ledger
    t = led.train
    nt = replace(t, micro_batch=b, micro_batches=micro_batches, policy=without_offload(t.policy))
    try:
        new = build_ledger(led.model, led.parallel, nt, led.runtime, led.hardware)
    except SpecError:
        return None
    peak = new.peak.peak_total_bytes
    return MicroBatchAlternative(b, micro_batches, peak) if peak <= target_bytes else None
