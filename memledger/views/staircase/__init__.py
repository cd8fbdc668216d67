"""The staircase page. per-rank stacks and schedule comparison."""
