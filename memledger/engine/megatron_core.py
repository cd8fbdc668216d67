"""One training step of Megatron-Core's own code on gloo CPU processes, every storage followed op
by op on every rank (torch, megatron-core 0.16.1).

What runs is Megatron-Core's, in the order its training loop runs it (megatron/training/
training.py `train_step`): `parallel_state.initialize_model_parallel`, `GPTModel` from
`get_gpt_layer_local_spec(num_experts, normalization="RMSNorm")` (no Transformer Engine, no
Apex: torch's RMSNorm, Megatron's Column/RowParallelLinear, bias-SwiGLU fusion; MoE: TopKRouter,
the alltoall or allgather dispatcher, SequentialMLP experts; `engine/megatron_parts.py`) in
`Float16Module`, its `DistributedDataParallel` (contiguous param and fp32 grad buffers, bucketed
reduce-scatter; with N optimizer instances over dp/N, then an all-reduce of the shard across the
N), `get_megatron_optimizer` (DistributedOptimizer over torch's AdamW: fp32 main-param shards),
`zero_grad_buffer` / `zero_grad`, `get_forward_backward_func()` (forward with
the vocab-parallel cross entropy, backward, `finalize_model_grads`) and `optimizer.step()`.
Stand-ins: `engine/megatron_stand_ins.py` (each with why). Measured per rank (bytes): weights /
gradients from DDP's param and grad buffers (their padding included), optimizer from the
main-param shards and AdamW's states, activations as the live bytes the model's forward (loss
included) leaves behind (in a pipeline: the saved tensors alive at the rank's first backward,
and the micro-batches it holds then), per decoder layer the saved tensors its forward packed
(first micro-batch), the rows each MoE layer's experts got, and the peak of live bytes over the
measured (second) step, by phase: forward+backward, gradient sync (gloo's copy, not compared),
step. Ignores interleaved pipelines, overlapped communication (CUDA streams), Transformer Engine.
"""
from __future__ import annotations

import time

from memledger.engine.extras import require_module
from memledger.engine.megatron_cases import MegatronCase
from memledger.engine.megatron_parts import (count_routed_rows, ddp_buffers, distinct_bytes,
                                             moe_config, optimizer_tensors)
from memledger.engine.megatron_stand_ins import cpu_mode, sdpa_attention, stand_ins

INSTALL = "pip install --no-deps 'megatron-core==0.16.1'   (or: pip install -e '.[megatron]')"


def require_megatron_core() -> None:
    require_module("megatron.core.models.gpt", "megatron-core", INSTALL)


class _SavedByLayer:
    """Saved-for-backward storages (parameters excluded) by the forward (micro-batch) and the
    decoder layer that packed them ("pre" before the first layer, "post" after the last); at the
    first unpack (this rank's first backward) the bytes still alive and the forwards run."""

    def __init__(self, torch, model, layers):
        import weakref

        from memledger.engine.probe import _is_param
        self.where, self.forwards, self.saved = "pre", 0, {}
        self.at_first_backward: dict | None = None
        self._ref, self._is_param = weakref.ref, _is_param
        model.register_forward_pre_hook(self._forward)
        for i, layer in enumerate(layers):
            layer.register_forward_pre_hook(lambda *_, i=i: setattr(self, "where", i))
            layer.register_forward_hook(lambda *_: setattr(self, "where", "post"))
        self.ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _forward(self, *_):
        self.forwards += 1
        self.where = "pre"

    def _pack(self, t):
        if not self._is_param(t):
            st = t.untyped_storage()
            known = self.saved.get(st.data_ptr())
            # a storage freed in this forward (a saved tensor whose node was dropped: the aux
            # loss's top-k) leaves its address to the next one, which is another tensor
            if known is None or known[0]() is None:
                self.saved[st.data_ptr()] = (self._ref(st), self.where, self.forwards)
        return t

    def _unpack(self, t):
        if self.at_first_backward is None:
            self.at_first_backward = {"activations": sum(self.alive(None).values()),
                                      "held": self.forwards}
        return t

    def alive(self, forward: int | None = 1) -> dict:
        out: dict = {}
        for ref, where, f in self.saved.values():
            st = ref()
            if st is not None and st.nbytes() and forward in (None, f):
                out[where] = out.get(where, 0) + st.nbytes()
        return out


def _config(case: MegatronCase, torch):
    import torch.nn.functional as F
    from megatron.core.transformer import TransformerConfig
    full = case.recompute == "full"
    return TransformerConfig(
        num_layers=case.layers, hidden_size=case.hidden, num_attention_heads=case.heads,
        num_query_groups=case.kv_heads, ffn_hidden_size=case.ffn, kv_channels=case.hidden // case.heads,
        gated_linear_unit=True, activation_func=F.silu, bias_activation_fusion=True,
        normalization="RMSNorm", add_bias_linear=False, hidden_dropout=case.hidden_dropout,
        attention_dropout=0.0,
        tensor_model_parallel_size=case.tp, sequence_parallel=case.sp,
        pipeline_model_parallel_size=case.pp, deallocate_pipeline_outputs=True,
        use_cpu_initialization=True, bf16=True, params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16, recompute_granularity=None if case.recompute == "none"
        else case.recompute,  # selective: recompute_modules' default, ["core_attn"]
        recompute_method="uniform" if full else None, recompute_num_layers=1 if full else None,
        **moe_config(case))


def _build(case: MegatronCase, torch):
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module
    cfg = _config(case, torch)
    spec = get_gpt_layer_local_spec(num_experts=case.experts or None, normalization="RMSNorm")
    if case.attention == "sdpa":
        spec.submodules.self_attention.submodules.core_attention = sdpa_attention(torch)
    gpt = GPTModel(config=cfg, transformer_layer_spec=spec, vocab_size=case.vocab,
                   max_sequence_length=case.seq, position_embedding_type="rope",
                   share_embeddings_and_output_weights=False,
                   pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage())
    # as megatron/training/training.py get_model wraps it under --bf16: every parameter in bf16
    # (torch.nn.RMSNorm's weights are built in the default dtype, fp32)
    ddp = DistributedDataParallel(cfg, DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=True,
        num_distributed_optimizer_instances=case.instances),
        Float16Module(cfg, gpt))
    opt = get_megatron_optimizer(OptimizerConfig(
        optimizer="adam", lr=1e-4, bf16=True, use_distributed_optimizer=True), [ddp])
    cfg.no_sync_func = ddp.no_sync
    return gpt, ddp, opt, cfg


def measure_rank(case: MegatronCase, rank: int) -> dict:
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from memledger.engine import probe
    stand_ins(torch, case)
    mode = cpu_mode(torch)
    mode.__enter__()
    try:
        ps.initialize_model_parallel(tensor_model_parallel_size=case.tp,
                                     pipeline_model_parallel_size=case.pp,
                                     expert_model_parallel_size=case.ep,
                                     expert_tensor_parallel_size=case.etp,
                                     num_distributed_optimizer_instances=case.instances)
        torch.manual_seed(0)
        gpt, ddp, opt, cfg = _build(case, torch)
        gen = torch.Generator().manual_seed(1)  # the same batch on every tp rank
        tokens = torch.randint(0, case.vocab, (case.micro_batch, case.seq), generator=gen)
        labels = torch.randint(0, case.vocab, (case.micro_batch, case.seq), generator=gen)
        pos = torch.arange(case.seq)[None].expand(case.micro_batch, -1)
        inputs = sum(t.untyped_storage().nbytes() for t in (tokens, labels, pos))
        marks: dict = {}
        live_ref: list = [None]

        def loss_func(loss_per_token):
            loss = loss_per_token.float().sum()
            n = torch.tensor(loss_per_token.numel(), dtype=torch.int)
            return loss, n, {"lm loss": loss.detach()}

        def forward_step(_it, model):
            return model(tokens, pos, None, labels=labels), loss_func

        def hook(key):
            def h(*_):  # returns None: a forward hook's value would replace the output
                if live_ref[0] is not None:
                    marks.setdefault(key, []).append(live_ref[0].current)
            return h
        gpt.register_forward_pre_hook(hook("before_forward"))
        gpt.register_forward_hook(hook("forward_end"))
        by_layer = _SavedByLayer(torch, gpt, gpt.decoder.layers)
        routed = count_routed_rows(gpt.decoder.layers, live_ref)

        def forward_end(*_):
            if live_ref[0] is not None and "saved" not in marks:  # the first micro-batch's
                marks["saved"] = by_layer.alive()
        gpt.register_forward_hook(forward_end)
        fb = get_forward_backward_func()
        phases: dict = {}

        def phase_end(name):
            # the peak of each phase on its own; at_peak is the breakdown of that phase's peak
            lv = live_ref[0]
            if lv is not None:
                phases[name] = {"peak": lv.peak, "at_peak": lv.at_peak()}
                lv.peak, lv._snap = lv.current, 0

        def finalize(*args, **kwargs):  # Megatron's finalize_model_grads, phases marked
            phase_end("forward_backward")
            finalize_model_grads(*args, **kwargs)
            phase_end("grad_sync")
        cfg.finalize_model_grads_func = finalize

        def step():
            ddp.zero_grad_buffer()
            opt.zero_grad()
            fb(forward_step_func=forward_step, data_iterator=None, model=[ddp], num_microbatches=case.micro_batches,
               seq_length=case.seq, micro_batch_size=case.micro_batch, forward_only=False)
            return opt.step()

        ok1 = step()[0]  # step 1: AdamW's states come to life
        live = probe.LiveBytes()
        live.track(*gpt.parameters(), *gpt.buffers(), tokens, labels, pos,
                   *optimizer_tensors(opt))
        for buf in ddp_buffers(ddp):
            live.track(buf.param_data, buf.grad_data)
        # the buffers SP's all-gathers and the allgather dispatcher fill (tensor_parallel/
        # mappings.py use_global_buffer), made in step 1 and reused: not an activation
        live.track(*ps.get_global_memory_buffer().buffer.values())
        base = live.current
        live.samples.clear()
        live_ref[0] = live
        by_layer.forwards = 0
        with live, by_layer.ctx:
            ok2 = step()[0]
            phase_end("optimizer_step")
        live_ref[0] = None
        saved, first_bwd = marks["saved"], by_layer.at_first_backward
        per_layer = [saved.get(i, 0) for i in range(len(gpt.decoder.layers))]
        # one micro-batch: the bytes its forward leaves; in a pipeline: the saved tensors alive
        # at this rank's first backward, the micro-batches it holds then
        one = marks["forward_end"][0] - marks["before_forward"][0]
        return {
            "rank": rank, "pp_rank": ps.get_pipeline_model_parallel_rank(),
            "steps_ok": [bool(ok1), bool(ok2)],
            "weights": sum(b.param_data.untyped_storage().nbytes() for b in ddp_buffers(ddp)),
            "weights_unpadded": sum(probe.nbytes(p) for p in gpt.parameters()),
            "gradients": sum(b.grad_data.untyped_storage().nbytes() for b in ddp_buffers(ddp)),
            "optimizer": distinct_bytes(optimizer_tensors(opt)),
            "activations": one if case.pp == 1 else first_bwd["activations"],
            "saved_at_first_backward": first_bwd["activations"], "held": first_bwd["held"],
            "activations_per_layer": per_layer, "inputs": inputs,
            "routed_rows_per_layer": [routed[i] for i in sorted(routed)],
            "saved_outside_layers": {k: saved.get(k, 0) for k in ("pre", "post")},
            "base_live": base, "phases": phases,
            # gloo's coalesced reduce-scatter flattens the bucket into a copy of its own
            # (distributed_c10d.py _coalescing_manager → work.wait: one fp32 grad buffer more);
            # NCCL reduce-scatters from the bucket, so the peak compared is the other phases'
            "peak_live": max(phases["forward_backward"]["peak"], phases["optimizer_step"]["peak"]),
            "peak_live_grad_sync": phases["grad_sync"]["peak"],
        }
    finally:
        mode.__exit__(None, None, None)
        ps.destroy_model_parallel()


def _worker(case_dict: dict, rank: int, world: int, port: int, out_q) -> None:
    import os
    import traceback

    import torch
    import torch.distributed as dist

    from memledger.engine.megatron_compare import case_from_dict
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        out_q.put(measure_rank(case_from_dict(case_dict), rank))
    except BaseException:  # noqa: BLE001 - the parent reports the rank that failed
        out_q.put({"rank": rank, "error": traceback.format_exc(limit=-8)})
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_case(case: MegatronCase, timeout_s: float = 600.0) -> list[dict]:
    """Every rank of one case, one spawned gloo process each; a failing rank raises naming it."""
    import socket

    import torch.multiprocessing as mp

    from memledger.engine.megatron_compare import case_to_dict
    require_megatron_core()
    t0 = time.perf_counter()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(case_to_dict(case), r, case.world, port, q))
             for r in range(case.world)]
    for p in procs:
        p.start()
    try:
        got = [q.get(timeout=timeout_s) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    bad = [g for g in got if "error" in g]
    if bad:
        raise RuntimeError(f"{case.name}: rank {bad[0]['rank']} failed:\n{bad[0]['error']}")
    secs = round(time.perf_counter() - t0, 1)
    return [{**g, "seconds": secs} for g in sorted(got, key=lambda g: g["rank"])]
