"""ActivationPolicy: a storage policy per activation tensor class (docs/design.md §5, seed 1
"搬走一行，付一种货币").

A policy is data: a tuple of (class, policy) rules. Classes are the `ActTensor.cls` labels of the
inventories (norm_in, qkv, mlp_fc1, ...). A policy string is one of

  keep                      bytes as the profile says
  recompute                 0 bytes kept; re-run the producer in backward (pays FLOPs)
  fp8 | int8 | int4         store quantised with block scales (pays precision)
  offload-cpu | offload-pp  move to host memory over PCIe, or to a later pipeline rank's memory
                            over NVLink / the network (pays bandwidth)

and quantise + offload stack with '+': `fp8+offload-cpu`. Recompute stacks with nothing.
Classes without a rule are kept. Integer, index and mask tensors are never quantised (they are
not floating-point values), whatever the rule says.
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.errors import SpecError

# Classes the built-in profiles use (memledger/activations/megatron.py, paper.py).
CLASSES: dict[str, str] = {
    "norm_in": "norm inputs (the residual stream) and their fp32 statistics",
    "norm_out": "norm outputs = inputs of the next linear (QKV, MLP, router, head)",
    "qkv": "attention Q, K, V",
    "attn_core": "attention core: softmax statistics (flash) or probabilities (eager)",
    "attn_out": "attention output = input of the output projection",
    "mlp_fc1": "dense MLP fc1 (gate‖up) output = SwiGLU input",
    "mlp_act": "dense MLP activation (SwiGLU/GeLU) output = fc2 input",
    "router": "router scores, top-k indices and weights, the dispatcher's routing map and order",
    "expert_in": "permuted routed-token inputs of the experts",
    "expert_fc1": "expert fc1 output = expert SwiGLU input",
    "expert_act": "expert activation output = expert fc2 input",
    "expert_out": "expert outputs kept for the probability-weighted combine",
    "mla_down": "MLA compressed (down-projected) q / kv latents",
    "mla_up": "MLA up-projected Q, K, V",
    "logits": "fp32 logits / softmax kept for the loss",
    "embedding": "token ids of the embedding lookup",
    "layer_input": "layer inputs checkpointed by full / every-k recompute",
    "dropout": "dropout masks (paper profile)",
}

# Quantisation formats: name in the policy -> memledger.units format (scales included).
QUANT_FORMATS: dict[str, str] = {
    "fp8": "fp8-e4m3-1x128",
    "int8": "int8-block128",
    "int4": "int4-block64",
}
OFFLOAD_TARGETS: dict[str, str] = {
    "offload-cpu": "cpu",
    "offload-pp": "pp",
}
ATOMS = ("keep", "recompute") + tuple(QUANT_FORMATS) + tuple(OFFLOAD_TARGETS)


@dataclass(frozen=True)
class TensorPolicy:
    """What happens to one tensor: recompute, or keep (optionally quantised, optionally offloaded)."""

    recompute: bool = False
    quant: str | None = None  # a key of QUANT_FORMATS
    offload: str | None = None  # "cpu" or "pp"

    @classmethod
    def parse(cls, text: str, field: str = "policy") -> "TensorPolicy":
        atoms = [a.strip() for a in str(text).strip().lower().split("+")]
        bad = [a for a in atoms if a not in ATOMS]
        if bad or not atoms:
            raise SpecError(field, f"unknown policy {text!r}; valid: {', '.join(ATOMS)} "
                                   "(quantise and offload stack with '+', e.g. fp8+offload-cpu)")
        quants = [a for a in atoms if a in QUANT_FORMATS]
        offloads = [a for a in atoms if a in OFFLOAD_TARGETS]
        if "recompute" in atoms and len(atoms) > 1:
            raise SpecError(field, f"{text!r}: recompute stacks with nothing (nothing is stored)")
        if len(quants) > 1 or len(offloads) > 1 or ("keep" in atoms and len(atoms) > 1):
            raise SpecError(field, f"{text!r}: at most one format and one offload target, "
                                   "and 'keep' alone")
        return cls(recompute="recompute" in atoms, quant=quants[0] if quants else None,
                   offload=OFFLOAD_TARGETS[offloads[0]] if offloads else None)

    def __str__(self) -> str:
        if self.recompute:
            return "recompute"
        parts = ([self.quant] if self.quant else []) + (
            [f"offload-{self.offload}"] if self.offload else [])
        return "+".join(parts) or "keep"

    @property
    def quant_fmt(self) -> str | None:
        return QUANT_FORMATS[self.quant] if self.quant else None


KEEP = TensorPolicy()


@dataclass(frozen=True, kw_only=True)
class ActivationPolicy:
    """Rules (class, policy string), at most one per class; unlisted classes are kept."""

    rules: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if not isinstance(self.rules, tuple):
            raise SpecError("policy", f"rules must be a tuple of (class, policy) pairs, got "
                                      f"{type(self.rules).__name__}")
        seen = set()
        for rule in self.rules:
            if not (isinstance(rule, tuple) and len(rule) == 2):
                raise SpecError("policy", f"each rule is a (class, policy) pair, got {rule!r}")
            c, text = rule
            if c not in CLASSES:
                raise SpecError("policy", f"unknown tensor class {c!r}; valid: {', '.join(CLASSES)}")
            if c in seen:
                raise SpecError("policy", f"class {c!r} has two rules; give one")
            seen.add(c)
            TensorPolicy.parse(text, f"policy[{c}]")

    @classmethod
    def from_mapping(cls, mapping: dict[str, str]) -> "ActivationPolicy":
        return cls(rules=tuple(sorted((str(k), str(v)) for k, v in mapping.items())))

    def as_dict(self) -> dict[str, str]:
        return dict(self.rules)

    def get(self, tensor_class: str) -> TensorPolicy:
        for c, text in self.rules:
            if c == tensor_class:
                return TensorPolicy.parse(text)
        return KEEP

    def with_rules(self, mapping: dict[str, str]) -> "ActivationPolicy":
        """A new policy: these rules override. An explicit 'keep' stays: it also overrides
        selective recompute."""
        return ActivationPolicy.from_mapping({**self.as_dict(), **mapping})

    @property
    def uses_pp_offload(self) -> bool:
        return any(TensorPolicy.parse(t).offload == "pp" for _, t in self.rules)

    def __str__(self) -> str:
        return ", ".join(f"{c}={t}" for c, t in self.rules) or "keep all"


def parse_rules(texts) -> dict[str, str]:
    """['mlp_fc1=fp8', 'qkv=offload-cpu'] -> {class: policy}; messages name the bad entry."""
    out: dict[str, str] = {}
    for text in texts or ():
        if "=" not in text:
            raise SpecError("policy", f"expected CLASS=POLICY, got {text!r}")
        c, _, pol = text.partition("=")
        out[c.strip()] = pol.strip()
    ActivationPolicy.from_mapping(out)  # validate
    return out
