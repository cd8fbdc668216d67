"""A torchtitan launch (`CONFIG_FILE=job.toml ./run_train.sh --section.key=value …`, or
`torchrun … -m torchtitan.train --job.config_file …`) reads as the job config it runs: the TOML
with the command line's overrides on top (torchtitan 0.2 config/manager.py), each row on the
line of the file that set it; a pasted launch never reads a path it names."""
from __future__ import annotations

import json

import pytest

from memledger.cli import main
from memledger.configs import read_text
from memledger.configs.source import ConfigError

JOB = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 2
seq_len = 8192
[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
[compile]
enable = true
components = ["model", "loss"]
"""
# the same job with the launch's overrides written into it
OVERRIDDEN = JOB.replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 2").replace(
    "local_batch_size = 2", "local_batch_size = 1").replace("enable = true", "enable = false")
LAUNCH = """#!/bin/bash
NGPU=8
PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" CONFIG_FILE="./train_configs/job.toml" \\
  ./run_train.sh --parallelism.tensor-parallel-degree 2 \\
  --training.local_batch_size=1 --compile.no-enable --metrics.log_freq=1
"""


def _config(capsys, *argv):
    rc = main(["config", *map(str, argv), "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_a_launch_runs_its_job_config_with_the_overrides_on_top(tmp_path, capsys):
    job, edited, launch = tmp_path / "job.toml", tmp_path / "edited.toml", tmp_path / "run.sh"
    job.write_text(JOB)
    edited.write_text(OVERRIDDEN)
    launch.write_text(LAUNCH)
    got = _config(capsys, launch, job, "--world", "8")
    want = _config(capsys, edited, "--world", "8")
    assert got["flags"] == want["flags"] and "--tp" in got["flags"]
    where = {r["key"]: (r["file"], r["line"]) for r in got["rows"] if r["kind"] == "read"}
    assert where["parallelism.tensor_parallel_degree"] == (str(launch), 4)
    assert where["compile.enable"] == (str(launch), 5)
    assert where["training.seq_len"] == (str(job), 6)
    keys = [r["key"] for r in got["rows"]]
    assert keys.count("training.seq_len") == 1  # the job config is read once, under the launch


def test_the_job_config_beside_a_launch_on_disk_is_found(tmp_path, capsys):
    (tmp_path / "train_configs").mkdir()
    (tmp_path / "train_configs" / "job.toml").write_text(JOB)
    (tmp_path / "run.sh").write_text(LAUNCH)
    got = _config(capsys, tmp_path / "run.sh", "--world", "8")
    assert "--tp" in got["flags"] and got["flags"][got["flags"].index("--tp") + 1] == "2"


def test_a_torchrun_module_launch_with_job_config_file(tmp_path, capsys):
    (tmp_path / "job.toml").write_text(JOB)
    launch = tmp_path / "launch.sh"
    launch.write_text("torchrun --nproc_per_node=8 -m torchtitan.train "
                      "--job.config_file job.toml --model.converters float8,other\n")
    rows = _config(capsys, launch, "--world", "8")["rows"]
    by_key = {(r["kind"], r["key"]): r for r in rows}
    assert by_key[("read", "model.converters")]["sets"] == {"float8": "tensorwise"}
    assert ("unmodelled", "model.converters") in by_key  # 'other' named


def test_a_missing_job_config_is_one_line_naming_it(tmp_path, capsys):
    launch = tmp_path / "run.sh"
    launch.write_text(LAUNCH)
    assert main(["config", str(launch)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "./train_configs/job.toml" in err and "--config" in err


def test_a_pasted_launch_never_reads_a_path_it_names(tmp_path):
    secret = tmp_path / "job.toml"
    secret.write_text(JOB)
    with pytest.raises(ConfigError, match="was not given"):
        read_text(f"CONFIG_FILE={secret} ./run_train.sh --training.seq_len=4096\n", "up.sh")
    imp = read_text("./run_train.sh --training.seq_len=4096 --parallelism.tensor_parallel_degree 4\n",
                    "up.sh")
    assert imp.flags()["seq"] == 4096 and imp.flags()["tp"] == 4


def test_a_hostile_launch_is_bounded(capsys):
    with pytest.raises(ConfigError, match="nests deeper than 8"):
        read_text("./run_train.sh --" + "a." * 5000 + "b=1\n", "up.sh")


@pytest.mark.parametrize("text", [
    '{{"per_device_train_batch_size": 1, "output_dir": "o", "deepspeed": "{path}"}}',
    "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: {path}\n",
])
def test_a_pasted_file_never_reads_a_file_it_names(tmp_path, text):
    """Hosted app: an upload naming a JSON on the server (its keys would be listed) is refused."""
    secret = tmp_path / "ds.json"
    secret.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}')
    with pytest.raises(ConfigError, match="never reads"):
        read_text(text.format(path=secret), "up")


def test_a_03_launch_pasted_never_runs_torchtitan():
    with pytest.raises(ConfigError, match="read by the CLI from a file"):
        read_text("MODULE=llama3 CONFIG=llama3_8b ./run_train.sh\n", "up.sh")


def test_a_03_launch_reads_the_registry_config_with_its_overrides(tmp_path, capsys):
    pytest.importorskip("torchtitan.models.llama3")
    launch = tmp_path / "run.sh"
    launch.write_text("MODULE=llama3 CONFIG=llama3_8b ./run_train.sh "
                      "--parallelism.tensor_parallel_degree 2 --training.seq_len 4096\n")
    got = _config(capsys, launch, "--world", "8")
    f = got["flags"]
    flags = {a: (b if not b.startswith("--") else True) for a, b in zip(f, f[1:] + ["--"])
             if a.startswith("--")}
    # llama3_8b (torchtitan 0.3 config_registry.py): op SAC, its chunked loss, era 0.3
    assert (flags["--tp"], flags["--seq"], flags["--recompute"]) == ("2", "4096", "op")
    assert flags["--torchtitan-version"] == "0.3" and flags["--loss"] == "chunked"
    launch.write_text("./run_train.sh --module llama3 --config llama3_nope\n")
    assert main(["config", str(launch)]) == 2
    assert "llama3_8b" in capsys.readouterr().err


@pytest.mark.parametrize("extra,want", [
    ({}, {"--micro-batch": "2", "--seq": "8192", "--micro-batches": "2"}),
    ({"parallelism": {"pipeline_parallel_degree": 2, "num_pp_microbatches": 4}},
     {"--micro-batch": "2", "--pp": "2", "--micro-batches": "4"}),
])
def test_batches_counted_in_tokens_are_whole_sequences(tmp_path, capsys, extra, want):
    """torchtitan after 0.3: num_tokens_per_microbatch_per_dp_rank / max_context_length rows
    per micro-batch, num_pp_microbatches of them under PP, num_tokens_per_train_step the global
    batch (524,288 tokens = 64 sequences over dp 16 × 2 rows: 2 micro-batches)."""
    job = {"model_spec": {"name": "llama3", "flavor": "8B"},
           "training": {"num_tokens_per_microbatch_per_dp_rank": 16384,
                        "max_context_length": 8192},
           "parallelism": {"data_parallel_shard_degree": -1, **extra.get("parallelism", {})}}
    if not extra:
        job["training"]["num_tokens_per_train_step"] = 524288
    p = tmp_path / "job.json"
    p.write_text(json.dumps(job))
    f = _config(capsys, p, "--world", "16" if not extra else "32")["flags"]
    got = {a: b for a, b in zip(f, f[1:]) if a in want}
    assert got == want
    job["training"]["num_tokens_per_microbatch_per_dp_rank"] = 10000
    p.write_text(json.dumps(job))
    assert main(["config", str(p)]) == 2
    assert "not whole sequences of max_context_length 8192" in capsys.readouterr().err
