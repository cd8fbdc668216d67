"""Activation profiles: the tensors each framework's layers save for backward, per token.

`megatron` (Megatron-Core + TE), `paper` (Korthikanti et al. 2022), `hf` (traced from Hugging
Face transformers). Registered by name in memledger.ledger.activations.
"""
