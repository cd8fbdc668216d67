"""Run one training step of a case and measure what the ledger predicts (torch, lazily).

Two steps are run: the first creates gradients and optimizer states, the second is measured.
Gradients persist between steps (zero_grad(set_to_none=False)), as Megatron's grad buffer does.
On CUDA: weights/gradients/optimizer states are summed from the tensors; activations are the
allocated-bytes delta across the forward passes (all m micro-batches held, GPipe order);
peak_allocated is torch.cuda.max_memory_allocated over the measured step, minus nothing.
On CPU there is no allocator to ask: activations are the storage-deduplicated bytes of the
tensors autograd saved (parameters excluded, autocast's weight casts included), and no peak is
reported. Each case starts from a collected heap (gc + empty_cache): the first GPU run showed
earlier cases' models surviving in reference cycles and inflating later peaks.
Ignores: the input ids and labels (b·s int64 each, reported separately as `inputs`).
"""
from __future__ import annotations

import contextlib
import time

from memledger.validation.cases import Case


def _tensor_bytes(t) -> int:
    return t.numel() * t.element_size()


def build_model(case: Case, device):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg_dict = dict(case.config)
    model_type = cfg_dict.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **cfg_dict)
    cfg.use_cache = False
    impl = "sdpa" if case.attention == "flash" else "eager"
    dtype = torch.float32 if case.precision == "amp" else torch.bfloat16
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl, dtype=dtype)
    model = apply_finetune(model, case.finetune)
    if case.recompute == "full":
        model.activation_checkpointing_enable(  # transformers 5.x; the old name is deprecated
            activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


# FinetuneSpec names -> the nn.Module / nn.Parameter names of transformers 5 causal LMs
_HF_FREEZE = {"embeddings": ("embed_tokens",), "head": ("lm_head",), "norms": ("norm",),
              "attention": ("self_attn.",), "mlp": ("mlp.gate_proj", "mlp.up_proj",
                                                    "mlp.down_proj", "shared_expert."),
              "experts": ("mlp.experts.",), "router": ("mlp.gate.",)}


def apply_finetune(model, spec):
    """peft LoRA (lora: get_peft_model with the spec's rank, alpha, dropout and targets, the
    named sets expanded to module names) or requires_grad=False on the frozen modules
    (freeze). The base of a peft model is frozen by peft itself."""
    if spec.mode == "full":
        return model
    if spec.adapters:
        from peft import LoraConfig, get_peft_model

        from memledger.specs.finetune import TARGET_SETS
        names = sorted({n for t in spec.lora_targets for n in TARGET_SETS.get(t, (t,))})
        present = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        n_layers = model.config.num_hidden_layers
        frozen = {i for lo, hi in spec.frozen_ranges for i in range(lo, hi + 1)}
        cfg = LoraConfig(r=spec.lora_rank, lora_alpha=spec.lora_alpha,
                         lora_dropout=spec.lora_dropout_pct / 100,
                         target_modules=[n for n in names if n in present],
                         layers_to_transform=[i for i in range(n_layers) if i not in frozen]
                         if frozen else None)
        return get_peft_model(model, cfg, autocast_adapter_dtype=spec.lora_dtype == "fp32")
    from memledger.specs.finetune import parse_range
    keys = tuple(k for name in spec.freeze if parse_range(name) is None
                 for k in _HF_FREEZE.get(name, ("layers." if name == "layers" else name,)))
    keys += tuple(f"layers.{i}." for lo, hi in spec.frozen_ranges for i in range(lo, hi + 1))
    for name, p in model.named_parameters():
        is_norm = "norm" in name.rsplit(".", 2)[-2] if "." in name else False
        if any(k in name for k in keys if k != "norm") or ("norm" in keys and is_norm):
            p.requires_grad_(False)
    return model


class Stepper:
    """The optimizer side of a case: AdamW (fused), Muon on 2-D hidden matrices, or the
    mixed16 recipe's fp32 master weights updated one parameter at a time."""

    def __init__(self, model, case: Case):
        import torch
        self.case, self.model = case, model
        params = [p for p in model.parameters() if p.requires_grad]
        fused = dict(fused=True)
        if case.precision == "mixed16":
            self.masters = [p.detach().float() for p in params]
            self.pairs = [(p, mp, torch.optim.AdamW([mp], **fused)) for p, mp in zip(params, self.masters)]
            self.opts = [o for *_, o in self.pairs]
        elif case.optimizer == "muon":
            emb = {id(model.get_input_embeddings().weight), id(model.get_output_embeddings().weight)}
            mats = [p for p in params if p.ndim == 2 and id(p) not in emb]
            rest = [p for p in params if p.ndim != 2 or id(p) in emb]
            self.opts = [torch.optim.Muon(mats), torch.optim.AdamW(rest, **fused)]
            self.masters = []
        else:
            self.opts = [torch.optim.AdamW(params, **fused)]
            self.masters = []

    def step(self):
        if self.case.precision == "mixed16":
            for p, mp, opt in self.pairs:
                mp.grad = p.grad.float()
                opt.step()
                mp.grad = None
                p.data.copy_(mp)
        else:
            for o in self.opts:
                o.step()
        for o in self.opts:
            o.zero_grad(set_to_none=False)

    def state_bytes(self) -> int:
        params = {p.data_ptr() for p in self.model.parameters()}
        # .float() of an fp32 parameter is the parameter itself: not an extra copy
        total = sum(_tensor_bytes(m) for m in self.masters if m.data_ptr() not in params)
        for o in self.opts:
            for st in o.state.values():
                total += sum(_tensor_bytes(v) for v in st.values() if hasattr(v, "numel"))
        return total


def _batches(case: Case, vocab: int, device):
    import torch
    g = torch.Generator(device="cpu").manual_seed(1)
    return [torch.randint(0, vocab, (case.micro_batch, case.seq), generator=g).to(device)
            for _ in range(case.micro_batches)]


def _forward(model, case, batches):
    import torch
    amp = torch.autocast("cuda" if batches[0].is_cuda else "cpu", dtype=torch.bfloat16) \
        if case.precision == "amp" else contextlib.nullcontext()
    losses = []
    for x in batches:
        with amp:
            losses.append(model(input_ids=x, labels=x).loss / len(batches))
    return losses


def _saved_bytes(model, case, batches) -> int:
    """Saved-for-backward bytes, storage-deduplicated, parameters excluded but autocast's
    weight casts included (they are per-micro-batch memory like any activation)."""
    from memledger.trace.saved import saved_tensor_bytes
    return saved_tensor_bytes(lambda: _forward(model, case, batches), model, include_param_copies=True)


def _measure_cuda_step(model, case, batches, stepper) -> dict:
    """The measured step, phase by phase: forward (activations = allocated delta), backward,
    optimizer step; each phase's peak is kept for diagnosis, peak_allocated is their maximum."""
    import torch

    def phase_start():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    phase_start()
    before = torch.cuda.memory_allocated()
    losses = _forward(model, case, batches)
    torch.cuda.synchronize()
    out = {"base_allocated": before, "activations": torch.cuda.memory_allocated() - before,
           "forward_peak": torch.cuda.max_memory_allocated()}
    phase_start()
    for loss in losses:
        loss.backward()
    del losses
    torch.cuda.synchronize()
    out["backward_peak"] = torch.cuda.max_memory_allocated()
    phase_start()
    stepper.step()
    torch.cuda.synchronize()
    out["step_peak"] = torch.cuda.max_memory_allocated()
    out["peak_allocated"] = max(out["forward_peak"], out["backward_peak"], out["step_peak"])
    return out


def measure(case: Case, device: str = "cuda") -> dict:
    """Measured bytes of one case: weights, gradients, optimizer, activations, peak_allocated."""
    import gc

    import torch
    cuda = device == "cuda"
    gc.collect()  # the previous case's model and graphs hold reference cycles
    if cuda:
        torch.cuda.empty_cache()
    model = build_model(case, device)
    stepper = Stepper(model, case)
    batches = _batches(case, model.config.vocab_size, device)
    for loss in _forward(model, case, batches):  # step 1: grads and states come to life
        loss.backward()
    stepper.step()
    out = {"weights": sum(_tensor_bytes(p) for p in model.parameters()),
           "buffers": sum(_tensor_bytes(b) for b in model.buffers()),
           "gradients": sum(_tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None),
           "optimizer": stepper.state_bytes(),
           "inputs": sum(_tensor_bytes(b) for b in batches)}
    t0 = time.perf_counter()
    if cuda:
        out.update(_measure_cuda_step(model, case, batches, stepper))
        out["saved_tensor_bytes"] = _saved_bytes(model, case, batches)  # same hooks, on GPU
    else:
        out["activations"] = _saved_bytes(model, case, batches)
    out["step_seconds"] = time.perf_counter() - t0
    del model, stepper, batches
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        out["leftover_allocated"] = torch.cuda.memory_allocated()  # should be ~0: nothing leaks
    return out


def workspace_bytes() -> int:
    """cuBLAS(Lt) workspace the caching allocator hands out on the first matmul (per stream)."""
    import torch
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    b = a @ a
    torch.cuda.synchronize()
    used = torch.cuda.memory_allocated() - before - 2 * _tensor_bytes(a)
    del a, b
    return max(used, 0)


def environment() -> dict:
    import platform

    import torch
    import transformers
    env = {"torch": torch.__version__, "transformers": transformers.__version__,
           "python": platform.python_version(), "device": "cpu"}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        torch.cuda.init()
        free, total = torch.cuda.mem_get_info()
        env.update(device="cuda", gpu=props.name, gpu_total_bytes=total, cuda=torch.version.cuda,
                   # driver-side use outside PyTorch's allocator: CUDA context + library handles
                   context_bytes=total - free - torch.cuda.memory_reserved())
    return env
