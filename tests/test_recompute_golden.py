"""The recompute modes keep the numbers they had before storage policies existed.

tests/data/recompute_golden.json was written by the ledger at commit 187cb45 (main, just before
the policy work was merged) for 8 configurations × 4 recompute modes; every row and peak must
match exactly. Updated once on branch timeline (issue 10): the loss backward frees the last
stage's tensors before the layers' backward, so on the 10 last-stage ranks under full / every-k
recompute the recompute working set meets the staircase less those tensors (runtime row and
peak lower by 8.5 MB – 4.5 GB; every other row and rank unchanged; docs/timeline.md). Updated
on branch hmoe (issue 27), the megatron profile measured against megatron-core 0.16.1
(docs/megatron-validation.md): its selective set is Megatron's default core_attn (selective rows
keep the norm and activation outputs: llama3-8b rank 0 +15.0 GiB, 70b +3.4 GiB) and its MoE
layers keep what 0.16.1 keeps (no expert output, the row's probability, the dispatcher's
routing map and order: mixtral none −2.0 GiB, qwen3-30b-a3b −3.0 GiB); full and every-k move by
the MoE inventory only (≤ 0.44 GiB).
"""
import json
from pathlib import Path

import pytest

from memledger import ParallelSpec, TrainSpec, build_ledger, model

GOLDEN = json.loads((Path(__file__).parent / "data" / "recompute_golden.json").read_text())


def _case_id(c):
    return f"{c['model']}-{c['train']['recompute']}-{'-'.join(f'{k}{v}' for k, v in c['parallel'].items() if k in ('tp', 'pp', 'vpp', 'ep'))}"


@pytest.mark.parametrize("case", GOLDEN, ids=[_case_id(c) for c in GOLDEN])
def test_recompute_modes_unchanged_since_main(case):
    pk = {k: (tuple(v) if isinstance(v, list) else v) for k, v in case["parallel"].items()}
    led = build_ledger(model(case["model"]), ParallelSpec(**pk), TrainSpec(**case["train"]))
    got = [{"rows": r.rows, "peak_allocated_bytes": r.peak_allocated_bytes,
            "peak_total_bytes": r.peak_total_bytes} for r in led.ranks]
    assert got == case["ranks"]
