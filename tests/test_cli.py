"""The CLI contract: --json with integer bytes, a readable GiB table, exit 2 on bad input."""
import json

from memledger.ledger.pipeline.schedules import balanced_layout
from memledger.presets import gpu
import subprocess
import sys

from memledger import ParallelSpec, TrainSpec, build_ledger, model
from memledger.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "memledger", *args], capture_output=True, text=True)


def test_json_matches_the_api_byte_for_byte(capsys):
    assert main(["ledger", "--model", "llama3-8b", "--tp", "2", "--pp", "2", "--dp", "2",
                 "--zero", "1", "--micro-batches", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    led = build_ledger(model("llama3-8b"), ParallelSpec(tp=2, pp=2, dp=2, zero=1, sp=True,
                                                        layout=balanced_layout(32, 2)),
                       TrainSpec(micro_batches=4), hardware=gpu("h100"))  # the shared defaults
    assert out == json.loads(json.dumps(led.to_dict()))
    r0 = out["ranks"][0]
    assert set(r0["rows"]) == {"weights", "gradients", "optimizer", "activations", "communication", "runtime"}
    assert all(isinstance(v, int) for v in r0["rows"].values())
    assert all(isinstance(i["bytes"], int) for i in r0["items"])
    assert isinstance(out["n_params"], int) and out["most_loaded_rank"] in (0, 1)
    assert out["config"]["parallel"]["tp"] == 2


def test_plain_output_is_a_gib_table_with_a_verdict(capsys):
    assert main(["ledger", "--model", "llama3-70b", "--tp", "8", "--pp", "4", "--world", "64",
                 "--gpu", "h100"]) == 0
    text = capsys.readouterr().out
    assert "GiB (2^30 bytes)" in text and "H100" in text and ("fits" in text or "OVER" in text)


def test_bad_arguments_exit_2_with_one_line_and_no_traceback():
    for args in (["ledger", "--model", "llama3-8b", "--tp", "banana"],
                 ["ledger", "--model", "llama3-8b", "--tp", "3"],
                 ["ledger", "--model", "gpt-9"],
                 ["ledger", "--model", "llama3-8b", "--world", "100", "--tp", "8"],
                 ["ledger", "--model", "llama3-8b", "--layout", "a,b"]):
        res = run(*args)
        assert res.returncode == 2, args
        assert "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_layout_balanced_makes_61_layers_fit_16_stages(capsys):
    assert main(["ledger", "--model", "deepseek-v3", "--tp", "8", "--pp", "16", "--ep", "64",
                 "--world", "2048", "--layout", "balanced", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["ranks"]) == 16


def test_a_closed_pipe_ends_the_output_quietly():
    """`memledger ledger … | head -1` prints one line, no error, exit 0."""
    import subprocess
    import sys
    cmd = (f"{sys.executable} -m memledger ledger --model deepseek-v3 --tp 8 --pp 16 --ep 64 "
           "--world 2048 --layout balanced --items | head -1; echo \"rc=${PIPESTATUS[0]}\"")
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert out.stderr == "" and out.stdout.strip().endswith("rc=0")
    assert len(out.stdout.strip().splitlines()) == 2


def test_the_cli_and_the_dashboard_start_from_the_same_defaults(capsys):
    """One set of defaults (memledger.presets.defaults): a flag left out means what the
    dashboard opens with, and --help says so."""
    from memledger.views.compute import ledger_for
    from memledger.views.state import DEFAULT, load_model
    assert main(["ledger", "--model", DEFAULT.model, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    dash = ledger_for(load_model(DEFAULT.model), DEFAULT)
    assert [r["peak_total_bytes"] for r in out["ranks"]] == [r.peak_total_bytes for r in dash.ranks]
    assert out["config"]["hardware"]["name"] == dash.hardware.name
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        main(["ledger", "--help"])
    text = " ".join(buf.getvalue().split())
    for flag in ("--tp", "--pp", "--zero", "--micro-batches", "--seq", "--gpu", "--layout"):
        assert flag in text
    assert "(default: 8)" in text and "(default: 4)" in text and "(default: h100)" in text
