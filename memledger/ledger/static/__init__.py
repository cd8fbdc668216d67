"""The static rows: weights, gradients and optimizer states of the parameters a rank holds.

`sharding` is the table of how TP / EP / ETP / ZeRO divide each parameter group, `rows` the
bytes per row (precision recipe × optimizer × ZeRO stage), `held` which groups a rank holds,
`moves` what leaves the GPU (ZeRO-Offload, gradient offload, Muon's gathers).
"""
