"""Truth: predicted vs measured memory of real training steps (docs/design.md §12).

`cases` holds the cases and the ledger's predictions (pure); `measure` runs them with torch
(imported lazily; CUDA when available, else CPU); `report` compares the two into rows with
relative errors and writes them with the environment they were measured in.
"""
