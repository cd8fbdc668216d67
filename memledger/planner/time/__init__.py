"""Step time over a block's configurations (timing) and what it means as throughput."""
