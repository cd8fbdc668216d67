"""The app's training-config import (sidebar) and the Share popover's "Copy as …" (AppTest)."""
from __future__ import annotations

from pathlib import Path

from conftest import figures

LEDGER = "pages/ledger.py"
FIX = Path(__file__).parent / "fixtures" / "configs"


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def opened(at):
    at.session_state["train_import_open"] = True
    return at


def test_pasted_megatron_script_sets_the_sidebar_and_the_link(app_test):
    at = ok(opened(app_test(LEDGER)).run())
    at.text_area(key="train_text").set_value((FIX / "llama3_70b_megatron.sh").read_text())
    at.button(key="train_go").click().run()
    ok(at)
    q = at.query_params
    ss = at.session_state
    assert (ss["sb_tp"], ss["sb_pp"], ss["sb_seq"], ss["sb_m"], ss["sb_zero"]) == (8, 4, 8192, 64, 1)
    assert ss["sb_recompute"] == "selective" and ss["sb_layout"] == "even"
    assert q["model"].startswith("spec:") and (q["seq"], q["m"], q["layout"]) == ("8192", "64", "even")
    kinds = {r["kind"] for r in at.session_state["_ml_train_rows"]}
    assert {"read", "default", "ignored", "unresolved"} <= kinds
    link = "&".join(f"{k}={v}" for k, v in q.items())  # the link carries the configuration
    fresh = ok(app_test(LEDGER, link).run())
    assert figures(fresh)[0] == figures(at)[0] and fresh.error == []


def test_a_bad_file_is_an_error_and_changes_nothing(app_test):
    at = ok(opened(app_test(LEDGER, "model=llama3-8b&tp=2&pp=1&world=8")).run())
    before = dict(at.query_params)
    for text in ("distributed_type: FSDP\nfsdp_config: [oops\n",
                 "a: !!python/object/apply:os.system ['true']\n", "hello: world\n"):
        at.text_area(key="train_text").set_value(text)
        at.button(key="train_go").click().run()
        ok(at)
        assert any("Could not import this training config" in e.value for e in at.error)
        assert dict(at.query_params) == before


def test_share_popover_copies_the_configuration_as_framework_files(app_test):
    at = ok(app_test(LEDGER, "model=llama3-8b&tp=2&pp=1&world=8&zero=1").run())
    at.selectbox(key="share_copy_as").set_value("Megatron flags").run()
    code = [c.value for c in ok(at).code]
    assert any("--tensor-model-parallel-size 2" in c and "--use-distributed-optimizer" in c
               for c in code)
    at.selectbox(key="share_copy_as").set_value("torchtitan config").run()
    # torchtitan has no ZeRO-1, DeepSpeed no Megatron fp32 main-grads recipe: said, not written
    assert any("torchtitan cannot express ZeRO-1" in c.value.replace("\\", "")
               for c in ok(at).caption)
    at.selectbox(key="share_copy_as").set_value("DeepSpeed JSON").run()
    assert any("deepspeed cannot express precision megatron" in c.value.replace("\\", "")
               for c in ok(at).caption)
    ds = ok(app_test(LEDGER, "model=llama3-8b&tp=1&pp=1&world=8&zero=3&precision=mixed16").run())
    ds.selectbox(key="share_copy_as").set_value("DeepSpeed JSON").run()
    assert any('"stage": 3' in c.value and '"train_batch_size": 64' in c.value
               for c in ok(ds).code)


def test_a_pasted_torchtitan_launch_sets_its_overrides_and_a_named_file_is_an_error(app_test):
    at = ok(opened(app_test(LEDGER)).run())
    at.text_area(key="train_text").set_value(
        "NGPU=8 ./run_train.sh --model.name=qwen3 --model.flavor=14B --training.seq_len=4096 "
        "--parallelism.tensor_parallel_degree 2\n")
    at.button(key="train_go").click().run()
    ok(at)
    assert at.session_state["sb_tp"] == 2 and at.session_state["sb_seq"] == 4096
    assert at.query_params["model"].startswith("spec:")  # qwen3 14B: the flavor's shape
    before = dict(at.query_params)
    at.text_area(key="train_text").set_value("CONFIG_FILE=/etc/job.toml ./run_train.sh\n")
    at.button(key="train_go").click().run()
    ok(at)
    assert any("was not given" in e.value for e in at.error)
    assert dict(at.query_params) == before
