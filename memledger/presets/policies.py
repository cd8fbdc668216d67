"""Named activation-storage policies: a recompute structure plus per-class rules.

- megatron-selective: Megatron-Core selective recompute inside the transformer layers (the
  profile's selective classes — attention core, norm outputs, activation functions — re-run in
  backward; Korthikanti et al. 2022 §5) = `TrainSpec(recompute="selective")`. As explicit rules
  it would be {attn_core, norm_out, mlp_act, expert_act: recompute}, which differ only in also
  recomputing the head input on the last stage (rules apply wherever a class occurs).
- full-recompute: keep each layer's input only (TrainSpec recompute="full").
- deepseek-v3-fp8: DeepSeek-V3 technical report (arXiv 2412.19437) §3.2.3 and §3.3.3 — RMSNorm
  outputs and MLA up-projections are recomputed in backward, the SwiGLU output is recomputed
  from its cached input, and the inputs of the linears (attention output, expert inputs,
  SwiGLU inputs) are cached in FP8 with fine-grained 1×128 scaling.
- kimi-k2: Kimi K2 technical report (arXiv 2507.20534) §2.4.3 "activation reduction" —
  recompute the cheap, high-footprint stages (norms, SwiGLU, MLA up-projections), store the
  insensitive MoE up-projection / SwiGLU inputs in FP8-E4M3 1×128 tiles with fp32 scales, and
  offload all remaining activations to CPU memory, streamed by a copy engine under 1F1B.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from memledger.errors import lookup
from memledger.specs.policy import ActivationPolicy


@dataclass(frozen=True)
class PolicyPreset:
    name: str
    recompute: str  # the TrainSpec recompute structure it needs ("none" / "selective" / "full")
    rules: tuple[tuple[str, str], ...]
    source: str

    @property
    def policy(self) -> ActivationPolicy:
        return ActivationPolicy(rules=self.rules)


def _rules(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


POLICY_PRESETS: dict[str, PolicyPreset] = {
    p.name: p
    for p in (
        PolicyPreset("megatron-selective", "selective", (),
                     "Megatron-Core selective recompute (Korthikanti et al. 2022, arXiv 2205.05198 §5)"),
        PolicyPreset("full-recompute", "full", (),
                     "full activation recompute: layer inputs only (Chen et al. 2016; Megatron 'full')"),
        PolicyPreset("deepseek-v3-fp8", "none",
                     _rules(norm_out="recompute", mla_up="recompute", mlp_act="recompute",
                            expert_act="recompute", attn_out="fp8", expert_in="fp8",
                            mlp_fc1="fp8", expert_fc1="fp8"),
                     "DeepSeek-V3 report (arXiv 2412.19437) §3.2.3 recompute, §3.3.3 FP8 caching"),
        PolicyPreset("kimi-k2", "none",
                     _rules(norm_out="recompute", mla_up="recompute", mlp_act="recompute",
                            expert_act="recompute", expert_in="fp8", expert_fc1="fp8",
                            norm_in="offload-cpu", qkv="offload-cpu", attn_core="offload-cpu",
                            attn_out="offload-cpu", mlp_fc1="offload-cpu", router="offload-cpu",
                            expert_out="offload-cpu", mla_down="offload-cpu",
                            logits="offload-cpu"),
                     "Kimi K2 report (arXiv 2507.20534) §2.4.3 activation reduction"),
    )
}


def policy_preset(name: str) -> PolicyPreset:
    return lookup("policy_preset", POLICY_PRESETS, name)


def apply_policy(train, preset: str | None = None, rules: dict[str, str] | None = None):
    """A TrainSpec with the preset's recompute structure and rules, then `rules` on top."""
    t = train
    if preset:
        p = policy_preset(preset)
        t = replace(t, recompute=p.recompute, policy=p.policy)
    if rules:
        t = replace(t, policy=t.policy.with_rules(rules))
    return t
