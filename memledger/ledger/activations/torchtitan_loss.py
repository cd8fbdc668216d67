"""torchtitan's materialised loss in the forms its eras run (memledger.ledger.torchtitan_eras
.loss_form), as the last-stage tensors and loss transients that replace the profile's.

E = tokens on the rank × V/tp logits, one micro-batch:
  compiled  torch.compile(cross_entropy_loss) — `cross_entropy(pred.flatten(0, 1).float(), ...)`
            traced by inductor: the forward reduces the bf16 logits to one logsumexp per token
            without materialising the fp32 upcast or the log-probabilities, and saves its bf16
            input (a graph input costs nothing to save); the backward is one fused pointwise
            kernel writing the bf16 gradient (softmax − one-hot, the upcast's backward folded).
            Held: bf16 logits E + fp32 logsumexp per token; backward transient: bf16 E.
            (torch/_functorch/partitioners.py min_cut_rematerialization_partition; inductor
            fuses the reductions and pointwise ops.)
  dtensor   eager loss parallel (tp > 1): torch/distributed/tensor/parallel/loss.py.
            Forward `_log_softmax`: x = the fp32 local logits, shifted = x − max (fp32 E),
            exp(shifted) (fp32 E, summed then freed), result = shifted − logsumexp (fp32 E,
            saved for backward); alive at once: x, shifted and exp/result = 12 B × E; the head's
            bf16 output (2 B × E) before it (2025-06, 0.2: `pred` alive through the loss; 2024-12:
            freed by the model's `.float()` — counted in the forward set either way, 2 B × E high
            there, never the peak).
            Backward `_nll_loss_and_log_softmax_backward` (the log_softmax backward handler
            passes its gradient through): grad_input = zeros_like(x) (fp32 E), exp(x) (fp32 E),
            their sum (fp32 E), then × grad_output (fp32 E) — three fp32 E beside the saved
            log-probabilities: 16 B × E at the peak (the fused log_softmax of the plain loss: 12).
The profile's own form (hf: fused log_softmax) stands for the eager loss without loss parallel.
"""
from __future__ import annotations

from memledger.ledger.activations.inventory import ActTensor as A
from memledger.ledger.activations.profiles.megatron import _vocab

SRC_COMPILED = ("torchtitan components/loss.py build_cross_entropy_loss (torch.compile of "
                "cross_entropy_loss); torch/_functorch/partitioners.py (saved set), inductor "
                "(fused reductions)")
SRC_DTENSOR = ("torch/distributed/tensor/parallel/loss.py (_log_softmax, "
               "_nll_loss_and_log_softmax_backward)")


def compiled_loss(m, t, p) -> tuple[tuple[A, ...], tuple[A, ...]]:
    """(last-stage tensors of class logits, transients) of the compiled cross-entropy."""
    v = _vocab(m, t, p)
    held = (A("loss.logits_bf16 (compiled CE input)", "logits", v, "act", split="tp"),
            A("loss.logsumexp (compiled CE)", "logits", 1, "fp32", split="none"))
    return held, (A("loss.logit_grads (compiled CE)", "logits", v, "act", split="tp"),)


def dtensor_loss(m, t, p) -> tuple[tuple[A, ...], tuple[A, ...]]:
    """(last-stage tensors of class logits, transients) of torch's eager loss_parallel ops."""
    v = _vocab(m, t, p)
    held = (A("loss.logprobs_fp32", "logits", v, "fp32", split="tp"),)
    return held, (A("loss.parallel_backward_fp32 (zeros, exp, sum)", "logits", 3 * v, "fp32",
                    split="tp", pieces=3),
                  A("loss.logits (head output)", "forward", v, "act", split="tp"),
                  A("loss.logits_fp32 (loss parallel input)", "forward", v, "fp32", split="tp"),
                  A("loss.shifted_fp32 (x − max)", "forward", v, "fp32", split="tp"))


FORMS = {"compiled": (compiled_loss, SRC_COMPILED), "dtensor": (dtensor_loss, SRC_DTENSOR)}


def replace_loss(outer: dict, form: str, m, t, p, entry) -> dict:
    """The outer entries with the profile's logits tensors and loss transients replaced by the
    form's ("profile": unchanged). `entry` builds a held Entry (held.entry)."""
    if form == "profile" or not m.vocab:
        return outer
    held, transients = FORMS[form][0](m, t, p)
    keep = tuple(e for e in outer["last stage"] if e.tensor.cls != "logits")
    return {**outer, "last stage": keep + tuple(entry(x, m, t, p) for x in held),
            "transients": tuple(entry(x, m, t, p) for x in transients)}
