"""Pipeline parallelism: which layers each rank holds and how many micro-batches of each of its
stages are in flight (`schedules`), and the remote levelling that moves activations from early
ranks to later ones (`levelling` chooses, `remote` applies it to the ranks' ledgers).
"""
