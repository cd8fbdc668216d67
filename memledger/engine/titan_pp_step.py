"""One pipeline rank of torchtitan's Trainer step, built and measured (torch): the body that the
fake-mode run (titan_pp.run_titan_pp: the fake process group, its P2P stand-ins) and the real
gloo run (titan_gloo: every rank a process) share. What runs and what is measured:
titan_pp.py's docstring; the probe: probe.py.
"""
from __future__ import annotations


def build_and_measure_pp(case, cfg, fake: bool, on_dims=None, on_model=None) -> dict:
    """This process's pp rank of an initialised process group: torchtitan's `pipelining_fn`
    stages, optimizer and loss, the state a first step leaves (titan_warm), the measured step. `fake`: under
    FakeTensorMode (weight init values skipped); `on_dims(dims)` after the mesh is built,
    `on_model(part)` on every model part after parallelize."""
    import contextlib

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torchtitan.components.loss import ChunkedLossWrapper
    from torchtitan.distributed import ParallelDims

    from memledger.engine import probe
    init = torch.nn.init._no_grad_trunc_normal_
    try:
        dims = ParallelDims.from_config(cfg.parallelism, case.world)
        dims.build_mesh()
        if on_dims is not None:
            on_dims(dims)
        spec = cfg.model_spec
        spec.model.update_from_config(config=cfg)
        with torch.device("meta"):
            model = spec.model.build()
        loss_fn = cfg.loss.build(compile_config=cfg.compile)
        sched, parts, first, last = spec.pipelining_fn(
            model, parallel_dims=dims, training=cfg.training, parallelism=cfg.parallelism,
            compile_config=cfg.compile, ac_config=cfg.activation_checkpoint, dump_folder="",
            device=torch.device("cpu"), model_config=spec.model,
            parallelize_fn=spec.parallelize_fn, loss_fn=loss_fn)
        del model
        for m in parts if on_model is not None else ():
            on_model(m)
        if fake:
            torch.nn.init._no_grad_trunc_normal_ = lambda t, *a, **k: t
        with FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext():
            for m in parts:
                m.to_empty(device="cpu")
                with torch.no_grad():
                    m.init_weights(buffer_device=None)
                m.train()
            opt = cfg.optimizer.build(model_parts=parts)
            if last and isinstance(loss_fn, ChunkedLossWrapper):
                loss_fn.set_lm_head(parts[-1].lm_head)
                parts[-1]._skip_lm_head = True
            res = _measure(case, sched, parts, opt, first, last, probe, torch)
    finally:
        torch.nn.init._no_grad_trunc_normal_ = init
    stages = [s.stage_index for s in _stages(sched)]
    return {**res, "stages": stages, "layers_per_stage": [len(m.layers) for m in parts],
            "n_microbatches": sched._n_microbatches, "schedule_class": type(sched).__name__}


def _stages(sched):
    from memledger.engine.pp_buffers import stages_of
    return stages_of(sched)


def _recv_bytes(bufs: dict) -> dict[str, int]:
    """Receive-buffer bytes by kind, each storage once (by storage object: every fake storage's
    data_ptr is 0, which pp_buffers.recv_bytes keys on)."""
    from memledger.engine.probe import local
    out = {}
    for kind, tensors in bufs.items():
        storages = {}
        for b in tensors:
            st = local(b).untyped_storage()
            storages[id(st)] = st  # kept alive, so no id is reused
        out[kind] = sum(st.nbytes() for st in storages.values())
    return out


def _unsharded(parts) -> int:
    from memledger.engine.probe import unsharded_bytes
    return sum(unsharded_bytes(m) for m in parts)


def _cached(sched, inputs: bool) -> int:
    """Bytes held in `fwd_cache` until each micro-batch's backward, each storage once: the stage
    outputs (sent to the next stage; the ledger's 'pipelining stage outputs (fwd_cache)'), or
    the inputs of non-first stages — their receive buffers, which the first checkpointed layer
    keeps as its input. The last stage's outputs are left out: under ChunkedLossWrapper
    (`_skip_lm_head`) they are the final norm's output, the loss's input, which the ledger
    counts in the activations row (`head.in`), not as a stage output."""
    from memledger.engine.probe import local
    seen = {}
    for s in _stages(sched):
        if inputs and s.is_first or not inputs and s.is_last:
            continue
        for outs, ins in s.fwd_cache.values():
            for o in (ins if inputs else outs):
                if hasattr(o, "untyped_storage"):
                    st = local(o).untyped_storage()
                    seen[id(st)] = st
    return sum(st.nbytes() for st in seen.values())


def _measure(case, sched, parts, opt, first, last, probe, torch) -> dict:
    from memledger.engine.pp_buffers import recv_buffers
    local_seq = case.seq // case.cp
    tokens = torch.randint(0, 1000, (case.local_batch, local_seq))
    labels = torch.randint(0, 1000, (case.local_batch, local_seq))
    gvt = torch.tensor(float(labels.numel()))
    # (F/B, stage, live bytes after, unsharded parameters, stage outputs kept in fwd_cache,
    #  receive buffers holding an in-flight stage input)
    events: list[tuple[str, int, int, int, int, int]] = []
    live_box: list = [None]

    def recorded(stage, kind: str, run):
        def call(*a, **k):
            out = run(*a, **k)
            if live_box[0] is not None:
                events.append((kind, stage.stage_index, live_box[0].current, _unsharded(parts),
                               _cached(sched, False), _cached(sched, True)))
            return out
        return call

    for s in _stages(sched):
        s.forward_one_chunk = recorded(s, "F", s.forward_one_chunk)
        s.backward_one_chunk = recorded(s, "B", s.backward_one_chunk)
    marks: dict[str, int] = {}

    def step(live=None):
        losses = [] if last else None
        kw = {"target": labels if last else None, "losses": losses, "return_outputs": False,
              "loss_kwargs": {"global_valid_tokens": gvt}}
        if first:
            sched.step(tokens, **kw)
        else:
            sched.step(**kw)
        if live is not None:
            marks["after_backward"] = live.current
            marks["gradients"] = sum(probe.nbytes(p.grad) for m in parts for p in m.parameters()
                                     if p.grad is not None)
        opt.step()
        opt.zero_grad()

    from memledger.engine.titan_warm import warm_pipeline  # what a first step leaves
    warm_pipeline(sched, _stages(sched), opt, (tokens,) if first else (),
                  labels if last else None, [] if last else None,
                  {"global_valid_tokens": gvt})
    live = probe.LiveBytes()
    for m in parts:
        live.track(*m.parameters(), *m.buffers())
    for o in getattr(opt, "optimizers", [opt]):
        for s in o.state.values():
            live.track(*s.values())
    bufs = recv_buffers(sched)
    live.track(*bufs["activation"], *bufs["gradient"], tokens, labels)
    base = live.current
    live.samples.clear()
    live_box[0] = live
    with live:
        marks["before_step"] = live.current
        step(live)
    live_box[0] = None
    rows = probe.static_rows(parts, [o.state for o in getattr(opt, "optimizers", [opt])])
    # activations: the live bytes the warm-up leaves, the forwards before the first backward,
    # less the stage units FSDP2 keeps unsharded from forward to backward under PP and the
    # stage outputs torch keeps for the sends, plus the receive buffers (allocated at step 1)
    # that hold the in-flight stage inputs the checkpointed first layers keep
    warm = next(i for i, e in enumerate(events) if e[0] == "B")
    _, _, at_warm, unsharded, outputs, received = events[warm - 1]
    return {"weights": rows["weights"], "gradients": marks["gradients"],
            "optimizer": rows["optimizer"],
            "activations": at_warm - marks["before_step"] - unsharded - outputs + received,
            "unsharded_at_warmup_end": unsharded, "outputs_at_warmup_end": outputs,
            "received_inputs_at_warmup_end": received,
            "warmup_forwards": warm,
            "recv_buffers": _recv_bytes(bufs), "base_live": base, "peak_live": live.peak,
            "marks": marks, "events": [list(e) for e in events], "timeline": live.timeline(),
            "at_peak": live.at_peak()}
