"""The activation row of one pipeline rank, and the activation-side transients.

Row = Σ over the rank's stages of (micro-batches in flight) × Σ over the stage's layers of the
layer's kept tensors, plus the first/last-stage tensors (DESIGN.md §5–6). Recompute structures:
  none       keep every tensor of the profile (subject to the storage policy)
  selective  drop the profile's selective classes inside the layers (re-run in backward)
  full       keep each layer's input only; one layer's full inventory becomes a transient
  every-k    keep the input of every k-th layer (Chen et al. 2016, k = ⌈√L⌉ by default);
             k layers' full inventory becomes a transient
On top, `TrainSpec.policy` sets a storage policy per tensor class (memledger.act_policy): every
tensor becomes a TensorMove (bytes kept, moved, FLOPs and bits paid) and the row lists its kept
bytes. Offloaded tensors need a staging buffer of two layers' offloaded bytes on the GPU.
Ignores: the in-flight gradient of the activation being back-propagated (one tensor at a time).
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache

from .act_policy import TensorMove, _decision, decide
from .activations import get_profile
from .activations.inventory import ActTensor, formula, tensor_bytes
from .flops import layer_forward_flops_per_token
from .items import Item
from .params import layer_groups, padded_vocab
from .sharding import shard_divisor
from .units import format_bytes
from .params import layer_kind
from .schedules import stage_layers
from .specs.model import ModelSpec
from .specs.parallel import ParallelSpec
from .specs.train import TrainSpec

SRC = {"megatron": "Megatron-Core + TE saved tensors (DESIGN.md §5)",
       "paper": "Korthikanti et al. 2022 (arXiv 2205.05198) §4",
       "hf": "traced from Hugging Face transformers modules"}
KINDS = ("dense", "moe")


@lru_cache(maxsize=4096)
def layer_tensors(m: ModelSpec, kind: str, t: TrainSpec, p: ParallelSpec) -> tuple[tuple[ActTensor, int], ...]:
    """(tensor, bytes per micro-batch on this rank) for one layer of `kind`, before recompute."""
    prof = get_profile(t.profile)
    return tuple((x, tensor_bytes(x, m, t, p)) for x in prof.layer(m, kind, t, p))


def layer_bytes(m: ModelSpec, kind: str, t: TrainSpec, p: ParallelSpec) -> int:
    return sum(b for _, b in layer_tensors(m, kind, t, p))


@lru_cache(maxsize=4096)
def kept_tensors(m, kind, t, p) -> tuple[tuple[str, int, str], ...]:
    """(name, bytes per micro-batch, formula) of the tensors a layer keeps under `none` or
    `selective` recompute (full/every-k are handled by the caller)."""
    tensors = layer_tensors(m, kind, t, p)
    if t.recompute == "selective":
        dropped = get_profile(t.profile).selective
        tensors = tuple((x, b) for x, b in tensors if x.cls not in dropped)
    return tuple((x.name, b, formula(x, m, t, p)) for x, b in tensors)


def layer_micro_batches(m: ModelSpec, p: ParallelSpec, flights) -> Counter:
    """Σ over stages of (micro-batches in flight × layers of each kind in the stage)."""
    stages = stage_layers(m, p)
    out = Counter()
    for stage, n in flights:
        for i in stages[stage]:
            out[layer_kind(m, i)] += n
    return out


def layers_per_micro_batch(m: ModelSpec, p: ParallelSpec, flights) -> Counter:
    """Layers of each kind one micro-batch passes through on this rank (all its stages)."""
    return layer_micro_batches(m, p, tuple((s, 1) for s, _ in flights))


def checkpoints(m: ModelSpec, p: ParallelSpec, t: TrainSpec, flights) -> int:
    """Layer inputs kept (× micro-batches) under every-k: ⌈layers/k⌉ per stage."""
    stages = stage_layers(m, p)
    k = t.checkpoint_every(m.n_layers)
    return sum(n * -(-len(stages[s]) // k) for s, n in flights)


def _layer_recompute_flops(m, kind, t, p) -> int:
    """Forward FLOPs of one layer for one micro-batch on this rank (re-run by full recompute)."""
    tokens = t.micro_batch * t.seq
    return layer_forward_flops_per_token(m, kind, t.seq) * tokens // (p.tp * p.cp)


def _structural_moves(m, p, t, flights) -> list[TensorMove]:
    """full / every-k: each layer's inventory is recomputed; its input is checkpointed."""
    src = get_profile(t.profile)
    lmb, per_mb = layer_micro_batches(m, p, flights), layers_per_micro_batch(m, p, flights)
    x = src.layer_input(m, t, p)
    if t.recompute == "full":
        n, n_mb = sum(lmb.values()), sum(per_mb.values())
    else:
        n, n_mb = checkpoints(m, p, t, flights), checkpoints(m, p, t, tuple((s, 1) for s, _ in flights))
    out = []
    if n:
        mv = decide(x, m, t, p, section="checkpoints", copies=n, per_mb=n_mb, in_layer=False,
                    base_formula=f"{n} layer-micro-batches × {formula(x, m, t, p)} ({t.recompute} recompute)")
        out.append(mv._replace(native_bytes=0))  # added by the recompute
    for kind in KINDS:
        if lmb.get(kind):
            out.append(TensorMove(
                section=f"{kind} layers", tensor="layer inventory", cls="*",
                policy=f"recompute ({t.recompute})", copies=lmb[kind], per_micro_batch=per_mb[kind],
                native_bytes=layer_bytes(m, kind, t, p), stored_bytes=0, gpu_bytes=0,
                recompute_flops=_layer_recompute_flops(m, kind, t, p),
                producer_flops=_layer_recompute_flops(m, kind, t, p),
                formula=f"{t.recompute} recompute re-runs each layer's forward in backward"))
    return out


@lru_cache(maxsize=4096)
def kind_decisions(m, kind: str, t, p) -> tuple:
    """(tensor, storage decision, formula) for every tensor of one layer of `kind` — the same on
    every rank and layer, so computed once."""
    return tuple((x, _decision(x, m, t, p, True), formula(x, m, t, p))
                 for x, _ in layer_tensors(m, kind, t, p))


def activation_moves(m, p, t, flights, first: int, last: int, chunked_loss: bool = False) -> list[TensorMove]:
    """Every saved tensor of the rank and its storage decision. `first`/`last`: micro-batches of
    the first/last stage held on this rank (0 if it does not hold that stage). chunked_loss: a
    fused linear cross-entropy (Liger) keeps no logits-sized tensor (class "logits")."""
    prof = get_profile(t.profile)
    if t.recompute in ("full", "every-k"):
        moves = _structural_moves(m, p, t, flights)
    else:
        moves = []
        lmb, per_mb = layer_micro_batches(m, p, flights), layers_per_micro_batch(m, p, flights)
        for kind in KINDS:
            n = lmb.get(kind, 0)
            for x, (pol, native, stored, gpu, bits, off, producer, paid, pre, suf), f in (
                    kind_decisions(m, kind, t, p) if n else ()):
                moves.append(TensorMove(
                    section=f"{kind} layers", tensor=x.name, cls=x.cls, policy=pol, copies=n,
                    per_micro_batch=per_mb[kind], native_bytes=native, stored_bytes=stored,
                    gpu_bytes=gpu, recompute_flops=paid, producer_flops=producer, bits_lost=bits,
                    offload=off, formula=f"{pre}{n} layer-micro-batches × {f}{suf}"))
    for section, held, tensors in (("first stage", first, prof.first_stage(m, t, p)),
                                   ("last stage", last, prof.last_stage(m, t, p))):
        for x in tensors if held else ():
            if chunked_loss and x.cls == "logits":
                continue
            moves.append(decide(x, m, t, p, section=section, copies=held, per_mb=1, in_layer=False,
                                base_formula=f"{held} micro-batches × {formula(x, m, t, p)}"))
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


STAGING = {"cpu": "offload staging buffers", "pp": "remote offload staging buffers"}


def activation_items(m, p, t, flights, first: int, last: int, moves=None) -> list[Item]:
    """Items of the activation row (recomputed tensors have none; offloaded ones show 0 bytes)."""
    src = SRC.get(t.profile, f"profile {t.profile}")
    moves = activation_moves(m, p, t, flights, first, last) if moves is None else moves
    items = [Item("activations", item_name(mv), mv.gpu_total, mv.formula, src)
             for mv in moves if mv.stored_bytes or mv.gpu_bytes]
    for target, name in STAGING.items():
        staging = staging_bytes(moves, target)
        if staging:
            items.append(Item("activations", name, staging,
                              "2 × one layer's offloaded bytes (write-out + prefetch)",
                              "Megatron-Core / Kimi K2 §2.4.3 activation offloading"))
    cast = autocast_copies(m, p, t, flights, last)
    if cast is not None:
        items.append(cast)
    return items


def autocast_copies(m, p, t, flights, last: int) -> Item | None:
    """Recipe amp (fp32 weights, torch.autocast to bf16): every matmul reads a bf16 cast of its
    fp32 weight and saves that cast for backward — one copy per micro-batch in flight. Routed
    experts (transformers' grouped_mm is not autocast-enabled), fp32-kept routers and the
    embedding lookup are not cast; under full/every-k recompute the layers' casts are re-made in
    backward and only the head's stays. Measured on an H200: 1,641,021,440 bytes for a 0.8B
    Llama (exactly its non-embedding matrices × 2 bytes)."""
    r = t.recipe
    if not (r.weight_fmt == "fp32" and r.act_fmt in ("bf16", "fp16")):
        return None
    n = 0
    if t.recompute not in ("full", "every-k"):
        for kind, copies in layer_micro_batches(m, p, flights).items():
            n += copies * sum(-(-g.count // shard_divisor(g, p)) for g in layer_groups(m, kind)
                              if g.matrix and not g.expert and not g.fp32)
    if last and m.vocab:
        n += last * -(-padded_vocab(m, p.tp, t.pad_multiple()) // p.tp) * m.hidden
    if not n:
        return None
    return Item("activations", "autocast weight casts", format_bytes(r.act_fmt, n),
                f"{n} matrix params held as {r.act_fmt} casts (per micro-batch in flight)",
                "torch.autocast weight cast saved by each matmul (measured, H200)")


def activation_transients(m, p, t, flights, holds_last: bool, moves=None) -> list[Item]:
    """Candidates for the largest transient during forward/backward (one micro-batch each)."""
    out = []
    kinds = {k for k, n in layer_micro_batches(m, p, flights).items() if n}
    if t.recompute in ("full", "every-k") and kinds:
        span = 1 if t.recompute == "full" else t.checkpoint_every(m.n_layers)
        worst = max(layer_bytes(m, k, t, p) for k in kinds)
        out.append(Item("runtime", f"recompute working set ({span} layer{'s' * (span > 1)})",
                        worst * span, f"{span} × one layer's full inventory, one micro-batch",
                        "DESIGN.md §5 (full / every-k recompute)"))
    policy_set = _policy_recompute_set(t, moves or [])
    if policy_set:
        out.append(Item("runtime", "recompute working set (policy, one layer)", policy_set,
                        "one layer's tensors recomputed by the policy (selective classes excluded: "
                        "re-created op by op inside fused kernels)", "memledger.act_policy"))
    forward = [autocast_cache(m, p, t, flights)]
    for x in get_profile(t.profile).transients(m, t, p) if holds_last else ():
        item = Item("runtime", x.name, tensor_bytes(x, m, t, p),
                    f"one micro-batch × {formula(x, m, t, p)}", SRC.get(t.profile, t.profile))
        (forward if x.cls == "forward" else out).append(item)
    forward = [i for i in forward if i is not None and i.bytes]
    if forward:  # alive together at the end of the forward pass: one working set
        out.append(Item("runtime", "forward working set: " + " + ".join(i.name for i in forward),
                        sum(i.bytes for i in forward), "; ".join(i.formula for i in forward),
                        forward[-1].source))
    return out


def autocast_cache(m, p, t, flights) -> Item | None:
    """Under amp with full/every-k recompute the matmuls' bf16 weight casts are not saved, but
    torch.autocast's cast cache holds every one of them until the forward's autocast region
    ends: the rank's layer casts, once (found on the H200: forward peak 1.4 GiB over the
    backward one for a 0.8B Llama at 4k tokens)."""
    r = t.recipe
    if not (r.weight_fmt == "fp32" and r.act_fmt in ("bf16", "fp16")) or t.recompute not in ("full", "every-k"):
        return None
    kinds = {k: 1 for k, n in layer_micro_batches(m, p, flights).items() if n}
    per_kind = layer_counts(m, p, flights)
    n = sum(per_kind[k] * sum(-(-g.count // shard_divisor(g, p)) for g in layer_groups(m, k)
                              if g.matrix and not g.expert and not g.fp32) for k in kinds)
    return Item("runtime", "autocast weight-cast cache", format_bytes(r.act_fmt, n),
                f"{n} matrix params of this rank's layers as {r.act_fmt} casts",
                "torch.autocast cast cache (cleared when the autocast region exits)")


def layer_counts(m, p, flights) -> Counter:
    """Layers of each kind held on the rank (whatever the micro-batches in flight)."""
    return layer_micro_batches(m, p, tuple((s, 1) for s, _ in flights))


def _policy_recompute_set(t: TrainSpec, moves: list[TensorMove]) -> int:
    selective = get_profile(t.profile).selective
    per_layer = Counter()
    for mv in moves:
        if mv.policy == "recompute" and mv.cls not in selective and mv.section.endswith("layers"):
            per_layer[mv.section] += mv.native_bytes
    return max(per_layer.values(), default=0)


def rank_recompute_flops_per_micro_batch(moves: list[TensorMove]) -> int:
    return sum(mv.recompute_flops_per_micro_batch for mv in moves)
