"""Pipeline parallelism: which layers each rank holds and how many micro-batches of each of its
stages are in flight (`schedules`), gathered once per rank into the `RankPlacement` the ledger's
rows read (`placement`), and the remote levelling that moves activations from early ranks to
later ones (`levelling` chooses, `remote` applies it to the ranks' ledgers).
"""
