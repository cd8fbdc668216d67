"""Parts of the Megatron-Core engine run besides the live-byte probe (torch objects; imported by
`engine.megatron_core`).

The MoE fields of a case as TransformerConfig fields; DDP's param/grad buffers, dense and
expert-parallel; the DistributedOptimizer's tensors (fp32 main-param shards, AdamW's states);
a count of the token-expert rows each MoE layer's experts receive (what the router chose; the
ledger assumes balanced routing, `megatron_compare.routing_mean`).
"""
from __future__ import annotations

from memledger.engine.megatron_cases import MegatronCase


def moe_config(case: MegatronCase) -> dict:
    """TransformerConfig fields of a MoE case (none for a dense one)."""
    if not case.experts:
        return {}
    # the switch load-balancing loss on (router.py _apply_aux_loss), no token dropping
    return dict(num_moe_experts=case.experts, moe_router_topk=case.top_k,
                moe_ffn_hidden_size=case.moe_ffn, moe_token_dispatcher_type=case.dispatcher,
                moe_shared_expert_intermediate_size=case.shared_ffn or None,
                moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-2,
                expert_model_parallel_size=case.ep, expert_tensor_parallel_size=case.etp)


def ddp_buffers(ddp) -> list:
    """DDP's dense and expert-parallel param/grad buffers (the latter sharded over expert dp)."""
    return list(ddp.buffers) + list(ddp.expert_parallel_buffers)


def count_routed_rows(layers, live_ref: list) -> dict:
    """layer index -> rows its experts get in the measured step's first micro-batch (filled
    while live_ref[0] is set)."""
    routed: dict = {}

    def count(i):
        def h(_module, args):  # returns None: a pre-hook's value would replace the input
            if live_ref[0] is not None:
                routed.setdefault(i, int(args[0].shape[0]))
        return h
    for i, layer in enumerate(layers):
        if hasattr(layer.mlp, "experts"):
            layer.mlp.experts.register_forward_pre_hook(count(i))
    return routed


def optimizer_tensors(opt) -> list:
    out = []
    for o in getattr(opt, "chained_optimizers", [opt]):
        for group in getattr(o, "shard_fp32_from_float16_groups", []):
            out += [t for t in group if t is not None]
        for st in o.optimizer.state.values():
            out += [v for v in st.values() if hasattr(v, "untyped_storage")]
    return out


def distinct_bytes(tensors) -> int:
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in tensors}.values())
