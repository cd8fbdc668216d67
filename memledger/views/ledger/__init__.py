"""The Ledger page: the headline numbers and the six-row bar of the most loaded rank."""
