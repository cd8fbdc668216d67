"""Hardware: one GPU kind and the links around it. Bandwidths are bytes/s per direction."""
from __future__ import annotations

from dataclasses import dataclass

from memledger.errors import require, require_positive


@dataclass(frozen=True, kw_only=True)
class Hardware:
    name: str
    hbm_bytes: int
    bf16_flops: int  # dense bf16 FLOP/s (vendor figure)
    hbm_bw: int
    nvlink_bw: int  # 0 = no NVLink (PCIe / Infinity Fabric only, see note)
    pcie_bw: int
    network_bw: int  # per GPU (one NIC each)
    gpus_per_node: int = 8
    fp8_flops: int = 0  # dense fp8 FLOP/s (vendor figure); 0 = no fp8 tensor cores
    source: str = ""

    def __post_init__(self):
        for f in ("hbm_bytes", "bf16_flops", "hbm_bw", "pcie_bw", "network_bw", "gpus_per_node"):
            require_positive(f, getattr(self, f))
        require(self.nvlink_bw >= 0, "nvlink_bw", f"must be >= 0, got {self.nvlink_bw}")
        require(self.fp8_flops >= 0, "fp8_flops", f"must be >= 0 (0: none), got {self.fp8_flops}")

    @property
    def intra_node_bw(self) -> int:
        """Bandwidth between two GPUs of a node: NVLink where present, else PCIe."""
        return self.nvlink_bw or self.pcie_bw
