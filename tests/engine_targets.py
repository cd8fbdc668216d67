"""Worker targets for tests/test_engine_torch.py (importable by spawned processes)."""
import time


def fail_on_rank_1(rank, case, port, out):
    if rank == 1:
        raise RuntimeError("injected failure on purpose")
    time.sleep(60)  # the surviving rank must be stopped by the parent, not left behind


def hang(rank, case, port, out):
    time.sleep(60)
