"""Per-rank truth from PyTorch's own distributed engine (issue 11).

A ledger configuration becomes a real `torch.distributed` training step — FSDP2 (ZeRO-2/3),
DDP + ZeroRedundancyOptimizer (ZeRO-1), DTensor tensor + sequence parallelism, and
`torch.distributed.pipelining` schedules — measured on every rank and compared with
`build_ledger` per rank and row. Two scales: real tensors on N gloo CPU processes
(`workers`), and FakeTensorMode + the fake process group at the world sizes people run
(`fake`), where PyTorch's FSDPMemTracker also gives its own estimate.

Modules: `cases` (engine cases and their ledger translation, pure), `compare` (records and
re-scoring of stored runs, pure), `stage`/`parallelize`/`probe`/`worker`/`workers`/`fake`
(torch, imported lazily: this package imports without torch).
"""
