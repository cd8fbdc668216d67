"""A case's activation checkpointing as torchtitan's trainer config: 0.3's SelectiveAC (op),
FullAC or none, and 0.2's layer interval, built from 0.3's own AC classes.

0.2's `mode = "selective"` with `selective_ac_option = "<k>"` wraps every k-th transformer block
in `ptd_checkpoint_wrapper` (full recomputation) and leaves the others alone; the count is one
module-level counter over every block the process wraps, 1-based, so with PP it runs on across
a rank's model parts (0.2 distributed/activation_checkpoint.py `_apply_layer_sac`:
`_layer_sac_count += 1; if not ac_freq or _layer_sac_count % ac_freq == 0: wrap`). 0.3 dropped
the option; its `FullAC._wrap_block` is the same wrapper, so the harness keeps 0.3's wrapper and
settings and only chooses the blocks as 0.2 did. One counter per case: `interval_ac` starts it,
as a fresh 0.2 process would.
Ignores: 0.2's `preserve_rng_state=False` default against 0.3's True (the RNG state it stashes
is a few bytes of host memory).
"""
from __future__ import annotations

_COUNT = [0]  # 0.2's module-level _layer_sac_count, per case


def ac_config(case):
    """The trainer's activation_checkpoint config for `case.ac`."""
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    if case.ac == "interval":
        return interval_ac(case.ac_every)
    return {"selective": SelectiveAC.Config, "full": FullAC.Config,
            "none": lambda: None}[case.ac]()


def interval_ac(every: int):
    """The trainer's activation_checkpoint config for 0.2's interval `every` (k >= 1)."""
    from dataclasses import dataclass

    from torchtitan.distributed.activation_checkpoint import FullAC

    class IntervalAC(FullAC):
        """FullAC on every `every`-th block the process wraps (0.2's layer SAC)."""

        @dataclass(kw_only=True, slots=True)
        class Config(FullAC.Config):
            every: int = 2

        def apply(self, model) -> None:
            layers = model.get_submodule("layers")
            for layer_id, block in list(layers.named_children()):
                _COUNT[0] += 1
                if _COUNT[0] % self.config.every == 0:
                    layers.register_module(layer_id, self._wrap_block(
                        block, base_fqn=f"layers.{layer_id}"))

    _COUNT[0] = 0
    return IntervalAC.Config(every=every)
