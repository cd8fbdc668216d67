"""The per-rank peak's pieces on numpy arrays, each a mirror of a ledger rule (named in its
module's docstring with the equality test that holds them together)."""
