"""A model by its Hugging Face Hub id (`meta-llama/Llama-3.1-8B`): its config.json from, in order,
the catalog shipped in `memledger/model/catalog/` (works offline), the local Hugging Face cache
(`huggingface_hub`'s, so offline mode reads what is there), or the Hub itself.

Reads are bounded: an id must look like `org/name`, a config.json larger than MAX_CONFIG_BYTES is
refused before it is parsed (on the Hub: from its metadata, before it is downloaded), and a
network failure or a missing file is one SpecError naming the id and every place looked in.
Ignores: gated repositories' tokens beyond what `huggingface_hub` finds itself (HF_TOKEN).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from memledger.errors import SpecError
from memledger.model.hf_config import from_hf_config
from memledger.specs.model import ModelSpec

CATALOG_DIR = Path(__file__).parent / "catalog"
MAX_CONFIG_BYTES = 1_000_000
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def catalog() -> dict[str, Path]:
    """Hub id -> shipped config.json (file names spell the id with `--` for the slash)."""
    return {p.stem.replace("--", "/", 1): p for p in sorted(CATALOG_DIR.glob("*.json"))}


def _check_id(repo_id: str) -> str:
    repo_id = (repo_id or "").strip()
    if not REPO_ID.match(repo_id) or ".." in repo_id:
        raise SpecError("hf_id", f"expected a Hugging Face model id such as "
                                 f"meta-llama/Llama-3.1-8B (org/name), got {repo_id[:100]!r}")
    return repo_id


def _read(path: Path, where: str) -> dict:
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise SpecError("hf_id", f"{where}: config.json is larger than {MAX_CONFIG_BYTES:,} bytes")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SpecError("hf_id", f"{where}: config.json is not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise SpecError("hf_id", f"{where}: config.json is not a JSON object")
    return cfg


def _from_cache(repo_id: str, cache_dir) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    hit = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir)
    return Path(hit) if isinstance(hit, str) else None


def _from_hub(repo_id: str, cache_dir) -> Path:
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    meta = get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=10)
    if meta.size is not None and meta.size > MAX_CONFIG_BYTES:
        raise SpecError("hf_id", f"{repo_id}: config.json is {meta.size:,} bytes, more than "
                                 f"{MAX_CONFIG_BYTES:,}")
    return Path(hf_hub_download(repo_id, "config.json", cache_dir=cache_dir, etag_timeout=10))


def hub_config(repo_id: str, *, offline: bool | None = None, cache_dir=None) -> dict:
    """The config.json of `repo_id` as a dict (see the module docstring for where it looks).
    `offline` defaults to huggingface_hub's HF_HUB_OFFLINE."""
    repo_id = _check_id(repo_id)
    shipped = catalog().get(repo_id)
    if shipped is not None:
        return _read(shipped, f"{repo_id} (shipped catalog)")
    cached = _from_cache(repo_id, cache_dir)
    if cached is not None:
        return _read(cached, f"{repo_id} (Hugging Face cache)")
    if offline is None:
        try:
            from huggingface_hub import constants
            offline = bool(constants.HF_HUB_OFFLINE)
        except ImportError:
            offline = True
    looked = "not in memledger's catalog, not in the local Hugging Face cache"
    if offline:
        raise SpecError("hf_id", f"{repo_id}: {looked}, and the Hub is not asked in offline mode "
                                 f"(HF_HUB_OFFLINE); download it once online, or pass the file "
                                 f"with --hf-config")
    try:
        return _read(_from_hub(repo_id, cache_dir), f"{repo_id} (Hugging Face Hub)")
    except SpecError:
        raise
    except Exception as e:  # network, 404, gated repository: one line, not a traceback
        raise SpecError("hf_id", f"{repo_id}: {looked}, and the Hub did not give it "
                                 f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None


def hub_model(repo_id: str, *, offline: bool | None = None, cache_dir=None) -> ModelSpec:
    """The ModelSpec of a Hub model, named by its id's last part."""
    cfg = hub_config(repo_id, offline=offline, cache_dir=cache_dir)
    return from_hf_config(cfg, name=repo_id.strip().split("/", 1)[1])
