"""GPU presets, and a custom GPU spelt as one string. Capacity is what the driver reports as
total (nvidia-smi / rocm-smi) where known, else the datasheet's GB (decimal).

Vendor datasheets: A100 SXM 80GB, H100 SXM, H800 SXM, H200 SXM, B200 and B300 (HGX), GB200 and
GB300 (NVL72, per GPU), MI300X. Bandwidths are bytes/s per direction: NVLink per GPU (the
datasheets' bidirectional totals halved: H100 900 → 450 GB/s, H800 400 → 200, NVLink 5 1.8 TB/s
→ 900), PCIe x16 per direction (GB200 / GB300: NVLink-C2C to the Grace CPU, 900 GB/s → 450),
one network NIC per GPU (ConnectX-7 400 Gb/s = 50 GB/s; ConnectX-8 800 Gb/s = 100 GB/s on
B300 / GB300). Dense peaks are the datasheets' sparse figures halved (H100 / H800 / H200 fp8
3,958 → 1,979 TFLOP/s; HGX B200 72 PFLOP/s fp8 over 8 GPUs → 4.5 PFLOP/s each; GB200 / GB300
NVL72 720 PFLOP/s fp8 and 360 bf16 over 72 → 5 and 2.5 PFLOP/s; HGX B300 72 fp8 and 36 bf16
over 8 → 4.5 and 2.25; MI300X 2,614.9 dense); the A100 has no fp8 tensor cores. The NVL72
parts keep gpus_per_node at 8 here (the planner's GPUs-per-node setting decides which groups
cross the network; 72 is one NVLink domain).

A custom GPU: `custom:<capacity GiB>,<NVLink GB/s>,<network GB/s>,<dense bf16 TFLOP/s>` (GB =
10^9 bytes, per direction; NVLink 0 = none), e.g. `custom:96,450,50,989`. HBM and PCIe
bandwidth are the H100's and fp8 runs at twice the bf16 peak (stated with the GPU's name).
Bounded: each value an integer in `CUSTOM_LIMITS`.
"""
from __future__ import annotations

from memledger.errors import SpecError, lookup
from memledger.specs.hardware import Hardware

_MIB = 1024**2
_GIB = 1024**3
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
    "h800": Hardware(name="H800 SXM", hbm_bytes=81559 * _MIB, bf16_flops=989 * _T,
                     hbm_bw=3350 * _G, nvlink_bw=200 * _G, pcie_bw=64 * _G, network_bw=50 * _G,
                     fp8_flops=1979 * _T,
                     source="NVIDIA H800 SXM5 datasheet (80 GB HBM3, 3.35 TB/s, NVLink 400 GB/s, "
                            "the H100's tensor cores); DeepSeek-V3 report §3.1: 400 Gb/s IB per "
                            "GPU"),
    "h200": Hardware(name="H200 SXM", hbm_bytes=143771 * _MIB, bf16_flops=989 * _T,
                     hbm_bw=4800 * _G, nvlink_bw=450 * _G, pcie_bw=64 * _G, network_bw=50 * _G,
                     fp8_flops=1979 * _T,
                     source="NVIDIA H200 datasheet (141 GB); nvidia-smi total 143771 MiB"),
    "b200": Hardware(name="B200", hbm_bytes=183359 * _MIB, bf16_flops=2250 * _T,
                     hbm_bw=8000 * _G, nvlink_bw=900 * _G, pcie_bw=64 * _G, network_bw=50 * _G,
                     fp8_flops=4500 * _T,
                     source="NVIDIA HGX B200 datasheet (180 GB); NVLink 5"),
    "b300": Hardware(name="B300", hbm_bytes=288 * _G, bf16_flops=2250 * _T,
                     hbm_bw=8000 * _G, nvlink_bw=900 * _G, pcie_bw=128 * _G, network_bw=100 * _G,
                     fp8_flops=4500 * _T,
                     source="NVIDIA HGX B300 datasheet (2.3 TB HBM3e over 8 GPUs: 288 GB each, "
                            "FP8 72 / BF16 36 PFLOP/s sparse); NVLink 5; PCIe Gen6 x16; "
                            "ConnectX-8 800 Gb/s"),
    "gb200": Hardware(name="GB200 (NVL72)", hbm_bytes=186 * _G, bf16_flops=2500 * _T,
                      hbm_bw=8000 * _G, nvlink_bw=900 * _G, pcie_bw=450 * _G, network_bw=50 * _G,
                      fp8_flops=5000 * _T,
                      source="NVIDIA GB200 NVL72 datasheet (13.4 TB HBM3e over 72 GPUs: 186 GB "
                             "each, 8 TB/s; FP8 720 / BF16 360 PFLOP/s sparse); NVLink 5; "
                             "NVLink-C2C 900 GB/s to Grace; ConnectX-7 400 Gb/s"),
    "gb300": Hardware(name="GB300 (NVL72)", hbm_bytes=288 * _G, bf16_flops=2500 * _T,
                      hbm_bw=8000 * _G, nvlink_bw=900 * _G, pcie_bw=450 * _G, network_bw=100 * _G,
                      fp8_flops=5000 * _T,
                      source="NVIDIA GB300 NVL72 datasheet (20.7 TB HBM3e over 72 GPUs: 288 GB "
                             "each, 8 TB/s; FP8 720 / BF16 360 PFLOP/s sparse); NVLink 5; "
                             "NVLink-C2C 900 GB/s to Grace; ConnectX-8 800 Gb/s"),
    "mi300x": Hardware(name="MI300X", hbm_bytes=192 * 1024 * _MIB, bf16_flops=1307 * _T,
                       hbm_bw=5300 * _G, nvlink_bw=0, pcie_bw=64 * _G, network_bw=50 * _G,
                       fp8_flops=2615 * _T,
                       source="AMD Instinct MI300X datasheet (192 GB HBM3); no NVLink"),
}

CUSTOM = "custom:"
# (field, label with unit, smallest, largest): integers; beyond any shipping part by > 10x
CUSTOM_LIMITS = (("capacity", "capacity GiB", 1, 4096), ("nvlink", "NVLink GB/s", 0, 20_000),
                 ("network", "network GB/s", 1, 10_000), ("tflops", "bf16 TFLOP/s", 1, 100_000))


def custom_gpu(text: str) -> Hardware:
    """The Hardware of `custom:<GiB>,<NVLink GB/s>,<network GB/s>,<TFLOP/s>`; SpecError('gpu')
    naming the value and its range otherwise."""
    parts = text[len(CUSTOM):].split(",") if text.startswith(CUSTOM) else []
    if len(parts) != len(CUSTOM_LIMITS) or len(text) > 64:
        raise SpecError("gpu", f"{text[:64]!r}: expected custom:<capacity GiB>,<NVLink GB/s>,"
                               "<network GB/s>,<bf16 TFLOP/s>, e.g. custom:96,450,50,989")
    values = []
    for raw, (_, label, lo, hi) in zip(parts, CUSTOM_LIMITS):
        raw = raw.strip()
        if not raw.isdigit() or not lo <= int(raw) <= hi:
            raise SpecError("gpu", f"custom GPU {label} = {raw[:12]!r}: expected an integer "
                                   f"{lo:,}..{hi:,}")
        values.append(int(raw))
    cap, nvlink, net, tflops = values
    base = GPUS["h100"]
    return Hardware(name=f"custom GPU ({cap:,} GiB)", hbm_bytes=cap * _GIB,
                    bf16_flops=tflops * _T, fp8_flops=2 * tflops * _T, hbm_bw=base.hbm_bw,
                    nvlink_bw=nvlink * _G, pcie_bw=base.pcie_bw, network_bw=net * _G,
                    source=f"custom: {cap:,} GiB, NVLink {nvlink:,} GB/s, network {net:,} GB/s, "
                           f"{tflops:,} bf16 TFLOP/s (fp8 2x); HBM and PCIe bandwidth the H100's")


def canonical_custom(text: str) -> str:
    """The one spelling of a custom GPU (integers without padding); SpecError as custom_gpu."""
    custom_gpu(text)
    return CUSTOM + ",".join(str(int(p)) for p in text[len(CUSTOM):].split(","))


def gpu(name: str) -> Hardware:
    if isinstance(name, str) and name.startswith(CUSTOM):
        return custom_gpu(name)
    return lookup("gpu", GPUS, name)
