"""One training step of torchtitan's own code at real scale: FakeTensorMode + the fake process
group, rank 0 of a world of hundreds, every storage followed op by op (torch, torchtitan).

What runs is torchtitan's, in the order its Trainer runs it (torchtitan/trainer.py, 0.3.0):
the config registry's Trainer.Config, `model_config.update_from_config`, the model built on
the meta device in fp32 (`training.dtype`), the model spec's `parallelize_fn` (TP with loss
parallel, SelectiveAC / FullAC, FSDP2 `apply_fsdp_to_decoder` with
MixedPrecisionPolicy(bf16, fp32)), `to_empty` + `init_weights`, the optimizer container
(`config.optimizer.build`), the loss (`ChunkedLossWrapper` with `set_lm_head`) and
forward / loss / backward / `optimizers.step()` / `zero_grad()`.
Three stand-ins, each because fake tensors cannot run the original, none changing what is held:
  - the attention kernel: torchtitan's language models use compiled FlexAttention
    (`FlexAttention.compiled_flex_attn`, a torch.compile'd kernel that fake mode on the CPU
    cannot build); it is replaced by `scaled_dot_product_attention(is_causal=True)`, which
    keeps the same tensors for backward (q, k, v, output, logsumexp), and that op joins
    SelectiveAC's save list where torchtitan lists the flex HOP;
  - weight init: `trunc_normal_` draws values data-dependently; values do not change memory;
  - the device: torchtitan picks "cuda" when no accelerator is found (tools/utils.py); the
    meshes are built on "cpu" instead.
Pipeline parallel cases (pp > 1) run torchtitan's `pipeline_llm` and schedule: titan_pp.py.
`parallelism.spmd_backend = "partial_dtensor"` (FSDP2 + DTensor TP, the path of torchtitan 0.2
and of its published runs); 0.3's default `spmd_types` path is not run.
Measured (bytes, rank 0): weights / gradients / optimizer from the local shards; activations as
the live bytes the forward leaves behind minus the FSDP units it leaves unsharded; the peak of
live bytes over the measured step; the unsharded bytes at the forward's end.
"""
from __future__ import annotations

import importlib
import time

from memledger.engine.titan_cases import TitanCase

INSTALL = "pip install 'torchtitan==0.3.0' triton   (or: pip install -e '.[validation]')"


def require_torchtitan() -> None:
    try:
        importlib.import_module("torchtitan.models.llama3")
    except ImportError as e:
        from memledger.errors import SpecError
        raise SpecError("engine", f"torchtitan is not installed ({e}); install it with: "
                                  f"{INSTALL}") from None


def _stand_ins(torch) -> None:
    import torch.nn.functional as F

    import torchtitan.distributed.activation_checkpoint as ac
    from torchtitan.models.common.attention import FlexAttention
    if getattr(FlexAttention.forward, "_memledger", False):
        return

    def sdpa(self, q_BLNH, k_BLNH, v_BLNH, *, attention_masks=None, scale=None,
             enable_gqa=False, out_transform=None, **kwargs):  # FlexAttention.forward's names
        out = F.scaled_dot_product_attention(q_BLNH.transpose(1, 2), k_BLNH.transpose(1, 2),
                                             v_BLNH.transpose(1, 2), is_causal=True,
                                             scale=scale, enable_gqa=enable_gqa)
        return out.transpose(1, 2)
    sdpa._memledger = True
    FlexAttention.forward = sdpa
    orig = ac._get_default_save_ops
    ac._get_default_save_ops = lambda: orig() | {
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}
    import sys
    for name, mod in list(sys.modules.items()):
        if name.startswith("torchtitan") and getattr(mod, "device_type", None) == "cuda":
            mod.device_type = "cpu"


def _trainer_config(case: TitanCase):
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    reg = importlib.import_module(f"torchtitan.models.{case.family}.config_registry")
    cfg = getattr(reg, case.config_fn)()
    if case.flavor:  # another flavor under this config (titan_cases: why)
        cfg.model_spec = importlib.import_module(f"torchtitan.models.{case.family}") \
            .model_registry(case.flavor)
    cfg.training.seq_len, cfg.training.local_batch_size = case.seq, case.local_batch
    p = cfg.parallelism
    p.spmd_backend = "partial_dtensor"
    p.data_parallel_shard_degree, p.data_parallel_replicate_degree = -1, 1
    p.tensor_parallel_degree, p.context_parallel_degree = case.tp, case.cp
    p.pipeline_parallel_degree = p.expert_parallel_degree = 1
    if case.pp > 1:
        from memledger.engine.titan_pp import pp_config
        pp_config(cfg, case)
    cfg.activation_checkpoint = {"selective": SelectiveAC.Config(), "full": FullAC.Config(),
                                 "none": None}[case.ac]
    return cfg


def run_titan(case: TitanCase) -> dict:
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.components.loss import ChunkedLossWrapper
    from torchtitan.distributed import ParallelDims

    from memledger.engine import probe
    from memledger.engine.fake import _real_mesh_concatenate
    t0 = time.perf_counter()
    _real_mesh_concatenate()
    _stand_ins(torch)
    cfg = _trainer_config(case)
    from torchtitan.distributed import utils as dist_utils
    dist_utils.set_spmd_backend(cfg.parallelism.spmd_backend)  # as Trainer.__init__ does
    if case.pp > 1:
        from memledger.engine.titan_pp import run_titan_pp
        return run_titan_pp(case, cfg)
    dist.init_process_group("fake", rank=0, world_size=case.world, store=FakeStore())
    init = torch.nn.init._no_grad_trunc_normal_
    try:
        dims = ParallelDims.from_config(cfg.parallelism, case.world)
        dims.build_mesh()
        spec = cfg.model_spec
        spec.model.update_from_config(config=cfg)
        with torch.device("meta"):
            model = spec.model.build()
        model = spec.parallelize_fn(model, parallel_dims=dims, training=cfg.training,
                                    parallelism=cfg.parallelism, compile_config=cfg.compile,
                                    ac_config=cfg.activation_checkpoint, dump_folder="")
        torch.nn.init._no_grad_trunc_normal_ = lambda t, *a, **k: t
        with FakeTensorMode(allow_non_fake_inputs=True):
            model.to_empty(device="cpu")
            with torch.no_grad():
                model.init_weights(buffer_device=None)
            model.train()
            opt = cfg.optimizer.build(model_parts=[model])
            loss_fn = cfg.loss.build(compile_config=cfg.compile)
            chunked = isinstance(loss_fn, ChunkedLossWrapper)
            if chunked:
                loss_fn.set_lm_head(model.lm_head)
                model._skip_lm_head = True
            res = _measure(case, model, opt, loss_fn, probe, torch)
    finally:
        torch.nn.init._no_grad_trunc_normal_ = init
        dist.destroy_process_group()
    return {**res, "chunked_loss": chunked, "seconds": round(time.perf_counter() - t0, 2)}


def _measure(case, model, opt, loss_fn, probe, torch) -> dict:
    local_seq = case.seq // case.cp
    tokens = torch.randint(0, 1000, (case.local_batch, local_seq))
    labels = torch.randint(0, 1000, (case.local_batch, local_seq))
    gvt = torch.tensor(float(labels.numel()))
    states = lambda: [o.state for o in getattr(opt, "optimizers", [opt])]  # noqa: E731
    marks: dict[str, int] = {}

    def step(live=None):
        if live is not None:
            marks["before_forward"] = live.current
        pred = model(tokens)
        if live is not None:
            marks["forward_end"] = live.current
            marks["unsharded_at_forward_end"] = probe.unsharded_bytes(model)
        loss, _ = loss_fn(pred, labels, gvt)
        del pred
        loss.backward()
        if live is not None:
            marks["after_backward"] = live.current
            marks["gradients"] = sum(probe.nbytes(p.grad) for p in model.parameters()
                                     if p.grad is not None)
        opt.step()
        opt.zero_grad()

    step()  # step 1: optimizer states come to life
    live = probe.LiveBytes()
    live.track(*model.parameters(), *model.buffers())
    for st in states():
        for s in st.values():
            live.track(*s.values())
    live.track(tokens, labels)
    base = live.current
    live.samples.clear()
    with live:
        step(live)
    rows = probe.static_rows([model], states())
    activations = marks["forward_end"] - marks["before_forward"] - \
        marks["unsharded_at_forward_end"]
    return {"weights": rows["weights"], "gradients": marks["gradients"],
            "optimizer": rows["optimizer"], "activations": activations,
            "unsharded_at_forward_end": marks["unsharded_at_forward_end"],
            "base_live": base, "peak_live": live.peak, "marks": marks,
            "timeline": live.timeline(), "at_peak": live.at_peak()}
