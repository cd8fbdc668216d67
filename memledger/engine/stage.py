"""A pipeline stage of a Hugging Face causal LM as one nn.Module (torch, imported by workers).

`Stage` runs what LlamaForCausalLM.forward runs for its slice of decoder layers: the embedding
on the first stage, RoPE cos/sin from explicit position ids (so that a sequence-parallel
embedding output of s/tp tokens still gets s positions), the layers with no mask (sdpa takes
is_causal, as transformers does without padding), the final norm and head on the last stage.
The loss is the model's own `loss_function` (fp32 upcast of the logits, shifted labels), called
by the caller or by the pipeline schedule. The whole model is one stage when pp = 1.
Source: transformers 5.x models/llama/modeling_llama.py (LlamaModel.forward).
"""
from __future__ import annotations

import torch
from torch import nn


def build_hf(config: dict, dtype=torch.bfloat16, device="cpu"):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg_dict = dict(config)
    cfg = AutoConfig.for_model(cfg_dict.pop("model_type"), **cfg_dict)
    cfg.use_cache = False
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    model.train()
    return model


class Stage(nn.Module):
    def __init__(self, hf, layers: range, first: bool, last: bool, seq: int):
        super().__init__()
        inner = hf.model
        self.embed_tokens = inner.embed_tokens if first else None
        self.layers = nn.ModuleList(inner.layers[i] for i in layers)
        self.rotary_emb = inner.rotary_emb
        self.norm = inner.norm if last else None
        self.lm_head = hf.lm_head if last else None
        self.seq = seq
        self.first, self.last = first, last

    def forward(self, x):
        h = self.embed_tokens(x) if self.first else x
        pos = torch.arange(self.seq, device=h.device).unsqueeze(0)
        pe = self.rotary_emb(h, position_ids=pos)
        for layer in self.layers:
            h = layer(h, attention_mask=None, position_embeddings=pe, position_ids=pos)
        if self.last:
            h = self.lm_head(self.norm(h))
        return h


def make_loss(hf):
    """The model's own causal-LM loss on full logits (replicated under tp)."""
    vocab = hf.config.vocab_size
    fn = hf.loss_function

    def loss(logits, labels):
        return fn(logits=logits, labels=labels, vocab_size=vocab)
    return loss
