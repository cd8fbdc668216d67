"""The Where-memory-goes page: the 16-bytes-per-parameter column, what each technique cuts,
the checkpointing curve."""
