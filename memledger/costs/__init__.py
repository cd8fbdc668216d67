"""What moving a row costs and what the textbook says: compute time per rank (`compute`),
offload bandwidth verdicts (`bandwidth`), the planner's step-time model (`stepmodel` with
`gemm`, `collectives`, `overlap`; first-order helpers in `steptime`), published trainings it is
checked against (`published`), and the
textbook figures of "where memory goes" (`textbook`, `checkpointing`).

Above the ledger: these price decisions the ledger has already made.
"""
