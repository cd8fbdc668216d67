"""The Validation page: stored measurements re-predicted by the current ledger, parity plot
and tables."""
