"""The Pipeline staircase page: per-rank stacks, the schedule comparison, the per-rank table."""
