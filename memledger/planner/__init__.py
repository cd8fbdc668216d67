"""The planner: every layout of a model on a GPU budget that fits, ranked by estimated step time."""
