"""The advisor: for a configuration that does not fit, the four answers (static rows, the largest
activation and each currency's price, the staircase, worst-case buffers) and a plan re-checked
through the ledger. `moves` builds and evaluates candidate changes, `plan` chains them,
`answers` puts the four answers together.
"""
from memledger.advisor.answers import Advice, advise
from memledger.advisor.moves import Plan, all_remote

__all__ = ["Advice", "Plan", "advise", "all_remote"]
