"""FSDP2 (torch `fully_shard`, ZeRO-3 with zero3_impl="fsdp") and torchtitan's use of it: rules.

Each rule is a row of RULES with the file it comes from; the functions below only read them.
  dim-0 padding     every parameter is chunked on dim 0 over the shard group and each rank's
                    shard padded to the first chunk (torch.chunk; _fsdp_param.py
                    _init_sharded_param: padded_sharded_param_size = chunks[0]). A 3-D expert
                    tensor (E_local, rows, cols) over z ranks costs ⌈E_local/z⌉ experts per rank
                    in the weights, gradients and optimizer rows (rank 0, the most loaded), and
                    its all-gather output is z × that (the unsharded buffer is padded too).
                    Dense matrices and vectors pad < z rows: ignored.
  torchtitan experts torchtitan shards experts on dim 1 when efsdp·ep > num_experts (fsdp.py
                    apply_fsdp_to_decoder: expert_shard_placement = Shard(1)), so no expert
                    padding there; Shard(0) (and its padding) otherwise.
  reshard           fully_shard(reshard_after_forward=True) by default; torchtitan's "default"
                    is `not pp_enabled` (fsdp.py get_fsdp_reshard_after_forward_policy). Without
                    resharding every unit's unsharded copy stays from its forward to its
                    backward, beside the shards.
  PP grad sync      under torch.distributed.pipelining the stage runs backward without gradient
                    sync until the last micro-batch (pipelining/stage.py
                    backward_maybe_with_nosync: set_requires_gradient_sync(False),
                    set_reshard_after_backward(False)); FSDP2 accumulates the unsharded gradients
                    in reduce_dtype (_fsdp_param.py to_accumulated_grad_if_needed), so each stage
                    holds every unit's unsharded fp32 gradient across the step. They come to
                    life in the stage's first backward, unit by unit, and the sharded gradients
                    only at the last micro-batch's reduce-scatter (zero_grad(set_to_none) left
                    none): in the step's walk they take the sharded gradients' place
                    (`pp_walk_grads`), so an interleaved rank's second chunk accumulates while
                    its first chunk's activations are still held, and vice versa.
  mixed precision   MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the all-gather
                    output is bf16; the reduce-scatter input is fp32 (_fsdp_collectives.py
                    foreach_reduce: reduce_scatter_input in reduce_dtype) beside the unit's bf16
                    unsharded gradient.
"torchtitan as it runs" = loop torchtitan with precision fsdp2-mixed; other loops get plain FSDP2.
Megatron's experts are one 2-D weight per expert (no 3-D tensor to pad).
"""
from __future__ import annotations

from memledger.ledger.static.sharding import shard_divisor, zero_group
from memledger.ledger.torchtitan_eras import era
from memledger.model.params import layer_groups
from memledger.units import ceil_div

SRC_FSDP = "torch 2.13 torch/distributed/fsdp/_fully_shard/"
RULES = {  # rule -> (what it says, where it comes from)
    "dim-0 padding": ("3-D expert tensors cost ⌈E_local/z⌉ experts per rank",
                      SRC_FSDP + "_fsdp_param.py (_init_sharded_param, torch.chunk on dim 0)"),
    "torchtitan experts": ("Shard(1) when efsdp·ep > num_experts: no expert padding",
                      "torchtitan/distributed/fsdp.py (apply_fsdp_to_decoder)"),
    "reshard": ("default: True (torch), not PP (torchtitan); False keeps unsharded copies",
                      "torchtitan/distributed/fsdp.py (get_fsdp_reshard_after_forward_policy)"),
    "PP grad sync": ("unsharded fp32 gradients held across the step under PP",
                      "torch/distributed/pipelining/stage.py (backward_maybe_with_nosync); " + SRC_FSDP +
                      "_fsdp_param.py (to_accumulated_grad_if_needed)"),
    "torchtitan units": ("[norm, lm_head] kept unsharded unless 'always'; tok_embeddings resharded",
                      "torchtitan/distributed/fsdp.py (apply_fsdp_to_decoder)"),
    "2024-12 units": ("blocks + the root (embedding, norm, head) kept unsharded; the last block "
                      "not resharded after forward (non-PP default policy)",
                      "torchtitan 2024-12 parallelisms/parallelize_llama.py (apply_fsdp); torch "
                      "2024 _composable/fsdp/_fsdp_state.py (_lazy_init)"),
    "tied x TP": ("tied weights under TP: the tied unit gathers, holds gradients for and "
                      "reduce-scatters the weight twice; one sharded copy",
                      "torchtitan 0.3 models/common/decoder.py (init_states re-ties after "
                      "parallelize); " + SRC_FSDP + "_fsdp_param.py (reset_sharded_param)"),
    "mixed precision": ("bf16 all-gather output, fp32 reduce-scatter input",
                      SRC_FSDP + "_fsdp_collectives.py (foreach_all_gather, foreach_reduce)"),
}
PP_GRADS_ITEM = "FSDP2 unsharded gradients to the last micro-batch (PP)"
UNITS_KEPT = "FSDP2 unsharded units kept"  # the item's name, up to its condition
PER_EXPERT_LOOPS = ("megatron",)  # loops whose experts are 2-D weights, one per expert


def _base(loop) -> str:
    return loop.name.split("+")[0] if loop is not None else ""


def torchtitan_runs(t, loop) -> bool:
    """torchtitan as it runs: its loop with FSDP2's mixed-precision recipe."""
    return _base(loop) == "torchtitan" and t.recipe.param_fmt is not None


def fsdp2(p, rt) -> bool:
    return p.zero == 3 and rt.zero3_impl == "fsdp"


def expert_sharding(p, t, rt, loop) -> str:
    """How 3-D expert tensors are sharded under ZeRO-3: "" (flat ⌈n/z⌉: Megatron, DeepSpeed),
    "dim0" (plain FSDP2: chunked on dim 0, padded), "dim1-if-fewer" (torchtitan: dim 0 unless
    the ranks outnumber the experts, then dim 1). RuntimeSpec.fsdp_expert_shard overrides
    "auto". A scalar: the planner passes it to the same rows."""
    if not fsdp2(p, rt) or _base(loop) in PER_EXPERT_LOOPS:
        return ""
    if rt.fsdp_expert_shard != "auto":
        return rt.fsdp_expert_shard
    return "dim1-if-fewer" if torchtitan_runs(t, loop) else "dim0"


def n_experts(g) -> int:
    """Experts along dim 0 of the group's 3-D tensor(s) (SwiGLU's gate and up: two of them)."""
    return g.dim0  # set on every routed-expert group (model.params._mlp)


def expert_local(g, p, z, instances: int):
    """Params of a 3-D expert group on the most loaded rank, chunked on dim 0 over z ranks."""
    per = g.count // n_experts(g)  # one expert's slice of every tensor of the group
    e_local = ceil_div(n_experts(g), p.ep)
    return ceil_div(e_local, z) * ceil_div(per, p.etp) * instances


def padding_factor_pct(g, p, instances: int = 1) -> int:
    """How much dim-0 padding multiplies an expert group's share, in percent (100 = none)."""
    flat = ceil_div(ceil_div(g.count, p.ep * p.etp) * instances, p.expert_dp)
    return 100 * expert_local(g, p, p.expert_dp, instances) // max(1, flat)


def reshard_after_forward(p, t, rt, loop) -> bool:
    """FSDP2's reshard_after_forward for the layer units (torchtitan's policy string)."""
    v = rt.fsdp_reshard_after_forward
    if v != "default":
        return v == "always"
    return not (torchtitan_runs(t, loop) and p.pp > 1)


def torchtitan_units(p, t, rt, loop, tied: bool = False) -> tuple[str, ...]:
    """Sections kept unsharded from forward to backward outside the layers. Plain FSDP2: the
    root (embedding, final norm, head; _fsdp_state.py _lazy_init). torchtitan: [norm, lm_head]
    is its own unit, alive at the loss (reshard_after_forward only under "always": then only
    ChunkedLossWrapper's chunk loop holds it; after a materialised loss's forward it is
    resharded, and its backward gathers it once the cross-entropy's working set is gone:
    titan_lifetimes.head_at_loss); tok_embeddings its own unit resharded like the layers unless
    units are kept (`units_kept`); with tied weights [tok_embeddings, norm, lm_head] is one unit, kept like
    [norm, lm_head] (fsdp.py apply_fsdp_to_decoder, `enable_weight_tying`). Measured with
    reshard=always: Llama 3 8B chunked loss −3.98 → −0.02 %, Llama 3.2 3B (tied) materialised
    −8.03 → −0.00 %, Llama 3 8B materialised −0.00 % (the head not at the loss)."""
    if not torchtitan_runs(t, loop) or era(rt).root_unit:  # 2024-12: one root unit
        return ("embedding", "head")
    kept = units_kept(p, t, rt, loop)
    if tied:
        return ("embedding", "head")
    return ("head",) + (("embedding",) if kept else ())


def units_kept(p, t, rt, loop) -> bool:
    """Every unit unsharded from its forward (or its backward) on, to its stage's last backward:
    reshard_after_forward off, or PP with m > 1 under any policy — pipelining's non-last
    backwards run with set_reshard_after_backward(False) (RULES["PP grad sync"]), so a unit
    gathered for a backward stays unsharded; under "always" the next forward reshards it and the
    next backward gathers it again, so the backward's high point holds them all as "never"
    does (measured: Llama 3 8B PP 2, reshard=always, every unit of the stage unsharded at the
    peak)."""
    return not reshard_after_forward(p, t, rt, loop) or pp_unsharded_grads(p, t, rt, loop)


def last_block_kept(p, t, rt, loop) -> bool:
    """torchtitan 2024-12's "default" policy without PP: the last block's unit has
    reshard_after_forward=False ("FSDP would prefetch it immediately"), so one layer unit stays
    unsharded from the last forward through the loss to its backward (RULES["2024-12 units"])."""
    return (fsdp2(p, rt) and torchtitan_runs(t, loop) and era(rt).root_unit
            and rt.fsdp_reshard_after_forward == "default" and p.pp == 1)


def pp_unsharded_grads(p, t, rt, loop) -> bool:
    """Gradients held unsharded until the last micro-batch (torch.distributed.pipelining)."""
    return fsdp2(p, rt) and p.pp > 1 and t.micro_batches > 1 and (
        torchtitan_runs(t, loop) or rt.pipeline_engine == "pytorch")


def pp_walk_grads(items, grads_row: int) -> tuple[int, int]:
    """(unsharded PP gradient bytes, numerator) when FSDP2 under PP accumulates unsharded: the
    walk scales each layer's sharded gradient by held / grads_row (every unit of the rank is
    unsharded the same way) and the communication row gives the item back. (0, 0) otherwise."""
    held = sum(i.bytes for i in items if i.name == PP_GRADS_ITEM)
    return (held, grads_row) if held and grads_row else (0, 0)


def unit_params(h, p, pad: str = ""):
    """One layer instance's unsharded parameters on this rank (after tp/ep): what the unit's
    all-gather outputs — for a dim-0-padded expert tensor, z × its padded chunk."""
    g = h.group
    if pad and g.expert and p.zero == 3:
        z = zero_group(g, p)
        if pad == "dim0" or z * p.ep <= n_experts(g):
            return expert_local(g, p, z, 1) * z
    return ceil_div(g.count, shard_divisor(g, p))


def layer_unit_params(held, p, pad: str = "") -> dict:
    """Section -> one layer's unsharded parameters on this rank (the FSDP unit)."""
    per_layer: dict = {}
    for h in held:
        if h.section.endswith("layers"):
            per_layer[h.section] = per_layer.get(h.section, 0) + unit_params(h, p, pad)
    return per_layer


def logits_gathered(p, t, rt, loop) -> int:
    """How many times the logits' vocab-parallel share a rank holds: torchtitan 0.2 with
    parallelism.disable_loss_parallel all-gathers the ColwiseParallel head output to Replicate
    (llama3/parallelize.py: output_layouts Shard(-1) only with loss parallel), so tp × V/tp;
    0.3 always runs vocab-parallel CE (components/loss.py _LossParallelCrossEntropy)."""
    return p.tp if torchtitan_runs(t, loop) and not rt.loss_parallel and p.tp > 1 else 1


def padding_warnings(m, p, t, rt, loop) -> tuple[str, ...]:
    """One line per 3-D expert group whose FSDP2 dim-0 padding multiplies its share (>= 2×):
    shown on the page, printed by the CLI and kept in the JSON."""
    pad = expert_sharding(p, t, rt, loop)
    if not pad or m.moe is None:
        return ()
    out = []
    for g in layer_groups(m, "moe"):
        if not g.expert:
            continue
        e_local = ceil_div(n_experts(g), p.ep)
        if pad == "dim1-if-fewer" and zero_group(g, p) * p.ep > n_experts(g):
            continue
        pct = padding_factor_pct(g, p)
        if pct >= 200:
            out.append(f"FSDP2 pads {g.name}: {e_local} experts per ep rank chunked on dim 0 over "
                       f"{p.expert_dp} ranks cost each rank ⌈{e_local}/{p.expert_dp}⌉ whole "
                       f"expert(s), {pct / 100:.1f}× its even share (weights, gradients, optimizer "
                       f"and the all-gather); torchtitan shards such experts on dim 1 "
                       f"(fsdp_expert_shard=dim1-if-fewer)")
    return tuple(out)


def tied_weight_copies(m, p, t, loop) -> int:
    """How many times torchtitan's tied unit gathers the tied weight (RULES["tied x TP"]). Under
    TP, parallelize_module gives tok_embeddings and lm_head a DTensor parameter each, so the tie
    is gone when fully_shard groups [tok_embeddings, norm, lm_head] and FSDP2 makes two
    FSDPParams of the weight; init_states re-ties the modules, and FSDP2's lazy init adopts the
    re-tied parameter as both FSDPParams' shard (reset_sharded_param). One sharded copy (weights,
    gradients, optimizer), but every unshard all-gathers two bf16 copies, each module's backward
    gives its own unsharded gradient (no autograd sum), and the unit's reduce-scatter input holds
    both. Measured: Llama 3.2 3B TP 2 at 512 tokens, materialised loss."""
    tied = torchtitan_runs(t, loop) and m.tied_embeddings and p.tp > 1 and p.zero == 3
    return 2 if tied else 1


def tied_tp_warnings(m, p, t, loop) -> tuple[str, ...]:
    """The page's line where torchtitan gathers a tied weight twice (`tied_weight_copies`)."""
    if tied_weight_copies(m, p, t, loop) == 1:
        return ()
    return ("torchtitan under TP breaks the weight tie before FSDP2 shards the tied unit "
            "(parallelize_module made tok_embeddings' and lm_head's weights two DTensor "
            "parameters; init_states re-ties them after fully_shard): one sharded copy, but the "
            "unit gathers, holds gradients for and reduce-scatters the weight twice (counted)",)


def root_unit_params(held, p, sections=("embedding", "head"),
                     tied_copies: int = 1) -> int:
    """Parameters of the FSDP root unit on this rank: embedding, final norm and head (torchtitan:
    the sections it keeps unsharded, torchtitan_units). A tied unit gathering the
    weight `tied_copies` times (`tied_weight_copies`) counts the embedding so often."""
    both = "embedding" in sections and "head" in sections
    return sum(ceil_div(h.group.count, shard_divisor(h.group, p)) * h.instances
               * (tied_copies if both and h.section == "embedding" else 1)
               for h in held if h.section in sections)
