"""GPU presets. Capacity is what the driver reports as total (nvidia-smi / rocm-smi) where known.

Vendor datasheets: A100 SXM 80GB, H100 SXM, H200 SXM, B200 (HGX), MI300X. Bandwidths are bytes/s
per direction: NVLink per GPU, PCIe x16 per direction, one network NIC per GPU. Dense fp8 peaks
are the datasheets' sparse figures halved (H100 / H200 3,958 → 1,979 TFLOP/s; HGX B200 72 PFLOP/s
over 8 GPUs → 4.5 PFLOP/s each; MI300X 2,614.9 dense); the A100 has no fp8 tensor cores.
"""
from __future__ import annotations

from memledger.errors import lookup
from memledger.specs.hardware import Hardware

_MIB = 1024**2
_G = 10**9
_T = 10**12

GPUS: dict[str, Hardware] = {
    "a100-80gb": Hardware(name="A100 80GB", hbm_bytes=81920 * _MIB, bf16_flops=312 * _T,
                          hbm_bw=2039 * _G, nvlink_bw=300 * _G, pcie_bw=32 * _G, network_bw=25 * _G,
                          source="NVIDIA A100 datasheet; PCIe Gen4 x16; HDR 200 Gb/s NIC"),
    "h100": Hardware(name="H100 SXM", hbm_bytes=81559 * _MIB, bf16_flops=989 * _T,
                     hbm_bw=3350 * _G, nvlink_bw=450 * _G, pcie_bw=64 * _G, network_bw=50 * _G,
                     fp8_flops=1979 * _T,
                     source="NVIDIA H100 datasheet; PCIe Gen5 x16; NDR 400 Gb/s NIC"),
    "h200": Hardware(name="H200 SXM", hbm_bytes=143771 * _MIB, bf16_flops=989 * _T,
                     hbm_bw=4800 * _G, nvlink_bw=450 * _G, pcie_bw=64 * _G, network_bw=50 * _G,
                     fp8_flops=1979 * _T,
                     source="NVIDIA H200 datasheet (141 GB); nvidia-smi total 143771 MiB"),
    "b200": Hardware(name="B200", hbm_bytes=183359 * _MIB, bf16_flops=2250 * _T,
                     hbm_bw=8000 * _G, nvlink_bw=900 * _G, pcie_bw=64 * _G, network_bw=50 * _G,
                     fp8_flops=4500 * _T,
                     source="NVIDIA HGX B200 datasheet (180 GB); NVLink 5"),
    "mi300x": Hardware(name="MI300X", hbm_bytes=192 * 1024 * _MIB, bf16_flops=1307 * _T,
                       hbm_bw=5300 * _G, nvlink_bw=0, pcie_bw=64 * _G, network_bw=50 * _G,
                       fp8_flops=2615 * _T,
                       source="AMD Instinct MI300X datasheet (192 GB HBM3); no NVLink"),
}


def gpu(name: str) -> Hardware:
    return lookup("gpu", GPUS, name)
