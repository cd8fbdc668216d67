"""Which engines run a pipeline schedule, which micro-batch counts each refuses, and which engine
the ledger follows ("auto": the first that runs the count). Sources per rule: Megatron-Core
schedules.py (interleaving needs m >= p), torch 2.13 torch/distributed/pipelining/schedules.py
(Schedule1F1B needs m >= p; ScheduleInterleaved1F1B and ZB1P group micro-batches in rounds of
max(1, m // p) and refuse counts that rounds do not divide; ScheduleDualPipeV needs m >= 2p),
DeepSeek's DualPipe (an even m >= 2p). docs/schedules.md lists them.
"""
from __future__ import annotations

from memledger.errors import SpecError

# engines that run each schedule, preferred first ("auto" takes the first that runs m)
SCHEDULE_ENGINES = {
    "gpipe": ("megatron", "pytorch"), "1f1b": ("megatron", "pytorch"),
    "interleaved": ("megatron", "pytorch"), "zb-h1": ("pytorch",), "zb-v": ("pytorch",),
    "dualpipe": ("deepseek",), "dualpipev": ("pytorch", "deepseek"),
}
ENGINE_NAMES = {"megatron": "Megatron-Core", "pytorch": "PyTorch (torch.distributed.pipelining)",
                "deepseek": "DeepSeek's DualPipe"}


def refusal(schedule: str, engine: str, p: int, m: int) -> str | None:
    """Why `engine` refuses m micro-batches of `schedule` on p ranks (None: it runs them)."""
    if (schedule == "1f1b" and engine == "pytorch" or schedule == "interleaved"
            and engine == "megatron") and m < p:
        return f"needs micro_batches >= pp = {p}"
    if schedule in ("interleaved", "zb-h1") and engine == "pytorch" and m % max(1, m // p):
        rounds = m // p
        return (f"needs micro_batches divisible by its rounds max(1, micro_batches // pp) = "
                f"{rounds} (e.g. {rounds * p} or {(rounds + 1) * p})")
    if schedule == "dualpipev" and m < 2 * p:
        return f"needs micro_batches >= 2·pp = {2 * p}, the V's stage count"
    if schedule == "dualpipe" and (m < 2 * p or m % 2):
        return f"needs an even micro_batches >= 2·pp = {2 * p}"
    return None


def resolve_engine(schedule: str, engine: str, p: int, m: int) -> str:
    """The engine whose order the ledger follows; SpecError naming the engines and their limits
    when none (or not the chosen one) runs m micro-batches."""
    runs = SCHEDULE_ENGINES[schedule]
    if engine != "auto" and engine not in runs:
        raise SpecError("pp_engine", f"{ENGINE_NAMES.get(engine, engine)} does not run schedule="
                                     f"{schedule}; engines that do: {', '.join(runs)}")
    tried = runs if engine == "auto" else (engine,)
    reasons: dict[str, list[str]] = {}
    for e in tried:
        why = refusal(schedule, e, p, m)
        if why is None:
            return e
        reasons.setdefault(why, []).append(ENGINE_NAMES[e])
    raise SpecError("micro_batches", f"{m} micro-batches of schedule={schedule} on pp={p}: " + "; ".join(
        f"{' and '.join(names)}: {why}" for why, names in reasons.items()))


def engine_notes(schedule: str, p: int, m: int) -> dict[str, str | None]:
    """Per engine that runs the schedule: None if it runs m micro-batches, else why not."""
    return {e: refusal(schedule, e, p, m) for e in SCHEDULE_ENGINES[schedule]}
