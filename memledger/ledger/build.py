"""build_ledger: the six-row memory ledger of every pipeline rank (docs/design.md §2), top-down.

For each pipeline rank: its placement, asked of the pipeline once (`pipeline.placement`: its
stages and their layers, first / last stage, micro-batches in flight, the loss's) and handed to
every row below; its parameter groups and their static rows (`static.held`, moved by
`static.moves`), its activation row (`activations.row`), its communication row
(`communication`), then the runtime row and the peak (`runtime.finalize`); storage policies that send activations to later ranks are levelled
across the ranks last (`pipeline.remote`). Each step takes the previous step's result; nothing
below calls back up here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

from memledger.ledger.activations.held import held_activations
from memledger.ledger.activations.policy import payments
from memledger.ledger.activations.row import activation_items, activation_moves
from memledger.ledger.activations.transients import activation_transients
from memledger.ledger.allocator import MOE_A2A_ITEMS
from memledger.ledger.chunked_loss import chunked_loss_transient
from memledger.ledger.checks import check_all, check_runtime
from memledger.ledger.step_in_backward import check as check_step_in_backward
from memledger.ledger.titan_graphs import check as check_cuda_graphs
from memledger.ledger.communication import comm_items
from memledger.ledger.fsdp2 import (expert_sharding, logits_gathered, padding_warnings,
                                    root_unit_params, tied_tp_warnings, tied_weight_copies,
                                    torchtitan_runs)
from memledger.ledger.torch_pipelining import pipelining_items, stage_rope_items
from memledger.ledger.items import ROWS, RankLedger, sum_rows
from memledger.ledger.torchtitan_eras import era, float8_warnings, loss_form
from memledger.ledger.pipeline.placement import rank_placement, stage_placement
from memledger.ledger.pipeline.remote import remote_offload
from memledger.ledger.runtime import RankParts, finalize, step_temporaries, unit_buffers
from memledger.ledger.static.engines import apply_engines, dp_rank_optimizer_bytes, greedy_applies
from memledger.ledger.static.held import composed_groups, composition, held_groups, static_items
from memledger.ledger.static.moves import move_static, opt_partition_params
from memledger.model.params import n_active_params, n_mtp_params, n_params
from memledger.specs.hardware import Hardware
from memledger.specs.loop import LoopSpec, built_model, profile_warnings, resolve_loop
from memledger.specs.loop_implied import layout_warnings
from memledger.ledger.static.titan_buffers import buffer_items
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.runtime import RuntimeSpec
from memledger.specs.train import TrainSpec


@dataclass(frozen=True)
class Ledger:
    model: ModelSpec
    parallel: ParallelSpec
    train: TrainSpec
    runtime: RuntimeSpec
    hardware: Hardware | None
    ranks: tuple[RankLedger, ...]
    n_params: int
    n_active_params: int
    loop: LoopSpec | None = None  # the resolved training loop
    warnings: tuple[str, ...] = ()  # modelled, but worth a look (FSDP2 padding: ledger.fsdp2)

    @property
    def most_loaded_rank(self) -> int:
        return max(self.ranks, key=lambda r: (r.peak_total_bytes, -r.pp_rank)).pp_rank

    @property
    def peak(self) -> RankLedger:
        return self.ranks[self.most_loaded_rank]

    def to_dict(self) -> dict:
        """The CLI's --json object: every byte figure an integer."""
        return {
            "n_params": self.n_params,
            "n_active_params": self.n_active_params,
            "ranks": [{
                "pp_rank": r.pp_rank,
                "rows": {k: r.rows[k] for k in ROWS},
                "peak_allocated_bytes": r.peak_allocated_bytes,
                "peak_reserved_bytes": r.peak_reserved_bytes,  # replayed here, not at build
                "peak_total_bytes": r.peak_total_bytes,
                "items": [{"row": i.row, "name": i.name, "bytes": i.bytes, "formula": i.formula,
                           "source": i.source} for i in r.items],
                "moves": [move_dict(mv) for mv in r.moves if mv.policy != "keep"],
                "payments": payments(r.moves, self.train.micro_batches),
                "transfers": [asdict(x) for x in r.transfers],
                "host": asdict(r.host) if r.host else None,
                "peak_event": r.peak_event._asdict() if r.peak_event else None,
                "timeline": r.timeline_json(),
            } for r in self.ranks],
            "most_loaded_rank": self.most_loaded_rank,
            "warnings": list(self.warnings),
            "config": {"model": asdict(self.model), "parallel": asdict(self.parallel),
                       "train": asdict(self.train), "runtime": asdict(self.runtime),
                       "hardware": asdict(self.hardware) if self.hardware else None,
                       "loop": asdict(self.loop) if self.loop else None},
        }


def move_dict(mv) -> dict:
    """A TensorMove as JSON: its fields plus the derived per-peak / per-micro-batch integers."""
    return {**mv._asdict(), "saved_bytes": mv.saved_bytes, "host_bytes": mv.host_bytes,
            "host_bytes_per_micro_batch": mv.host_bytes_per_micro_batch,
            "movable_bytes": mv.movable_bytes,
            "recompute_flops_per_micro_batch": mv.recompute_flops_per_micro_batch}


# held by the timeline's layer-backward event, not yet (or no longer) at a MoE combine's backward
MOE_LATER = ("zero-3 reduce-scatter input",) + MOE_A2A_ITEMS


def rank_parts(m, p, t, rt, r: int) -> RankParts:
    loop = resolve_loop(rt, t.profile)
    place = rank_placement(m, p, t, rt, r)  # asked of the pipeline once, handed to every row
    comp = composition(m, t, place)
    held, static, host, static_rows, step = static_part(m, p, t, rt, loop, comp)
    items = list(static)
    items += buffer_items(m, t, rt, loop, place)  # torchtitan RoPE caches, MoE counters (weights)
    acts = held_activations(m, p, t, place, loop.loss == "chunked",
                            compiled=rt.torch_compile, logits_gathered=logits_gathered(p, t, rt, loop),
                            fused_qkv=era(rt).fused_qkv, loss_form=loss_form(p, t, rt, loop),
                            torchtitan=torchtitan_runs(t, loop),
                            cp_gathered_kv=torchtitan_runs(t, loop) and era(rt).cp_gathered_kv)
    moves = activation_moves(acts)
    copies = tied_weight_copies(m, p, t, loop)
    items += activation_items(acts, moves)
    items += stage_rope_items(m, p, t, rt, place, acts.outer["first stage"])
    pp_buffers = pipelining_items(m, p, t, rt, place)  # None: Megatron's, per composition
    comm = (comm_items(m, p, t, rt, held, pp_buffers, loop) if pp_buffers is not None
            else list(composed_comm(m, p, t, rt, loop, comp)))
    items += comm
    freed = sum(i.bytes for i in items if i.name in MOE_LATER) if acts.torchtitan else 0
    transients = activation_transients(acts, moves, persistent_grads=not loop.on_demand,
                                       moe_freed=freed)
    loss_set = chunked_loss_transient(m, p, t, rt, loop, place.last)  # torchtitan's ChunkedLossWrapper
    transients += [loss_set] if loss_set is not None else []
    return RankParts(place=place, items=tuple(items), transients=tuple(transients),
                     step=step, moves=tuple(moves), host=host,
                     ctx=(m, p, t, loop), acts=acts, fsdp_units=unit_buffers(comm),
                     static_rows=(len(static), static_rows),
                     root_params=tuple((" ".join(s), root_unit_params(held, p, s, copies)) for s in
                                       (("embedding",), ("head",), ("embedding", "head")))
                     if acts.torchtitan else ())


@lru_cache(maxsize=4096)
def static_part(m, p, t, rt, loop, comp: tuple):
    """A rank's parameter groups, their static items, what moved to the host, the items' row
    sums and the optimizer step's temporaries, by the rank's composition
    (static.held.composition; cached: most pipeline ranks hold the same groups)."""
    held = list(composed_groups(m, p, t, loop, comp))
    pad = expert_sharding(p, t, rt, loop)  # FSDP2's dim-0 chunks of 3-D experts (ledger.fsdp2)
    static = apply_engines(static_items(held, p, t, pad), held, p, t, rt)  # DTensor, ZeRO-1
    items, host = move_static(static, opt_partition_params(held, p), p, t, rt)
    return tuple(held), tuple(items), host, sum_rows(items), step_temporaries(held, p, t, rt)


@lru_cache(maxsize=4096)
def composed_comm(m, p, t, rt, loop, comp: tuple) -> tuple:
    """The communication row of a rank with composition `comp` when its pipeline buffers are
    Megatron's (the same on every stage: communication.pp_items)."""
    held = static_part(m, p, t, rt, loop, comp)[0]
    return tuple(comm_items(m, p, t, rt, list(held), None, loop))


def dp_optimizer_rows(m, p, t, rt, r: int) -> list[int] | None:
    """Pipeline rank r's optimizer row on each dp rank when they differ (torch's greedy ZeRO-1
    partition; the ledger's row is their maximum), else None."""
    if not greedy_applies(p, rt):
        return None
    loop = resolve_loop(rt, t.profile)
    built = built_model(m, loop)
    held = held_groups(built, p, t, stage_placement(built, p, r), loop)
    return dp_rank_optimizer_bytes(held, p, t)


def build_rank(m, p, t, rt, r: int) -> RankLedger:
    return finalize(rank_parts(m, p, t, rt, r), rt)


def build_ledger(model: ModelSpec, parallel: ParallelSpec, train: TrainSpec,
                 runtime: RuntimeSpec | None = None, hardware: Hardware | None = None) -> Ledger:
    """Every pipeline rank's ledger. Raises SpecError on an invalid combination."""
    rt = runtime or RuntimeSpec()
    check_all(model, parallel, train)
    check_runtime(parallel, train, rt)
    loop = resolve_loop(rt, train.profile)
    check_step_in_backward(parallel, train, rt, loop)
    check_cuda_graphs(parallel, train, rt, loop)
    built = built_model(model, loop)  # the modules the loop's framework builds (MTP or not)
    parts = [rank_parts(built, parallel, train, rt, r) for r in range(parallel.pp)]
    if train.policy.uses_pp_offload:  # with pp = 1 nothing moves and no staging is kept
        ranks = remote_offload(parts, rt)
    else:
        ranks = tuple(finalize(x, rt) for x in parts)
    return Ledger(model=model, parallel=parallel, train=train, runtime=rt, hardware=hardware,
                  ranks=ranks, n_params=n_params(model) + n_mtp_params(built),
                  n_active_params=n_active_params(model), loop=loop,
                  warnings=padding_warnings(built, parallel, train, rt, loop)
                  + tied_tp_warnings(built, parallel, train, loop)
                  + float8_warnings(train, rt) + profile_warnings(rt, train.profile)
                  + layout_warnings(parallel, train, rt, moe=model.moe is not None))
