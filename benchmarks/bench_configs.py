"""Import speed of every supported configuration fixture (bar: <= 50 ms each)."""
from __future__ import annotations

import time
from pathlib import Path

from memledger.configs import read_files

FIX = Path(__file__).parent.parent / "tests" / "fixtures" / "configs"
SETS = [["llama3_70b_megatron.sh"], ["deepseek_v3_megatron.sh"], ["llama3_405b_torchtitan.toml"],
        ["ds_zero3_offload.json", "training_args.json"], ["accelerate_fsdp2.yaml"],
        ["llamafactory_full_sft.yaml"], ["llamafactory_lora_sft.yaml"],
        ["llamafactory_freeze_sft.yaml"], ["torchtitan03_llama3_8b_dump.json"],
        ["megatron_functional_model_config.yaml"], ["megatron_yaml_cfg.yaml"],
        ["megatron_bridge_override.yaml"], ["accelerate_fsdp1_shard_grad_op.yaml"],
        ["accelerate_deepspeed.yaml"]]


def main() -> None:
    worst = 0.0
    for files in SETS:
        paths = [FIX / f for f in files]
        read_files(paths)  # warm imports
        t = time.perf_counter()
        for _ in range(20):
            read_files(paths)
        ms = (time.perf_counter() - t) / 20 * 1000
        worst = max(worst, ms)
        print(f"{' + '.join(files):55s} {ms:7.2f} ms")
    print(f"worst {worst:.2f} ms (bar 50 ms): {'ok' if worst <= 50 else 'OVER'}")


if __name__ == "__main__":
    main()
