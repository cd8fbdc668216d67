"""Seeded inputs for the CLI contract fuzz (tests/test_fuzz.py) and its report.

Each input is one valid base command of a sub-command with one flag replaced by a hostile value
(or one field of a config.json replaced), so an exit-2 message can be checked for naming the
flag or field it was given. `python tests/cli_fuzz.py [N] [SEED]` prints the counts.
"""
from __future__ import annotations

import contextlib
import gc
import io
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLAMA = json.loads((ROOT / "tests/fixtures/hf/Meta-Llama-3-8B.json").read_text())
QWEN_MOE = json.loads((ROOT / "tests/fixtures/hf/Qwen3-30B-A3B.json").read_text())
DSV3 = json.loads((ROOT / "tests/fixtures/hf/DeepSeek-V3.json").read_text())

INTS = ["0", "-1", "1", "2", "3", "7", "1024", "65536", "2147483648", "9223372036854775808",
        "999999999989", "10" * 20, "1e3", "0x10", " 8", "", "nan", "-0"]
FLOATS = ["0", "-1", "0.5", "1", "64", "1e309", "inf", "-inf", "nan", "1e-320", "", "x",
          "100000", "5e8", "1e13"]
TEXT = ["", " ", "x", "a,b", "1,,2", ",", "../../etc/passwd", "/dev/zero", "/", "\x00",
        "balanced", "even", "4,4,4,4", "0,0,0,32", "99999,1", "traced:", "traced:/dev/zero",
        "mlp_fc1=fp8", "mlp_fc1=", "=fp8", "nope=keep", "[" * 50]

BASE = {
    "ledger": ["ledger", "--model", "llama3-8b", "--tp", "2", "--pp", "1", "--world", "8",
               "--gpu", "h100"],
    "advise": ["advise", "--model", "llama3-8b", "--tp", "2", "--pp", "1", "--world", "8",
               "--gpu", "h100"],
    "plan": ["plan", "--model", "llama3-8b", "--gpu", "h100", "--world", "8",
             "--global-batch", "8", "--tp", "2", "--pp", "1", "--top", "3"],
    # a module that cannot be imported: every trace fails fast, after its flags are checked
    "trace": ["trace", "--module", "no_such_module_xyz:build", "--seq", "8,16"],
    "validate": ["validate", "--list"],
}
INT_FLAGS = {
    "ledger": ["--tp", "--pp", "--vpp", "--ep", "--etp", "--cp", "--dp", "--world",
               "--micro-batch", "--seq", "--micro-batches", "--recompute-every",
               "--allocator-slack-pct", "--deepep-max-tokens", "--zero3-prefetch-layers",
               "--nccl-channels", "--mfu", "--zero"],
    "plan": ["--global-batch", "--gpus-per-node", "--tp", "--pp", "--vpp", "--ep", "--etp",
             "--cp", "--dp", "--zero", "--max-tp", "--max-etp", "--max-cp", "--max-vpp",
             "--max-micro-batch", "--top", "--micro-batch", "--seq", "--mfu"],
    "trace": ["--check-seq", "--batch", "--layers", "--scale", "--hidden", "--seed"],
}
INT_FLAGS["advise"] = INT_FLAGS["ledger"]
FLOAT_FLAGS = {
    "ledger": ["--capacity-factor", "--cuda-context-gib", "--reduce-bucket", "--allgather-bucket",
               "--zero3-prefetch-bucket", "--zero3-max-live", "--grad-offload-chunk"],
    "advise": ["--capacity-factor", "--cuda-context-gib", "--target-gib"],
    "plan": ["--headroom", "--capacity-factor", "--cuda-context-gib"],
}
TEXT_FLAGS = {
    "ledger": ["--layout", "--profile", "--policy", "--hf-config", "--schedule", "--precision",
               "--policy-preset", "--a2a"],
    "advise": ["--layout", "--profile", "--policy", "--hf-config"],
    "plan": ["--world", "--profile", "--hf-config", "--schedule", "--recompute"],
    "trace": ["--seq", "--module", "--hf-config", "--out", "--precision"],
    "validate": ["--rescore", "--cases", "--out", "--device"],
}
CONFIG_FIELDS = {
    "num_hidden_layers": [0, -1, 10**9, 1281, 2**63, "32", 3.5, None, True, [32]],
    "hidden_size": [0, 10**7, 4095, 2**63, "4096", None],
    "intermediate_size": [999_999_999_989, 0, 737_281, 14337, "x"],
    "num_attention_heads": [0, 7, 4096, 10**12],
    "num_key_value_heads": [0, 3, 64, 10**9],
    "vocab_size": [0, -5, 10**9, 2**40],
    "head_dim": [0, 10**6, 3],
    "model_type": ["gpt2", "", None, 5, "llama" * 100],
    "tie_word_embeddings": ["yes", 1, None],
    "hidden_act": ["relu", 5, ""],
    # MoE fields (Qwen3-MoE base) and DeepSeek fields
    "mlp_only_layers": [list(range(100_000)), [-1], [10**9], "0,1", [0.5], [[0]]],
    "num_experts": [0, 10**6, 7, -1],
    "num_experts_per_tok": [0, 10**6, 129],
    "decoder_sparse_step": [0, 10**9, -3],
    "first_k_dense_replace": [62, 10**9, -1],
    "moe_layer_freq": [0, 10**9],
    "n_routed_experts": [0, 10**7],
    "kv_lora_rank": [0, 10**8],
    "q_lora_rank": [-1, 10**8],
}
# the ModelSpec field a config key becomes (cross-field checks name the spec's field)
SPEC_NAME = {"num_hidden_layers": "n_layers", "hidden_size": "hidden",
             "intermediate_size": "ffn_hidden", "num_attention_heads": "n_heads",
             "num_key_value_heads": "n_kv_heads", "vocab_size": "vocab", "num_experts": "n_experts",
             "num_experts_per_tok": "top_k", "n_routed_experts": "n_experts",
             "mlp_only_layers": "dense_layers", "first_k_dense_replace": "first_k_dense"}
MOE_ONLY = {"mlp_only_layers", "num_experts", "num_experts_per_tok", "decoder_sparse_step"}
DSV3_ONLY = {"first_k_dense_replace", "moe_layer_freq", "n_routed_experts", "kv_lora_rank",
             "q_lora_rank"}


@dataclass
class Outcome:
    argv: list
    names: tuple  # what an exit-2 message must mention (any of)
    code: int | None = None
    err: str = ""
    error: str = ""  # an exception that escaped main()
    cpu_s: float = 0.0


@dataclass
class Report:
    outcomes: list = field(default_factory=list)

    def count(self, pred) -> int:
        return sum(1 for o in self.outcomes if pred(o))

    def summary(self) -> dict:
        return {"inputs": len(self.outcomes),
                "by_command": {c: self.count(lambda o, c=c: o.argv[0] == c) for c in BASE},
                "exit_0": self.count(lambda o: o.code == 0),
                "exit_1": self.count(lambda o: o.code == 1),
                "exit_2": self.count(lambda o: o.code == 2),
                "tracebacks": len(self.tracebacks()), "slow_over_1s": len(self.slow()),
                "unnamed_field": len(self.unnamed()), "multi_line": len(self.multi_line())}

    def tracebacks(self):
        return [o for o in self.outcomes if o.error or "Traceback" in o.err]

    def slow(self, limit: float = 1.0):
        return [o for o in self.outcomes if o.cpu_s > limit]

    def unnamed(self):
        return [o for o in self.outcomes if o.code == 2
                and not any(n.lower() in o.err.lower() for n in o.names)]

    def multi_line(self):
        return [o for o in self.outcomes if o.code == 2 and len(o.err.strip().splitlines()) != 1]


def _config_file(tmp: Path, rng: random.Random, i: int) -> tuple[Path, str]:
    key = rng.choice(list(CONFIG_FIELDS))
    base = QWEN_MOE if key in MOE_ONLY else DSV3 if key in DSV3_ONLY else LLAMA
    cfg = dict(base)
    cfg[key] = rng.choice(CONFIG_FIELDS[key])
    path = tmp / f"cfg{i}.json"
    path.write_text(json.dumps(cfg))
    return path, key


def _odd_file(tmp: Path, rng: random.Random, i: int) -> Path:
    """A file that is JSON of the wrong shape, deeply nested, huge or not JSON at all."""
    kind = rng.randrange(6)
    path = tmp / f"odd{i}.json"
    if kind == 0:
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == 1:
        path.write_text("[1, 2, 3]")
    elif kind == 2:
        path.write_text('{"records": 5}')
    elif kind == 3:
        path.write_bytes(b"\xff\xfe\x00garbage")
    elif kind == 4:
        path.write_text(json.dumps({"a": "x" * (5 << 20)}))
    else:
        path.write_text('{"model_type": "llama"}')
    return path


def inputs(n: int, seed: int, tmp: Path):
    """n (argv, names) pairs: one hostile value each, over every sub-command."""
    rng = random.Random(seed)
    commands = list(BASE)
    for i in range(n):
        cmd = commands[i % len(commands)]
        argv = list(BASE[cmd])
        roll = rng.random()
        if cmd in ("ledger", "advise", "plan") and roll < 0.18:
            path, key = _config_file(tmp, rng, i)
            j = argv.index("--model")
            argv[j:j + 2] = ["--hf-config", str(path)]
            if key in MOE_ONLY | DSV3_ONLY:  # an MoE model needs sp with tp; keep tp 1
                i_tp = argv.index("--tp")
                argv[i_tp:i_tp + 2] = ["--tp", "1"]
            yield argv, (key, SPEC_NAME.get(key, key), "hf-config", "config")
            continue
        if cmd == "validate" or (cmd in ("trace",) and roll < 0.1):
            flag = "--rescore" if cmd == "validate" and roll < 0.5 else rng.choice(TEXT_FLAGS[cmd])
            value = str(_odd_file(tmp, rng, i)) if flag == "--rescore" and roll < 0.35 \
                else rng.choice(TEXT)
            if cmd == "validate" and flag != "--rescore":
                argv = ["validate", flag, value, "--device", "cpu"] if flag != "--device" \
                    else ["validate", "--device", value, "--cases", "no-such-case"]
                if flag in ("--out",):
                    argv += ["--cases", "no-such-case"]
            else:
                argv = ["validate", flag, value] if cmd == "validate" else argv + [flag, value]
            names = (flag.strip("-"), flag.strip("-").replace("-", "_"), "cases", "device")
            yield argv, names + (("module",) if cmd == "trace" else ())
            continue
        pools = [(INT_FLAGS.get(cmd, []), INTS), (FLOAT_FLAGS.get(cmd, []), FLOATS),
                 (TEXT_FLAGS.get(cmd, []), TEXT)]
        flags, values = rng.choice([p for p in pools if p[0]])
        flag, value = rng.choice(flags), rng.choice(values)
        if rng.random() < 0.1:  # the flag repeated, argparse keeps the last (plan: appends)
            argv += [flag, rng.choice(values)]
        argv += [flag, value]
        names = (flag.strip("-"), flag.strip("-").replace("-", "_"))
        if cmd == "trace":
            names += ("module",)  # a valid value reaches the (failing) module import
        yield argv, names


def run_one(argv, names) -> Outcome:
    from memledger.cli import main
    out = Outcome(argv=argv, names=names)
    err, sink = io.StringIO(), io.StringIO()
    t0 = time.process_time()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(sink):
            out.code = main(list(argv))
    except BaseException as e:  # noqa: BLE001 - the contract is that nothing escapes
        out.error = f"{type(e).__name__}: {str(e)[:200]}"
    out.cpu_s = time.process_time() - t0
    out.err = err.getvalue()
    return out


def fuzz(n: int = 1600, seed: int = 14) -> Report:
    """Run n seeded inputs; each sub-command runs once untimed first (imports: torch for trace)."""
    report = Report()
    for argv in BASE.values():
        run_one(argv, ())
    # the suite's heap (torch, transformers, earlier tests) is frozen out of the collector, so a
    # full collection during one input costs that input's objects, not the process's (CI saw a
    # 5 ms input take 1.01 CPU-s inside the whole suite)
    gc.collect()
    gc.freeze()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for argv, names in inputs(n, seed, Path(tmp)):
                report.outcomes.append(run_one(argv, names))
    finally:
        gc.unfreeze()
    return report


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # this worktree's memledger, not an installed one
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1600
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 14
    t0 = time.perf_counter()
    r = fuzz(n, seed)
    print(json.dumps({**r.summary(), "wall_s": round(time.perf_counter() - t0, 1)}, indent=1))
    for label, bad in (("traceback", r.tracebacks()), ("slow", r.slow()),
                       ("unnamed", r.unnamed()), ("multi-line", r.multi_line())):
        for o in bad[:15]:
            print(label, o.argv[:12], o.code, (o.error or o.err)[:300].replace("\n", " | "))
