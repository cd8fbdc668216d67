#!/usr/bin/env bash
# The one prepared GPU validation run (device tool): every GPU case of memledger.validation,
# results to $OUT (JSON + CSV + log). Uses the machine's own torch/transformers; memledger is
# pure Python and runs from the checkout.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=. TOKENIZERS_PARALLELISM=false
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
timeout "${VALIDATE_TIMEOUT:-420}" python3 -m memledger validate --device cuda --out "$OUT" 2>&1 | tee "$OUT/log.txt"
