"""The activation row of one pipeline rank, and the activation-side transients.

Row = Σ over the rank's stages of (micro-batches in flight) × Σ over the stage's layers of the
layer's kept tensors, plus the first/last-stage tensors (DESIGN.md §5–6). Recompute modes:
  none       keep every tensor of the profile
  selective  drop the profile's selective classes (re-run in backward)
  full       keep each layer's input only; one layer's full inventory becomes a transient
  every-k    keep the input of every k-th layer (Chen et al. 2016, k = ⌈√L⌉ by default);
             k layers' full inventory becomes a transient
Ignores: the in-flight gradient of the activation being back-propagated (one tensor at a time).
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache

from .activations import get_profile
from .activations.inventory import ActTensor, formula, tensor_bytes
from .items import Item
from .params import layer_kind
from .schedules import stage_layers
from .specs.model import ModelSpec
from .specs.parallel import ParallelSpec
from .specs.train import TrainSpec

SRC = {"megatron": "Megatron-Core + TE saved tensors (DESIGN.md §5)",
       "paper": "Korthikanti et al. 2022 (arXiv 2205.05198) §4",
       "hf": "traced from Hugging Face transformers modules"}


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


def checkpoints(m: ModelSpec, p: ParallelSpec, t: TrainSpec, flights) -> int:
    """Layer inputs kept (× micro-batches) under every-k: ⌈layers/k⌉ per stage."""
    stages = stage_layers(m, p)
    k = t.checkpoint_every(m.n_layers)
    return sum(n * -(-len(stages[s]) // k) for s, n in flights)


def activation_items(m, p, t, flights, first: int, last: int) -> list[Item]:
    """Items of the activation row. `first`/`last`: micro-batches of the first/last stage held
    on this rank (0 if it does not hold that stage)."""
    src = SRC.get(t.profile, f"profile {t.profile}")
    prof = get_profile(t.profile)
    items: list[Item] = []
    lmb = layer_micro_batches(m, p, flights)
    if t.recompute in ("full", "every-k"):
        x = prof.layer_input(m, t, p)
        n = sum(lmb.values()) if t.recompute == "full" else checkpoints(m, p, t, flights)
        if n:
            items.append(Item("activations", f"checkpointed {x.name}", tensor_bytes(x, m, t, p) * n,
                              f"{n} layer-micro-batches × {formula(x, m, t, p)} ({t.recompute} recompute)", src))
    else:
        for kind in ("dense", "moe"):
            n = lmb.get(kind, 0)
            if not n:
                continue
            for name, b, f in kept_tensors(m, kind, t, p):
                items.append(Item("activations", f"{kind} layers / {name}", b * n,
                                  f"{n} layer-micro-batches × {f}", src))
    for held, tensors in ((first, prof.first_stage(m, t, p)), (last, prof.last_stage(m, t, p))):
        for x in tensors if held else ():
            items.append(Item("activations", x.name, tensor_bytes(x, m, t, p) * held,
                              f"{held} micro-batches × {formula(x, m, t, p)}", src))
    return items


def activation_transients(m, p, t, flights, holds_last: bool) -> list[Item]:
    """Candidates for the largest transient during forward/backward (one micro-batch each)."""
    out = []
    kinds = {k for k, n in layer_micro_batches(m, p, flights).items() if n}
    if t.recompute in ("full", "every-k") and kinds:
        span = 1 if t.recompute == "full" else t.checkpoint_every(m.n_layers)
        worst = max(layer_bytes(m, k, t, p) for k in kinds)
        out.append(Item("runtime", f"recompute working set ({span} layer{'s' * (span > 1)})",
                        worst * span, f"{span} × one layer's full inventory, one micro-batch",
                        "DESIGN.md §5 (full / every-k recompute)"))
    if holds_last:
        for x in get_profile(t.profile).transients(m, t, p):
            out.append(Item("runtime", x.name, tensor_bytes(x, m, t, p),
                            f"one micro-batch × {formula(x, m, t, p)}", SRC.get(t.profile, t.profile)))
    return out
