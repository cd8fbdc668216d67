"""The ledgers a page needs, from a configuration, memoised per process.

A configuration and a model are frozen values, so a slider dragged back to where it was costs
nothing. Pure (no Streamlit): pages call these and never `build_ledger` with their own specs.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from memledger.costs.textbook import SEED_EXAMPLES
from memledger.ledger import Ledger, build_ledger
from memledger.model.params import n_params
from memledger.presets.policies import apply_policy
from memledger.specs import ModelSpec, ParallelSpec, TrainSpec
from memledger.specs.runtime import RuntimeSpec
from memledger.views.budget import LEDGER_CACHE_BYTES, byte_lru, ledger_bytes
from memledger.views.options import problem, with_value
from memledger.views.state import Config, hardware, runtime, to_specs


@byte_lru(LEDGER_CACHE_BYTES, ledger_bytes)  # by bytes: a 1,280-rank ledger is ~25 MB
def ledger_for(m: ModelSpec, cfg: Config) -> Ledger:
    """The ledger of a valid configuration (raises SpecError on an invalid one)."""
    par, train = to_specs(cfg, m)
    return build_ledger(m, par, train, runtime(cfg), hardware=hardware(cfg))


@byte_lru(LEDGER_CACHE_BYTES // 4, ledger_bytes)
def policy_ledger(m: ModelSpec, cfg: Config, a2a: str = "dynamic", preset: str | None = None,
                  rules: tuple[tuple[str, str], ...] = ()) -> Ledger:
    """The configuration with an MoE all-to-all sizing and a storage policy: the preset's
    recompute structure and rules, then `rules` on top. Raises SpecError when the policy is not
    valid here (e.g. offload to later ranks without pipeline parallelism)."""
    par, train = to_specs(cfg, m)
    return build_ledger(m, par, apply_policy(train, preset, dict(rules)), runtime(cfg, a2a=a2a),
                        hardware(cfg))


def schedule_ledgers(m: ModelSpec, cfg: Config,
                     schedules) -> tuple[dict[str, Ledger], dict[str, str]]:
    """The same configuration under each schedule (vpp lifted to 2 for interleaved), and the
    core's reason for every schedule that is not valid here."""
    ledgers, skipped = {}, {}
    for s in schedules:
        alt = with_value(cfg, "schedule", s)
        err = problem(m, alt)
        if err is None:
            ledgers[s] = ledger_for(m, alt)
        else:
            skipped[s] = str(err)
    return ledgers, skipped


@lru_cache(maxsize=64)
def single_gpu_activations(m: ModelSpec, cfg: Config) -> tuple[int, int]:
    """Activation bytes of one micro-batch through the whole model with no parallelism, in
    seed 2's mixed precision and in fp32 (what 'activations' means in the 16N picture)."""
    out = []
    for precision in ("mixed16", "fp32"):
        train = TrainSpec(micro_batch=cfg.mb, seq=cfg.seq, micro_batches=1, precision=precision,
                          profile=cfg.profile, attention=cfg.attention)
        led = build_ledger(m, ParallelSpec(), train)
        out.append(led.ranks[0].rows["activations"])
    return out[0], out[1]


@dataclass(frozen=True)
class Sizing:
    """What the 'where memory goes' page draws: a name, N, L and (for a real model) the
    activation bytes of one micro-batch in mixed precision and in fp32."""

    name: str
    n_params: int
    n_layers: int
    act_mixed: int | None
    act_fp32: int | None


def sizing(m: ModelSpec, cfg: Config, size: str) -> Sizing:
    if size in SEED_EXAMPLES:
        label, n, layers = SEED_EXAMPLES[size]
        return Sizing(label, n, layers, None, None)
    mixed, fp32 = single_gpu_activations(m, cfg)
    return Sizing(m.name, n_params(m), m.n_layers, mixed, fp32)
