"""The planner's per-search tables computed with fewer calls give the numbers of one call per
item: `acts.act_arrays_by_cp` (every cp of a tp as one [cp, etp, b] array) equals one
`_columns` / `_a2a` evaluation per cp, on the vectorised path (megatron) and on the per-pair
fallback (hf profiles branch on the micro-batch)."""
import numpy as np
import pytest

from memledger import gpu, model
from memledger.planner import PlanSpec
from memledger.planner import acts
from memledger.specs.loop import built_model, resolve_loop

ETPS = np.array([1, 2, 4])
EPS = [1, 2, 8, 16]
BS = np.array([1, 2, 3, 4, 6, 8, 12])
CPS = [1, 2, 4, 8]


def _setup(name, profile="megatron"):
    spec = PlanSpec(model=model(name), hardware=gpu("h100"), worlds=(64,), seq=4096,
                    global_batch=96, profile=profile)
    t, rt = spec.base_train(), spec.runtime
    loop = resolve_loop(rt, t.profile)
    return built_model(spec.model, loop), t, rt, loop.loss


@pytest.mark.parametrize("name,profile,tp", [("deepseek-v3", "megatron", 4),
                                             ("llama3-8b", "megatron", 2),
                                             ("mixtral-8x7b", "megatron", 1),
                                             ("llama3-8b", "hf", 1)])
def test_every_cp_at_once_equals_one_cp_at_a_time(name, profile, tp):
    m, t, rt, loss = _setup(name, profile)
    together = acts.act_arrays_by_cp(m, t, rt, tp, CPS, ETPS, EPS, BS)
    assert sorted(together) == CPS
    for cp in CPS:
        one = acts._one_cp(m, t, tp, cp, ETPS, BS, loss)  # the per-cp evaluation
        got = together[cp]
        for kind in acts.KINDS:
            for rc in ("none", "selective"):
                np.testing.assert_array_equal(got.keep[kind, rc], one["keep", kind, rc])
            np.testing.assert_array_equal(got.full[kind], one["full", kind])
        for k in ("layer_input", "first", "last", "logits", "logits_fwd", "bwd"):
            np.testing.assert_array_equal(getattr(got, k), one[k][0], err_msg=k)
        for e in (x for x in EPS if x > 1 and m.moe):
            scalar = [sum(i.bytes for i in acts.comm.moe_items(
                m, acts.VecParallel(tp=tp, cp=cp, ep=e, sp=tp > 1),
                acts.VecTrain(t, micro_batch=int(b)), rt)) for b in BS]
            np.testing.assert_array_equal(got.a2a[e], scalar)
        assert (not m.moe) or set(got.a2a) == {2, 8, 16}
