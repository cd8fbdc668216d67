"""Running a search: the block loop (evaluate), a block's cells on numpy (cells) or in one
compiled numba pass (fused), the second lane, the kept rows (sink, blocks), small pages, the count."""
