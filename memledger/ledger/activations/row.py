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

from memledger.ledger.activations.held import KINDS, HeldActivations
from memledger.ledger.activations.policy import TensorMove, decide, move
from memledger.ledger.items import Item
from memledger.ledger.static.sharding import shard_divisor
from memledger.model.params import layer_groups, padded_vocab
from memledger.units import format_bytes

SRC = {"megatron": "Megatron-Core + TE saved tensors (docs/design.md §5)",
       "paper": "Korthikanti et al. 2022 (arXiv 2205.05198) §4",
       "hf": "traced from Hugging Face transformers modules"}
STAGING = {"cpu": "offload staging buffers", "pp": "remote offload staging buffers"}


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


def activation_moves(a: HeldActivations) -> list[TensorMove]:
    """Every saved tensor of the rank and its storage decision."""
    if a.t.recompute in ("full", "every-k"):
        moves = _structural_moves(a)
    else:
        moves = []
        for kind in a.kinds:
            n, table = a.layer_mbs[kind], a.tables[kind]
            for e, dec in zip(table.entries, table.decisions):
                moves.append(move(e.tensor, dec, section=f"{kind} layers", copies=n,
                                  per_mb=a.per_mb[kind],
                                  base_formula=f"{n} layer-micro-batches × {e.formula}"))
    for section, held in (("first stage", a.first), ("last stage", a.last)):
        for e in a.outer[section] if held else ():
            logits = section == "last stage" and e.tensor.cls == "logits"
            if logits and a.chunked_loss:
                continue
            n = a.loss if logits else held
            if n:
                moves.append(decide(e.tensor, a.m, a.t, a.p, section=section, copies=n,
                                    per_mb=1, in_layer=False, native=e.bytes,
                                    base_formula=f"{n} micro-batches × {e.formula}"))
    return moves


def item_name(mv: TensorMove) -> str:
    if mv.section == "checkpoints":
        return f"checkpointed {mv.tensor}"
    if mv.section.endswith("layers"):
        return f"{mv.section.split()[0]} layers / {mv.tensor}"
    return mv.tensor


def staging_bytes(moves: list[TensorMove], target: str) -> int:
    """Two layers' offloaded bytes: one being written out, one being prefetched back."""
    per_unit = Counter()
    for mv in moves:
        if mv.offload == target:
            per_unit[mv.section] += mv.stored_bytes
    return 2 * max(per_unit.values(), default=0)


def activation_items(a: HeldActivations, moves: list[TensorMove]) -> list[Item]:
    """Items of the activation row (recomputed tensors have none; offloaded ones show 0 bytes)."""
    src = SRC.get(a.t.profile, f"profile {a.t.profile}")
    items = [Item("activations", item_name(mv), mv.gpu_total, mv.formula, src)
             for mv in moves if mv.stored_bytes or mv.gpu_bytes]
    for target, name in STAGING.items():
        staging = staging_bytes(moves, target)
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
    r = a.t.recipe
    return r.weight_fmt == "fp32" and r.act_fmt in ("bf16", "fp16")


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
    if a.t.recompute not in ("full", "every-k"):
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
