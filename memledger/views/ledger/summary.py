"""The headline numbers above the Ledger chart, formatted for display (GiB = 2^30 bytes)."""
from __future__ import annotations

from dataclasses import dataclass

from memledger.ledger import Ledger
from memledger.specs.hardware import Hardware
from memledger.units import gib
from memledger.views.figures import fit
from memledger.views.peaks import peak_help, peak_label


@dataclass(frozen=True)
class Metric:
    label: str
    value: str
    delta: str | None = None
    delta_color: str = "normal"
    help: str = ""


def _count(n: int) -> str:
    if n >= 1e12:
        return f"{n / 1e12:.2f} T"
    return f"{n / 1e9:.1f} B" if n >= 1e9 else f"{n / 1e6:.0f} M"


def size(n_bytes: int, signed: bool = False) -> str:
    """GiB (2^30) with two decimals (as every peak label: views.peaks), or TiB (2^40) from 1,000 GiB on, so a metric stays short
    enough for its box on a phone."""
    sign = "+" if signed else ""
    if abs(n_bytes) >= 1000 * 2**30:
        return f"{n_bytes / 2**40:{sign}.2f} TiB"
    return f"{gib(n_bytes):{sign},.2f} GiB"


def metrics(led: Ledger, hw: Hardware) -> list[Metric]:
    v = fit(led, hw)
    peak = led.peak
    active = (f"{_count(led.n_active_params)} active" if led.n_active_params != led.n_params
              else None)
    out = [
        Metric("Parameters", _count(led.n_params), active, "off",
               "All parameters the framework instantiates (MoE: active = routed top-K only)."),
        Metric("Busiest GPU, peak total", size(peak.peak_total_bytes),
               f"pp rank {peak.pp_rank} of {led.parallel.pp}", "off",
               peak_help("total") + " The most loaded pipeline rank; "
               + peak_label("allocated", peak.peak_allocated_bytes) + "."),
        Metric("GPU capacity", f"{gib(hw.hbm_bytes):,.1f} GiB", hw.name, "off",
               "HBM the driver reports as total."),
        Metric("Headroom", size(v.headroom_bytes, signed=True),
               "fits" if v.fits else "over capacity", "normal" if v.fits else "inverse",
               "Capacity minus the peak of the most loaded rank."),
    ]
    return out + host_metric(peak)


def host_metric(rank) -> list[Metric]:
    """The static rows an offload keeps in host memory on the busiest GPU's host, and the PCIe
    bytes it costs per step; nothing without an offload."""
    h = rank.host
    if h is None or not h.host_bytes:
        return []
    return [Metric("In host memory", size(h.host_bytes),
                   f"{h.pcie_bytes_per_step / 1e9:,.1f} GB/step over PCIe", "off",
                   f"Static rows on the CPU, per GPU: optimizer {size(h.optimizer_bytes)}, "
                   f"gradients {size(h.gradient_bytes)}, weights {size(h.weight_bytes)}. PCIe "
                   f"per step: {h.params_up_bytes_per_step / 1e9:,.1f} GB up (parameters), "
                   f"{h.grads_down_bytes_per_step / 1e9:,.1f} GB down (gradients).")]


def table_rank(led: Ledger, requested: int) -> int:
    """The rank whose items the table lists: the requested one, or the most loaded."""
    return requested if 0 <= requested < len(led.ranks) else led.most_loaded_rank


def verdict(led: Ledger, hw: Hardware) -> tuple[bool, str]:
    v = fit(led, hw)
    return v.fits, v.sentence(hw.name)
