"""Fine-tuning on the static rows: which held groups train, the adapters, the base's format.

Rules (FinetuneSpec in specs/finetune.py; each row's bytes then follow static/rows.py):
- lora / qlora: every base parameter is frozen (peft `_mark_only_adapters_as_trainable`,
  peft/tuners/tuners_utils.py) except the embeddings / head when trained (peft
  modules_to_save: the original stays frozen and a trainable copy is added —
  peft/utils/other.py ModulesToSaveWrapper, so the weights row holds both).
- Adapters per target linear of shape in x out (Hu et al. 2021 §4.1; peft/tuners/lora/layer.py
  update_layer): A = r x in, B = out x r, in `lora_dtype` (peft casts bf16/fp16 adapters to fp32
  unless autocast_adapter_dtype=False: peft/tuners/tuners_utils.py cast_adapter_dtype); an fp32
  adapter is its own master and keeps fp32 gradients and states.
- Tensor parallelism (Megatron-Bridge LoRA, megatron/bridge/peft/lora_layers.py): on a
  column-parallel linear (q, k, v, gate, up) A is replicated and B split over tp; on a
  row-parallel one (o, down) A is split and B replicated; on routed experts both follow the
  expert (ep · etp).
- qlora: the base's linear matrices are stored in the quantised format (bitsandbytes
  replace_with_bnb_linear replaces nn.Linear modules only: transformers/integrations/
  bitsandbytes.py), the rest (embeddings, norms, head, and transformers 5's fused routed
  experts and router, which are nn.Parameter, not nn.Linear) in `compute_dtype`.
- freeze: the named modules and every parameter of the layer ranges are frozen; in lora mode a
  layer range gets no adapters (peft layers_to_transform).
Frozen parameters keep their sharding: ZeRO-3 / FSDP still shard their weights (rows.py).
Ignores: DoRA's magnitude vectors, adapters on embeddings, biases of adapters (peft: none).
"""
from __future__ import annotations

from dataclasses import replace

from memledger.ledger.static.rows import Held
from memledger.model.params import ParamGroup
from memledger.specs.finetune import FinetuneSpec
from memledger.specs.model import ModelSpec

# Each parameter group (memledger.model.params) as the module pieces it is made of.
_HALVES = {"attn.kv": ("k", "v"), "mlp.fc1": ("gate", "up"), "shared.fc1": ("gate", "up"),
           "experts.fc1": ("gate", "up")}
_COLUMN = ("attn.q", "attn.kv", "attn.q_up", "attn.kv_up", "mlp.fc1", "shared.fc1")
_ROW = ("attn.o", "mlp.fc2", "shared.fc2")
# Vectors and biases freeze with the module they belong to (freeze names, specs/finetune.py).
_OWNER = {"attn.qkv_bias": ("attn.q", "attn.kv:k", "attn.kv:v"), "attn.o_bias": ("attn.o",),
          "mlp.fc1_bias": ("mlp.fc1",), "mlp.fc2_bias": ("mlp.fc2",),
          "shared.fc1_bias": ("shared.fc1",), "shared.fc2_bias": ("shared.fc2",),
          "moe.shared_gate": ("moe.router",)}
_NORMS = ("norm.attn", "norm.mlp", "attn.qk_norm", "attn.q_norm", "attn.kv_norm", "final_norm",
          "mtp.norms")


def piece_key(name: str) -> str:
    """A group's name as the pieces of specs/finetune.MODULES name it."""
    for pre, key in (("moe.experts.", "experts."), ("moe.shared.", "shared."), ("mtp.", "")):
        if name.startswith(pre) and name != "mtp.norms":
            return piece_key(key + name[len(pre):])
    return name


def _selected(key: str, pieces: frozenset[str]) -> tuple[str, ...]:
    """The halves of group `key` named by `pieces` ("" = the whole group)."""
    if key in pieces:
        return ("",)
    return tuple(h for h in _HALVES.get(key, ()) if f"{key}:{h}" in pieces)


def _named(piece: str, names: frozenset[str]) -> bool:
    return piece in names or piece.split(":")[0] in names


def frozen_by_name(g: ParamGroup, section: str, spec: FinetuneSpec) -> bool:
    """Whether `freeze` names this whole group (a half named alone splits it: `split`)."""
    names, key = spec.frozen_pieces, piece_key(g.name)
    if g.name in ("embedding", "pos_embedding"):  # also the MTP modules' embedding copy
        return "embeddings" in names
    if g.name == "head":
        return "head" in names
    if "layers" in names and (section.endswith("layers") or section == "mtp"):
        return True
    if key in _NORMS:
        return "norms" in names
    if key in _OWNER:
        return all(_named(o, names) for o in _OWNER[key])
    halves = _HALVES.get(key)
    return key in names or (halves is not None and all(f"{key}:{x}" in names for x in halves))


def split(g: ParamGroup, halves: tuple[str, ...]) -> list[tuple[ParamGroup, str]]:
    """A fused group (k/v, gate/up) as two halves when only some are named."""
    if halves in ((), ("",)) or g.name.split(".")[-1] not in ("kv", "fc1"):
        return [(g, "")]
    half = replace(g, count=g.count // 2)
    return [(replace(half, name=f"{g.name}:{h}"), h) for h in _HALVES[piece_key(g.name)]]


def adapter_groups(g: ParamGroup, spec: FinetuneSpec) -> list[ParamGroup]:
    """A (r x in) and B (out x r) for every matrix of group g (rows = in, cols = out)."""
    r, key = spec.lora_rank, piece_key(g.name.split(":")[0])
    n = max(1, g.count // (g.rows * g.cols))
    if g.expert:
        a_shard = b_shard = "expert"
    elif key in _COLUMN:
        a_shard, b_shard = "replicated", "tp"
    elif key in _ROW:
        a_shard, b_shard = "tp", "replicated"
    else:
        a_shard = b_shard = "replicated"
    fp32 = spec.lora_dtype == "fp32"
    store = None if fp32 else spec.lora_dtype
    return [ParamGroup(f"{g.name}.lora_A", n * r * g.rows, a_shard, True, g.rows, r, fp32,
                       store=store),
            ParamGroup(f"{g.name}.lora_B", n * g.cols * r, b_shard, True, r, g.cols, fp32,
                       store=store)]


def base_store(g: ParamGroup, section: str, spec: FinetuneSpec) -> str | None:
    """The frozen base's storage format (None: the recipe's)."""
    if spec.mode != "qlora" or not g.matrix or not section.endswith("layers") or g.expert \
            or piece_key(g.name) == "moe.router":
        return spec.compute_dtype if spec.mode == "qlora" and not g.fp32 else None
    if spec.base_weights == "nf4":
        return f"nf4:{spec.nf4_block}:{spec.dq_block if spec.double_quant else 0}"
    return f"{spec.base_weights}row:{g.rows}"


def _lora_section(h: Held, spec: FinetuneSpec, adapt: bool) -> list[Held]:
    out: list[Held] = []
    g = h.group
    trained = (h.section == "embedding" and spec.train_embeddings and g.name == "embedding") or \
              (h.section == "head" and spec.train_head and g.name == "head")
    if trained:  # modules_to_save: the frozen original plus a trainable copy
        return [Held(h.section, replace(g, frozen=True), h.instances),
                Held(h.section, replace(g, name=f"{g.name} (trained copy)"), h.instances)]
    store = base_store(g, h.section, spec)
    halves = _selected(piece_key(g.name), spec.target_pieces) if adapt else ()
    for piece, half in split(g, halves):
        out.append(Held(h.section, replace(piece, frozen=True, store=store), h.instances))
        if adapt and g.matrix and (half in halves or halves == ("",)):
            out += [Held(h.section, a, h.instances) for a in adapter_groups(piece, spec)]
    return out


def _freeze_section(h: Held, spec: FinetuneSpec) -> list[Held]:
    g, names = h.group, spec.frozen_pieces
    if frozen_by_name(g, h.section, spec):
        return [Held(h.section, replace(g, frozen=True), h.instances)]
    halves = _selected(piece_key(g.name), names)
    return [Held(h.section, replace(piece, frozen=bool(half)), h.instances)
            for piece, half in split(g, halves)]


def finetune_held(held: list[Held], spec: FinetuneSpec, frozen_layers: dict[str, int]) -> list[Held]:
    """The held groups under `spec`. `frozen_layers`: per section, how many of its layer
    instances fall in a frozen layer range (their groups are named "... (frozen layers)")."""
    if spec.mode == "full":
        return held
    out: list[Held] = []
    for h in held:
        k = frozen_layers.get(h.section, 0)
        if h.instances > k:
            live = Held(h.section, h.group, h.instances - k)
            out += _lora_section(live, spec, True) if spec.adapters else _freeze_section(live, spec)
        if k:
            g = h.group
            store = base_store(g, h.section, spec) if spec.adapters else None
            out.append(Held(h.section, replace(g, name=f"{g.name} (frozen layers)", frozen=True,
                                               store=store), k))
    return out


def frozen_layer_counts(m: ModelSpec, layers: list[int], spec: FinetuneSpec) -> dict[str, int]:
    """Per "dense layers" / "moe layers": held layers that a frozen range covers."""
    ranges = spec.frozen_ranges
    out: dict[str, int] = {}
    for i in layers:
        if any(lo <= i <= hi for lo, hi in ranges):
            key = f"{'moe' if m.is_moe_layer(i) else 'dense'} layers"
            out[key] = out.get(key, 0) + 1
    return out


def live_pieces(m: ModelSpec, kind: str, spec: FinetuneSpec) -> tuple[frozenset[str], tuple]:
    """Of one live layer of `kind`: the base pieces that train (a fused group's halves named
    "attn.kv:k"), and the adapted matrices as (piece, in, n matrices, expert)."""
    from memledger.model.params import layer_groups
    helds = finetune_held([Held(f"{kind} layers", g, 1) for g in layer_groups(m, kind)], spec, {})
    trains = frozenset(piece_key(h.group.name) for h in helds
                       if not h.group.frozen and ".lora_" not in h.group.name)
    adapted = tuple((piece_key(h.group.name[:-len(".lora_A")]), h.group.rows,
                     h.group.count // (h.group.rows * h.group.cols), h.group.expert)
                    for h in helds if h.group.name.endswith(".lora_A"))
    return trains, adapted


def check_finetune(m: ModelSpec, spec: FinetuneSpec) -> None:
    """Targets and frozen names the model has, a rank no larger than a target's width, and
    layer ranges inside the model; SpecError naming the field and the valid values."""
    from memledger.errors import SpecError
    from memledger.model.params import layer_groups
    kinds = ("dense", "moe") if m.moe is not None else ("dense",)
    groups = [g for k in kinds for g in layer_groups(m, k)]
    have = {piece_key(g.name) for g in groups}
    have |= {f"{k}:{h}" for k in have for h in _HALVES.get(k, ())}
    from memledger.specs.finetune import MODULES, TARGET_SETS
    valid = sorted(n for n, ps in MODULES.items() if any(p in have for p in ps))
    for field, names in (("lora_targets", spec.lora_targets if spec.adapters else ()),
                         ("freeze", spec.freeze)):
        for n in names:
            if n in TARGET_SETS or n in ("embeddings", "head", "norms", "layers") or ":" in n:
                continue
            if not any(p in have for p in MODULES[n]):
                raise SpecError(field, f"{field} names {n!r}, a module model {m.name!r} does "
                                       f"not have; valid: {', '.join(valid + list(TARGET_SETS))}")
    for lo, hi in spec.frozen_ranges:
        if hi >= m.n_layers:
            raise SpecError("freeze", f"layer range {lo}-{hi} is outside the model's layers "
                                      f"0-{m.n_layers - 1}")
    if spec.adapters:
        widths = [min(g.rows, g.cols) for g in groups if g.matrix and
                  _selected(piece_key(g.name), spec.target_pieces)]
        if not widths:
            raise SpecError("lora_targets", f"none of {', '.join(spec.lora_targets)} is a linear "
                                            f"of model {m.name!r}; valid: {', '.join(valid)}")
        if spec.lora_rank > min(widths):
            raise SpecError("lora_rank", f"rank {spec.lora_rank} exceeds the narrowest target's "
                                         f"width {min(widths)}; valid: 1..{min(widths)}")
