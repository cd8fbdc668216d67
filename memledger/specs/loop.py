"""LoopSpec: how the training loop around the model handles memory, and framework presets.

The ledger's rows say *what* lives on a GPU; the loop says *when*. Five knobs:
  grad_lifetime   persistent  gradients live in a buffer for the whole step (Megatron-Core's
                              main-grad buffer, DDP buckets, zero_grad(set_to_none=False))
                  on-demand   allocated layer by layer during the first backward, freed by
                              zero_grad() (set_to_none=True is PyTorch's default since 2.0)
  optimizer_impl  fused       one kernel over all tensors: no temporaries
                  foreach     torch._foreach_sqrt(exp_avg_sqs): one state-format copy of the
                              whole parameter group (torch/optim/adam.py, _multi_tensor_adam)
                  for-loop    per tensor: exp_avg_sq.sqrt() / bias_correction2_sqrt — two
                              copies of the largest tensor (torch/optim/adam.py, _single_tensor_adam)
  loss            materialized  the model's own loss: full logits (+ fp32 upcast, per profile)
                  chunked       fused linear cross-entropy (Liger): logits never materialised —
                                no logits-sized saved tensor or transient (one chunk's and
                                Liger's in-forward head-gradient buffer are not modelled;
                                torchtitan as it runs: ChunkedLossWrapper's last-chunk set,
                                memledger.ledger.chunked_loss)
  mtp             built / skipped  DeepSeek's multi-token-prediction modules. transformers
                              5.24 does not build them (num_nextn_predict_layers is read, unused);
                              Megatron-Core does (megatron/core/transformer/multi_token_prediction.py)
  master_grads    in-place    gradients accumulate in the master format (Megatron main_grad)
                  cast-per-tensor  low-precision grads cast to fp32 one tensor at a time at
                              step time (p.grad.float() per parameter): one fp32 copy of the
                              largest local tensor during the step
Presets set them together (each with its source); "auto" follows the activation profile:
`hf`/`hf-cpu`/traced profiles run the plain-PyTorch loop, the others Megatron's.
  muon_experts    split       Muon orthogonalises each expert's 2-D matrix (Megatron-Core keeps
                              one weight per expert: TE GroupedLinear weight0..weightN)
                  adamw       torch.optim.Muon takes 2-D parameters only; transformers 5.24 fuses
                              a layer's experts into 3-D tensors, so they fall back to AdamW
                              (two states instead of one) unless the loop splits them
Not modelled: FSDP2's unsharded-gradient lifetime under ZeRO-3.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from memledger.errors import SpecError, require_choice

GRAD_LIFETIMES = ("persistent", "on-demand")
OPTIMIZER_IMPLS = ("fused", "foreach", "for-loop")
LOSSES = ("materialized", "chunked")
CHUNKED_LOSS_CHUNKS = 8  # ChunkedLossWrapper.Config.num_chunks (torchtitan 0.3 components/loss.py)
MTP = ("built", "skipped")
MASTER_GRADS = ("in-place", "cast-per-tensor")
MUON_EXPERTS = ("split", "adamw")
KNOBS = {"grad_lifetime": GRAD_LIFETIMES, "optimizer_impl": OPTIMIZER_IMPLS, "loss": LOSSES,
         "mtp": MTP, "master_grads": MASTER_GRADS, "muon_experts": MUON_EXPERTS}


@dataclass(frozen=True, kw_only=True)
class LoopSpec:
    name: str = "custom"
    grad_lifetime: str = "persistent"
    optimizer_impl: str = "fused"
    loss: str = "materialized"
    mtp: str = "built"
    master_grads: str = "in-place"
    muon_experts: str = "split"
    source: str = ""

    def __post_init__(self):
        for knob, choices in KNOBS.items():
            require_choice(knob, getattr(self, knob), choices)

    @property
    def on_demand(self) -> bool:
        return self.grad_lifetime == "on-demand"


LOOPS: dict[str, LoopSpec] = {x.name: x for x in (
    LoopSpec(name="pytorch", muon_experts="adamw", grad_lifetime="on-demand", optimizer_impl="foreach",
             loss="materialized", mtp="skipped", master_grads="cast-per-tensor",
             source="torch 2.13: Optimizer.zero_grad(set_to_none=True) (torch/optim/optimizer.py); "
                    "AdamW defaults to foreach on CUDA (_default_to_fused_or_foreach); the "
                    "transformers model's own loss (fp32 logits)"),
    LoopSpec(name="hf-trainer", muon_experts="adamw", grad_lifetime="on-demand", optimizer_impl="fused",
             loss="materialized", mtp="skipped", master_grads="cast-per-tensor",
             source="transformers 5.24 Trainer: optim defaults to adamw_torch_fused for torch>=2.8 "
                    "(training_args.py), model.zero_grad() sets grads to None (trainer.py)"),
    LoopSpec(name="torchtitan", muon_experts="adamw", grad_lifetime="on-demand", optimizer_impl="fused",
             loss="materialized", mtp="skipped", master_grads="in-place",
             source="torchtitan: optimizer.implementation='fused' (config/job_config.py), "
                    "optimizers.zero_grad() to None, FSDP2 reduce_dtype fp32, no MTP module, "
                    "cross_entropy_loss upcasts pred.float()"),
    LoopSpec(name="megatron", grad_lifetime="persistent", optimizer_impl="fused",
             loss="materialized", mtp="built", master_grads="in-place",
             source="Megatron-Core: contiguous main-grad buffer (distributed/param_and_grad_buffer.py),"
                    " TE/Apex FusedAdam, MultiTokenPredictionBlock built from mtp_num_layers"),
    LoopSpec(name="deepspeed", muon_experts="adamw", grad_lifetime="persistent", optimizer_impl="fused",
             loss="materialized", mtp="skipped", master_grads="in-place",
             source="DeepSpeed ZeRO-1/2: contiguous_gradients buffer, FusedAdam (ops/adam), "
                    "bf16 optimizer keeps fp32 grad partitions; HF model (no MTP)"),
)}
HF_PROFILES = ("hf", "hf-cpu")


# the activation profile of the model code each loop trains (the CLI's --profile auto): torchtitan
# builds plain-PyTorch modules (models/llama3/model.py: nn.Linear, F.scaled_dot_product_attention
# or FlexAttention, a Python or fused RMSNorm, cross_entropy on pred.float()), the others train
# transformers models; Megatron-Core runs Transformer Engine's fused layers. The torchtitan
# engine cases and published runs are measured against `hf` (docs/torchtitan.md).
LOOP_PROFILES = {"torchtitan": "hf", "pytorch": "hf", "hf-trainer": "hf", "deepspeed": "hf",
                 "megatron": "megatron"}


def default_loop_name(profile: str) -> str:
    """The loop a profile's measurements come from: traced / hf profiles run plain PyTorch."""
    return "pytorch" if profile in HF_PROFILES or profile.startswith("traced") else "megatron"


def profile_warnings(rt, profile: str) -> tuple[str, ...]:
    """A named loop whose model code is not the chosen profile's (torchtitan and the HF Trainer
    train plain-PyTorch / transformers modules; the megatron and paper profiles are Megatron's)."""
    want = LOOP_PROFILES.get(rt.loop)
    if rt.loop not in ("torchtitan", "hf-trainer") or profile in HF_PROFILES \
            or profile.startswith("traced") or want == profile:
        return ()
    return (f"profile {profile} under loop {rt.loop}: {rt.loop} trains plain-PyTorch modules "
            f"(their saved tensors and fp32 loss are the {want} profile's, against which its "
            f"runs are measured); {profile} counts Megatron's fused kernels and loss",)


def default_profile(loop: str, fallback: str) -> str:
    """`--profile auto`: the profile of the loop's model code; `fallback` under loop auto."""
    return LOOP_PROFILES.get(loop, fallback)


def loop_preset(name: str) -> LoopSpec:
    if name not in LOOPS:
        raise SpecError("loop", f"unknown loop {name!r}; valid: {', '.join(LOOPS)}")
    return LOOPS[name]


def add_loop_args(parser) -> None:
    """--loop and one flag per knob (argparse; the CLI's shared configuration flags)."""
    g = parser.add_argument_group(
        "training loop", "defaults follow --profile: hf / hf-cpu / traced run the plain-PyTorch "
                         "loop (pytorch), megatron and paper the Megatron loop (megatron)")
    g.add_argument("--loop", choices=("auto", *LOOPS), default="auto",
                   help="framework preset: " + "; ".join(f"{k}: {v.grad_lifetime} grads, "
                                                          f"{v.optimizer_impl} optimizer, MTP "
                                                          f"{v.mtp}" for k, v in LOOPS.items()))
    for knob, choices in KNOBS.items():
        g.add_argument("--" + knob.replace("_", "-"), choices=("auto", *choices), default="auto",
                       help=f"override the loop's {knob.replace('_', ' ')}")


def loop_kwargs(args) -> dict:
    """RuntimeSpec fields from the parsed loop flags."""
    return {"loop": args.loop, **{k: getattr(args, k) for k in KNOBS}}


_RESOLVED: dict = {}


def resolve_loop(rt, profile: str) -> LoopSpec:
    """The concrete loop of a RuntimeSpec: its preset (auto: by profile) with every knob that is
    not "auto" set on top. Raises SpecError for combinations no framework runs. Cached by the
    spec's identity: an lru_cache would compare ~30 fields on every hit, several per rank."""
    hit = _RESOLVED.get((id(rt), profile))
    if hit is not None and hit[0] is rt:
        return hit[1]
    loop = _resolve(rt, profile)
    if len(_RESOLVED) > 4096:
        _RESOLVED.clear()
    _RESOLVED[id(rt), profile] = (rt, loop)
    return loop


@lru_cache(maxsize=1024)
def _resolve(rt, profile: str) -> LoopSpec:
    base = loop_preset(default_loop_name(profile) if rt.loop == "auto" else rt.loop)
    knobs = {k: getattr(rt, k) for k in KNOBS if getattr(rt, k) != "auto"}
    # ZeRO-Offload steps with DeepSpeedCPUAdam; under FSDP's CPU offload (param_offload) the
    # step is torch's own optimizer on CPU tensors, whose fused and foreach kernels run on the
    # CPU too (torch utils/_foreach_utils.py `_get_fused_kernels_supported_devices`: "cpu")
    if rt.optimizer_offload and not rt.param_offload and \
            knobs.get("optimizer_impl") in ("fused", "foreach"):
        raise SpecError("optimizer_impl", f"{knobs['optimizer_impl']} is a GPU kernel, but with "
                                          "optimizer_offload the step runs on the CPU "
                                          "(DeepSpeedCPUAdam); leave it auto or use for-loop")
    return replace(base, name=base.name if not knobs else f"{base.name}+custom", **knobs)


def built_model(m, loop: LoopSpec):
    """The model (ModelSpec) the loop's framework instantiates: without MTP modules unless it
    builds them."""
    return m if loop.mtp == "built" or not m.n_mtp_layers else replace(m, n_mtp_layers=0)
