"""Start the ranks of an engine case as gloo CPU processes, with a timeout and no leftovers.

`torch.multiprocessing.start_processes` (spawn) starts one process per rank running
`worker.run_rank`; the parent joins with a deadline. A worker that raises is reported as
`EngineError` naming its rank and the last line of its error; torch terminates the other ranks,
and on a timeout this module terminates and then kills every process still alive, so no run
leaves processes behind. The master port is a free port picked by the OS.
"""
from __future__ import annotations

import json
import socket
import tempfile
import time
from pathlib import Path

from memledger.engine.cases import EngineCase, check_runnable
from memledger.errors import SpecError


class EngineError(RuntimeError):
    """A rank failed or the run timed out; the message names the rank."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill(ctx) -> None:
    for p in ctx.processes:
        if p.is_alive():
            p.terminate()
    for p in ctx.processes:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join(5)


def _last_line(msg: str) -> str:
    lines = [ln.strip() for ln in str(msg).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


def run_case(case: EngineCase, timeout_s: float = 120.0, target=None) -> list[dict]:
    """Every rank's measurement of one case, ordered by rank."""
    from memledger.engine.worker import run_rank
    check_runnable(case)
    if not 1 <= case.world <= 8:
        raise SpecError("world", f"real-tensor runs use 1..8 CPU processes; tp·pp·dp = {case.world} "
                                 "(larger worlds run under fake mode: --scale fake)")
    return spawn_ranks(target or run_rank, case, case.world, case.name, timeout_s)


def spawn_ranks(target, case, world: int, name: str, timeout_s: float,
                start_method: str = "spawn") -> list[dict]:
    """`target(rank, case, port, out)` in `world` new processes; each writes `<out>/rank<r>.json`,
    returned ordered by rank (shared by the torch and torchtitan engines). "fork" starts them
    from the caller's imports (a test that has torch and torchtitan loaded saves their import
    in every rank, as torch's DataLoader workers do); "spawn" from a fresh interpreter."""
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="memledger-engine-") as out:
        ctx = mp.start_processes(target, args=(case, free_port(), out),
                                 nprocs=world, join=False, start_method=start_method)
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=0.5):
                if time.monotonic() > deadline:
                    raise EngineError(f"case {name!r}: timed out after {timeout_s:.0f} s; "
                                      f"all {world} ranks were stopped")
        except mp.ProcessRaisedException as e:
            raise EngineError(f"case {name!r}: rank {e.error_index} failed: "
                              f"{_last_line(e.msg)}") from None
        except mp.ProcessExitedException as e:
            raise EngineError(f"case {name!r}: rank {e.error_index} exited with code "
                              f"{e.exit_code}") from None
        finally:
            _kill(ctx)
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world)]


__all__ = ["EngineError", "SpecError", "run_case", "spawn_ranks", "free_port"]
