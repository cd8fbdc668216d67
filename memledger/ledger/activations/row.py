"""The activation row of one pipeline rank: every saved tensor's storage move, and the items.

Row = Σ over the rank's stages of (micro-batches in flight) × Σ over the stage's layers of the
layer's kept tensors, plus the first/last-stage tensors (docs/design.md §5–6). Recompute:
  none       keep every tensor of the profile (subject to the storage policy)
  selective  drop the profile's selective classes inside the layers (re-run in backward)
  full       keep each layer's input only; one layer's full inventory becomes a transient
  every-k    keep the input of every k-th layer (Chen et al. 2016, k = ⌈√L⌉ by default);
             k layers' full inventory becomes a transient
On top, `TrainSpec.policy` sets a storage policy per tensor class (memledger.ledger.activations.
policy): every tensor becomes a TensorMove (bytes kept, moved, FLOPs and bits paid) and the row
lists its kept bytes. Offloaded tensors need a staging buffer of two layers' offloaded bytes.
Input: a `HeldActivations` (memledger.ledger.activations.held), computed once per rank.
Ignores: the in-flight gradient of the activation being back-propagated (one tensor at a time).
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache

from memledger.ledger.activations.held import KINDS, HeldActivations
from memledger.ledger.activations.inventory import formula, tensor_bytes
from memledger.ledger.activations.torchtitan_ac import SRC_AC, op_saved
from memledger.ledger.activations.policy import TensorMove, decide
from memledger.ledger.items import Item
from memledger.ledger.static.sharding import shard_divisor
from memledger.model.params import layer_groups, padded_vocab
from memledger.units import format_bytes

SRC = {"megatron": "Megatron-Core + TE saved tensors (docs/design.md §5)",
       "megatron-local": "Megatron-Core local layer spec saved tensors (docs/megatron-validation.md)",
       "paper": "Korthikanti et al. 2022 (arXiv 2205.05198) §4",
       "hf": "traced from Hugging Face transformers modules"}
SRC_MODE = {"op": SRC_AC, "interval": "torchtitan 0.2 activation_checkpoint.py (ac_freq)",
            "memory-budget": "torchtitan MemoryBudgetAC + torch._functorch.config."
                             "activation_memory_budget"}
STAGING = {"cpu": "offload staging buffers", "pp": "remote offload staging buffers"}
_new_move = tuple.__new__  # a NamedTuple's fields in order, without its __new__ frame


def _structural_moves(a: HeldActivations) -> list[TensorMove]:
    """full / every-k: each layer's inventory is recomputed; its input is checkpointed."""
    m, p, t = a.m, a.p, a.t
    (x,) = a.outer["layer input"]
    if t.recompute == "full":
        n, n_mb = sum(a.layer_mbs.values()), sum(a.per_mb.values())
    else:
        n, n_mb = a.checkpoints, a.checkpoints_per_mb
    out = []
    if n:
        mv = decide(x.tensor, m, t, p, section="checkpoints", copies=n, per_mb=n_mb,
                    in_layer=False, native=x.bytes,
                    base_formula=f"{n} layer-micro-batches × {x.formula} ({t.recompute} recompute)")
        out.append(mv._replace(native_bytes=0))  # added by the recompute
    for kind in a.kinds:
        table = a.tables[kind]
        out.append(TensorMove(
            section=f"{kind} layers", tensor="layer inventory", cls="*",
            policy=f"recompute ({t.recompute})", copies=a.layer_mbs[kind],
            per_micro_batch=a.per_mb[kind], native_bytes=table.full_bytes, stored_bytes=0,
            gpu_bytes=0, recompute_flops=table.forward_flops, producer_flops=table.forward_flops,
            formula=f"{t.recompute} recompute re-runs each layer's forward in backward"))
    return out


def _recompute_move(a: HeldActivations, kind: str, copies: int, per_mb: int, native: int,
                    how: str) -> TensorMove:
    table = a.tables[kind]
    return TensorMove(section=f"{kind} layers", tensor="layer inventory", cls="*",
                      policy=f"recompute ({how})", copies=copies, per_micro_batch=per_mb,
                      native_bytes=native, stored_bytes=0, gpu_bytes=0,
                      recompute_flops=table.forward_flops, producer_flops=table.forward_flops,
                      formula=f"{how}: the block's other tensors re-made in backward")


def op_saved_bytes(a: HeldActivations, kind: str) -> int:
    """One block's op-SAC saved tensors, one micro-batch (torchtitan_ac.op_saved)."""
    return sum(tensor_bytes(x, a.m, a.t, a.p) for x in op_saved(a.m, kind, a.p, a.fused_qkv))


def _op_moves(a: HeldActivations) -> list[TensorMove]:
    """torchtitan op-level SAC: the save list's outputs and the block input are kept."""
    m, p, t = a.m, a.p, a.t
    out = []
    for kind in a.kinds:
        n, per = a.layer_mbs[kind], a.per_mb[kind]
        for x in op_saved(m, kind, p, a.fused_qkv):
            out.append(decide(x, m, t, p, section=f"{kind} layers", copies=n, per_mb=per,
                              in_layer=True, base_formula=f"{n} layer-micro-batches × "
                                                          f"{formula(x, m, t, p)} (op SAC)"))
        rest = max(0, a.tables[kind].full_bytes - op_saved_bytes(a, kind))
        out.append(_recompute_move(a, kind, n, per, rest, "op SAC"))
    return out


def budget_kept_bytes(a: HeldActivations, kind: str) -> int:
    """memory-budget: per block-micro-batch, the full-checkpoint bytes (the block input) plus
    budget × (the compiled default saved set − those): activation_memory_budget's definition."""
    (x,) = a.outer["layer input"]
    table = a.tables[kind]
    default = sum(d[3] for d in table.decisions)  # gpu bytes kept with no AC (compiled)
    return x.bytes + a.t.recompute_budget_pct * max(0, default - x.bytes) // 100


def _budget_moves(a: HeldActivations) -> list[TensorMove]:
    out = []
    for kind in a.kinds:
        n, per, kept = a.layer_mbs[kind], a.per_mb[kind], budget_kept_bytes(a, kind)
        out.append(TensorMove(
            section=f"{kind} layers", tensor="kept under the memory budget", cls="*",
            policy="keep", copies=n, per_micro_batch=per, native_bytes=kept, stored_bytes=kept,
            gpu_bytes=kept, formula=f"{n} layer-micro-batches × (block input + "
                                    f"{a.t.recompute_budget_pct}% of the compiled saved set "
                                    f"above it) = {kept} B"))
        out.append(_recompute_move(a, kind, n, per, max(0, a.tables[kind].full_bytes - kept),
                                   f"memory budget {a.t.recompute_budget_pct}%"))
    return out


def _interval_moves(a: HeldActivations) -> list[TensorMove]:
    """interval: the checkpointed blocks keep their input; the others (above) keep all."""
    m, p, t = a.m, a.p, a.t
    (x,) = a.outer["layer input"]
    n, n_mb = sum(a.ckpt_mbs.values()), sum(a.ckpt_per_mb.values())
    out = []
    if n:
        mv = decide(x.tensor, m, t, p, section="checkpoints", copies=n, per_mb=n_mb,
                    in_layer=False, native=x.bytes,
                    base_formula=f"{n} block-micro-batches × {x.formula} (every "
                                 f"{t.recompute_every}-th block checkpointed)")
        out.append(mv._replace(native_bytes=0))
    for kind in a.kinds:
        if a.ckpt_mbs.get(kind):
            out.append(_recompute_move(a, kind, a.ckpt_mbs[kind], a.ckpt_per_mb[kind],
                                       a.tables[kind].full_bytes, "interval checkpoint"))
    return out


def activation_moves(a: HeldActivations) -> list[TensorMove]:
    """Every saved tensor of the rank and its storage decision."""
    rc = a.t.recompute
    if rc in ("full", "every-k"):
        moves = _structural_moves(a)
    elif rc == "op":
        moves = _op_moves(a)
    elif rc == "memory-budget":
        moves = _budget_moves(a)
    else:
        moves = []
        ck, ck_mb = a.ckpt_mbs or {}, a.ckpt_per_mb or {}
        for kind in a.kinds:
            n, table = a.layer_mbs[kind] - ck.get(kind, 0), a.tables[kind]
            per = a.per_mb[kind] - ck_mb.get(kind, 0)
            section, head = f"{kind} layers", f"{n} layer-micro-batches × "
            # policy.move's TensorMove, from the table's per-entry templates (every rank, every
            # tensor: the hot loop of a ledger)
            moves += [_new_move(TensorMove, (section, *front, n, per, *back, prefix + head + tail))
                      for front, back, prefix, tail in (table.templates if n else ())]
        if rc == "interval":
            moves += _interval_moves(a)
    for section, held in (("first stage", a.first), ("last stage", a.last)):
        for e in a.outer[section] if held else ():
            logits = section == "last stage" and e.tensor.cls == "logits"
            if logits and a.chunked_loss:
                continue
            n = a.loss if logits else held
            g = a.logits_gathered if logits else 1  # no loss parallel: gathered to full V
            if n:
                moves.append(decide(e.tensor, a.m, a.t, a.p, section=section, copies=n,
                                    per_mb=1, in_layer=False, native=e.bytes * g,
                                    base_formula=f"{n} micro-batches × {e.formula}" + (
                                        f" × {g} (loss parallel off: gathered)" if g > 1 else "")))
    return moves


def item_name(mv: TensorMove) -> str:
    return _item_name(mv.section, mv.tensor)


@lru_cache(maxsize=4096)  # every rank names the same few dozen tensors
def _item_name(section: str, tensor: str) -> str:
    if section == "checkpoints":
        return f"checkpointed {tensor}"
    if section.endswith("layers"):
        return f"{section.split()[0]} layers / {tensor}"
    return tensor


def staging_bytes(moves: list[TensorMove], target: str) -> int:
    """Two layers' offloaded bytes: one being written out, one being prefetched back."""
    per_unit = Counter()
    for mv in moves:
        if mv.offload == target:
            per_unit[mv.section] += mv.stored_bytes
    return 2 * max(per_unit.values(), default=0)


def activation_items(a: HeldActivations, moves: list[TensorMove]) -> list[Item]:
    """Items of the activation row (recomputed tensors have none; offloaded ones show 0 bytes)."""
    src = SRC_MODE.get(a.t.recompute) or SRC.get(a.t.profile, f"profile {a.t.profile}")
    items = [_new_move(Item, ("activations", _item_name(mv.section, mv.tensor),  # Item's fields
                              mv.gpu_bytes * mv.copies, mv.formula, src))
             for mv in moves if mv.stored_bytes or mv.gpu_bytes]
    targets = {mv.offload for mv in moves}
    for target, name in STAGING.items():
        staging = staging_bytes(moves, target) if target in targets else 0
        if staging:
            items.append(Item("activations", name, staging,
                              "2 × one layer's offloaded bytes (write-out + prefetch)",
                              "Megatron-Core / Kimi K2 §2.4.3 activation offloading"))
    cast = autocast_copies(a)
    if cast is not None:
        items.append(cast)
    return items


def cast_params(a: HeldActivations, kind: str) -> int:
    """Matrix parameters of one layer of `kind` that torch.autocast casts (per rank)."""
    return sum(-(-g.count // shard_divisor(g, a.p)) for g in layer_groups(a.m, kind)
               if g.matrix and not g.expert and not g.fp32)


def is_autocast(a: HeldActivations) -> bool:
    r = a.t.recipe  # under FSDP2 mixed precision the bf16 copy is the unsharded parameter
    return r.weight_fmt == "fp32" and r.act_fmt in ("bf16", "fp16") and r.param_fmt is None


def autocast_copies(a: HeldActivations) -> Item | None:
    """Recipe amp (fp32 weights, torch.autocast to bf16): every matmul reads a bf16 cast of its
    fp32 weight and saves that cast for backward — one copy per micro-batch in flight. Routed
    experts (transformers' grouped_mm is not autocast-enabled), fp32-kept routers and the
    embedding lookup are not cast; under full/every-k recompute the layers' casts are re-made in
    backward and only the head's stays. Measured on an H200: 1,641,021,440 bytes for a 0.8B
    Llama (exactly its non-embedding matrices × 2 bytes)."""
    if not is_autocast(a):
        return None
    n = 0
    if a.t.recompute not in ("full", "every-k"):  # amp is not torchtitan's: its modes not here
        n += sum(copies * cast_params(a, kind) for kind, copies in a.layer_mbs.items())
    if a.last and a.m.vocab:
        n += a.last * -(-padded_vocab(a.m, a.p.tp, a.t.pad_multiple()) // a.p.tp) * a.m.hidden
    if not n:
        return None
    fmt = a.t.recipe.act_fmt
    return Item("activations", "autocast weight casts", format_bytes(fmt, n),
                f"{n} matrix params held as {fmt} casts (per micro-batch in flight)",
                "torch.autocast weight cast saved by each matmul (measured, H200)")


__all__ = ["KINDS", "STAGING", "activation_items", "activation_moves", "autocast_copies",
           "item_name", "staging_bytes"]
