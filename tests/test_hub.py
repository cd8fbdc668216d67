"""A model by its Hugging Face Hub id: the shipped catalog offline, a pre-filled local cache,
and clear one-line errors — never the network in tests."""
import json

import pytest

from memledger.errors import SpecError
from memledger.model.hf_config import load_hf_config
from memledger.model.hub import MAX_CONFIG_BYTES, catalog, hub_config, hub_model
from memledger.model.params import n_params

FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "hf"


def _cache(tmp_path, repo_id: str, config: dict | str) -> str:
    """A Hugging Face cache as huggingface_hub lays it out: refs/main → snapshots/<rev>/."""
    root = tmp_path / "hub" / ("models--" + repo_id.replace("/", "--"))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text("0123abcd")
    snap = root / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(tmp_path / "hub")


def test_the_catalog_works_offline_and_matches_the_published_configs():
    ids = catalog()
    assert {"meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3"} <= set(ids)
    m = hub_model("Qwen/Qwen3-30B-A3B", offline=True)
    assert n_params(m) == n_params(load_hf_config(FIXTURES / "Qwen3-30B-A3B.json"))
    assert m.name == "Qwen3-30B-A3B"


def test_llama_3_1_8b_has_llama_3_8b_dimensions():
    assert n_params(hub_model("meta-llama/Llama-3.1-8B", offline=True)) == 8_030_261_248


def test_a_model_in_the_local_cache_loads_offline(tmp_path):
    cfg = json.loads((FIXTURES / "tiny-llama-head-dim-null.json").read_text())
    cache = _cache(tmp_path, "acme/tiny-llama", cfg)
    assert hub_config("acme/tiny-llama", offline=True, cache_dir=cache) == cfg
    assert hub_model("acme/tiny-llama", offline=True, cache_dir=cache).name == "tiny-llama"


def test_offline_and_not_cached_says_where_it_looked(tmp_path):
    with pytest.raises(SpecError) as e:
        hub_config("acme/missing", offline=True, cache_dir=str(tmp_path))
    assert e.value.field == "hf_id" and "acme/missing" in str(e.value)
    assert "catalog" in str(e.value) and "cache" in str(e.value) and "offline" in str(e.value)


@pytest.mark.parametrize("bad", ["", "llama", "a/b/c", "../etc/passwd", "org/..", "org/na me",
                                 "x" * 200 + "/y"])
def test_ids_that_are_not_org_slash_name_are_refused(bad):
    with pytest.raises(SpecError, match="org/name"):
        hub_config(bad, offline=True)


def test_a_huge_or_broken_cached_config_is_refused_before_parsing(tmp_path):
    big = _cache(tmp_path / "a", "acme/big", " " * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(SpecError, match="larger than"):
        hub_config("acme/big", offline=True, cache_dir=big)
    broken = _cache(tmp_path / "b", "acme/broken", "{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        hub_config("acme/broken", offline=True, cache_dir=broken)


def test_the_cli_takes_a_hub_id(capsys, monkeypatch):
    from memledger.cli import main
    assert main(["ledger", "--hf-id", "meta-llama/Llama-3.2-1B", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["model"]["name"] == "Llama-3.2-1B"
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    assert main(["ledger", "--hf-id", "acme/not-there-7b"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_sidebar_loads_a_hub_id(app_test):
    at = app_test("pages/ledger.py")
    at.session_state["import_open"] = True  # the import widgets are built only while open
    at.run()
    at.text_input(key="hub_id").set_value("mistralai/Mixtral-8x7B-v0.1")
    at.button(key="hub_go").click().run()
    assert not at.exception
    assert "Mixtral-8x7B-v0.1" in at.subheader[0].value.replace("\\", "")  # Markdown-escaped
    assert at.query_params["model"].startswith("spec:")
