"""URL parameters <-> configuration: defaults left out, bad values named, nothing raises."""
import base64
import json
import zlib
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memledger.errors import SpecError
from memledger.presets import MODELS
from memledger.views.model_codec import decode_model, encode_model
from memledger.views.state import (CHOICES, CONFIG_KEYS, DEFAULT, INT_LIMITS, KEYS, Config,
                                   PageParam, load_model, page_to_params, parse_page_params,
                                   parse_params, to_params, to_specs)


def test_defaults_give_an_empty_query_string():
    assert to_params(DEFAULT) == {}
    assert parse_params({}) == (DEFAULT, [])


def test_only_changed_settings_reach_the_url():
    cfg = replace(DEFAULT, tp=4, sp=False, schedule="interleaved", vpp=2)
    assert to_params(cfg) == {"tp": "4", "vpp": "2", "sp": "0", "schedule": "interleaved"}


def test_every_config_field_is_a_share_link_key():
    assert set(CONFIG_KEYS) <= set(KEYS)
    assert set(KEYS) - set(CONFIG_KEYS) == {"dp"}


configs = st.builds(
    Config,
    model=st.sampled_from(list(MODELS)),
    gpu=st.sampled_from(CHOICES["gpu"]),
    **{k: st.integers(*INT_LIMITS[k]) for k in ("world", "tp", "pp", "vpp", "ep", "etp", "cp",
                                                 "dp_replicate", "zero", "mb", "seq", "m")},
    sp=st.booleans(),
    schedule=st.sampled_from(CHOICES["schedule"]),
    layout=st.sampled_from(["balanced", "even", "4,4,8"]),
    **{k: st.sampled_from(CHOICES[k]) for k in ("precision", "optimizer", "profile",
                                                 "attention", "recompute")},
)


@given(configs)
def test_any_configuration_round_trips_through_the_url(cfg):
    assert parse_params(to_params(cfg)) == (cfg, [])


@pytest.mark.parametrize("key,value,words", [
    ("tp", "banana", "integer"),
    ("pp", "0", "1..1024"),
    ("world", "99999999999999999999999", "integer"),
    ("world", "1000000000", "262144"),
    ("model", "gpt-9", "unknown preset"),
    ("gpu", "tpu-v5", "unknown value"),
    ("sp", "maybe", "1/0"),
    ("schedule", "1f2b", "unknown value"),
    ("layout", "4,x,8", "layers per stage"),
    ("zero", "4", "0..3"),
    ("seq", "-5", "1.."),
    ("dp_replicate", "two", "integer"),
    ("dp_replicate", "0", "1..262144"),
    ("dp_replicate", "4.0", "integer"),
])
def test_a_bad_value_names_its_parameter_and_falls_back(key, value, words):
    cfg, issues = parse_params({key: value, "mb": "2"})
    assert [i.key for i in issues] == [key]
    assert words in issues[0].message
    assert getattr(cfg, key) == getattr(DEFAULT, key)
    assert cfg.mb == 2  # the good values of the same link are kept
    assert f"`{key}=" in str(issues[0])


def test_a_repeated_key_takes_the_last_value():
    assert parse_params({"tp": ["2", "4"]})[0].tp == 4


def test_dp_alone_sets_the_world_size():
    cfg, issues = parse_params({"tp": "2", "pp": "2", "dp": "8"})
    assert issues == [] and cfg.world == 32 and cfg.dp == 8


def test_dp_contradicting_world_is_reported_and_world_wins():
    cfg, issues = parse_params({"world": "64", "tp": "8", "pp": "4", "dp": "3"})
    assert [i.key for i in issues] == ["dp"] and cfg.world == 64
    assert "64" in issues[0].message


def test_an_hsdp_configuration_round_trips_through_its_link():
    """HSDP at world 32 (tp 1, pp 1: dp 32), ZeRO-3, four copies of an 8-rank shard group."""
    cfg = replace(DEFAULT, world=32, tp=1, pp=1, zero=3, dp_replicate=4)
    params = to_params(cfg)
    assert params == {"world": "32", "tp": "1", "pp": "1", "dp_replicate": "4", "zero": "3"}
    assert parse_params(params) == (cfg, [])
    par, _ = to_specs(cfg, load_model(cfg.model))
    assert (par.dp, par.dp_replicate, par.dense_dp) == (32, 4, 8)


def test_a_link_made_before_hsdp_opens_with_one_replica_and_keeps_it_out():
    cfg, issues = parse_params({"world": "32", "tp": "1", "pp": "1", "zero": "3"})
    assert issues == [] and cfg.dp_replicate == 1
    assert "dp_replicate" not in to_params(cfg)
    assert to_specs(cfg, load_model(cfg.model))[0].dense_dp == 32


def test_a_bad_replica_count_falls_back_to_one_and_says_so():
    cfg, issues = parse_params({"world": "32", "tp": "1", "pp": "1", "dp_replicate": "many"})
    assert cfg.dp_replicate == 1 and cfg.world == 32
    assert str(issues[0]) == ("`dp_replicate=many`: expected an integer 1..262144. "
                              "Using dp_replicate=1.")


def test_a_replica_count_that_does_not_divide_dp_is_the_cores_call():
    """Parsing checks the value alone; 3 copies of dp 32 is refused by the core, naming the
    key, and the repair (tests/test_views_options.py) moves it back to 1."""
    cfg, issues = parse_params({"world": "32", "tp": "1", "pp": "1", "dp_replicate": "3"})
    assert issues == [] and cfg.dp_replicate == 3
    with pytest.raises(SpecError, match="dp_replicate=3 must divide dp=32") as e:
        to_specs(cfg, load_model(cfg.model))
    assert e.value.field == "dp_replicate"


def test_an_absurdly_long_value_is_refused_without_parsing():
    cfg, issues = parse_params({"model": "spec:" + "A" * 10_000})
    assert issues[0].key == "model" and cfg.model == DEFAULT.model


@pytest.mark.parametrize("name", list(MODELS))
def test_every_preset_survives_the_url_as_an_encoded_spec(name):
    m = MODELS[name]
    text = encode_model(m)
    assert len(text) < 1200
    assert decode_model(text) == m
    assert parse_params({"model": text})[0].model == text
    assert load_model(text) == m


def test_a_damaged_encoded_model_is_a_model_error():
    text = encode_model(MODELS["llama3-8b"])
    with pytest.raises(SpecError) as e:
        decode_model(text[:-7] + "!!!!!!!")
    assert e.value.field == "model"


def _pack(obj) -> str:
    raw = zlib.compress(json.dumps(obj).encode())
    return "spec:" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_an_encoded_model_with_wrong_types_or_fields_is_refused():
    good = json.loads(zlib.decompress(base64.urlsafe_b64decode(
        encode_model(MODELS["llama3-8b"])[5:] + "==")))
    for bad in ({**good, "n_layers": "32"}, {**good, "evil": 1}, {**good, "n_heads": 0},
                {**good, "tied_embeddings": 1}, [1, 2]):
        with pytest.raises(SpecError):
            decode_model(_pack(bad))


def test_a_compressed_bomb_is_refused():
    bomb = "spec:" + base64.urlsafe_b64encode(zlib.compress(b" " * 10_000_000)).decode()
    with pytest.raises(SpecError, match="larger than"):
        decode_model(bomb)


def test_specs_follow_the_configuration():
    m = load_model("deepseek-v3")
    cfg = replace(DEFAULT, model="deepseek-v3", world=2048, tp=8, pp=16, ep=64)
    par, train = to_specs(cfg, m)
    assert (par.tp, par.pp, par.ep, par.dp, par.zero) == (8, 16, 64, 16, 1)
    assert sum(par.layout) == 61 and len(par.layout) == 16  # balanced: 61 layers on 16 stages
    assert (train.micro_batch, train.seq, train.micro_batches) == (1, 4096, 8)


def test_balanced_layout_refuses_more_stages_than_layers():
    m = load_model("llama3.2-1b")  # 16 layers
    with pytest.raises(SpecError) as e:
        to_specs(replace(DEFAULT, model="llama3.2-1b", tp=1, pp=32, world=32), m)
    assert e.value.field == "pp"


PAGE = (PageParam("compare", False),
        PageParam("schedules", ("1f1b", "zb-v"), choices=("1f1b", "zb-v", "gpipe"), multi=True,
                  max_items=2),
        PageParam("rank", -1, limits=(-1, 100)))


def test_page_parameters_round_trip_and_omit_defaults():
    values = {"compare": True, "schedules": ("gpipe", "1f1b"), "rank": 3}
    params = page_to_params(values, PAGE)
    assert params == {"compare": "1", "schedules": "gpipe,1f1b", "rank": "3"}
    assert parse_page_params(params, PAGE) == (values, [])
    assert page_to_params({"compare": False, "schedules": ("1f1b", "zb-v"), "rank": -1}, PAGE) == {}


def test_too_many_page_values_are_refused():
    values, issues = parse_page_params({"schedules": "1f1b,zb-v,gpipe"}, PAGE)
    assert issues[0].key == "schedules" and "at most 2" in issues[0].message
    assert values["schedules"] == ("1f1b", "zb-v")


def test_bad_page_parameters_are_named():
    bad = {"schedules": "1f1b,warp", "rank": "x", "compare": "2"}
    values, issues = parse_page_params(bad, PAGE)
    assert sorted(i.key for i in issues) == ["compare", "rank", "schedules"]
    assert values == {"compare": False, "schedules": ("1f1b", "zb-v"), "rank": -1}


def test_new_gpu_presets_carry_their_datasheet_numbers_and_sources():
    """Issue 32 #6: H800 (DeepSeek-V3's GPU: the H100's compute and memory, NVLink 400 GB/s
    bidirectional), GB200 / GB300 (NVL72, per GPU), B300 (HGX)."""
    from memledger.presets import GPUS
    h800, h100 = GPUS["h800"], GPUS["h100"]
    assert (h800.hbm_bytes, h800.bf16_flops, h800.fp8_flops) == \
        (h100.hbm_bytes, h100.bf16_flops, h100.fp8_flops)
    assert h800.nvlink_bw == 200 * 10**9 < h100.nvlink_bw
    assert GPUS["gb200"].hbm_bytes == 186 * 10**9 and GPUS["gb300"].hbm_bytes == 288 * 10**9
    assert GPUS["b300"].hbm_bytes == 288 * 10**9
    assert GPUS["gb200"].fp8_flops == 5 * 10**15 and GPUS["b300"].bf16_flops == 2250 * 10**12
    for key in ("h800", "gb200", "gb300", "b300"):
        assert "datasheet" in GPUS[key].source


def test_a_custom_gpu_is_one_bounded_value_the_share_link_carries():
    from memledger.errors import SpecError
    from memledger.presets import gpu
    from memledger.views.state import hardware
    cfg, issues = parse_params({"gpu": "custom:96,0450,50,989"})
    assert issues == [] and cfg.gpu == "custom:96,450,50,989"  # one spelling
    assert to_params(cfg) == {"gpu": "custom:96,450,50,989"}
    assert parse_params(to_params(cfg))[0] == cfg
    hw = hardware(cfg)
    assert hw.hbm_bytes == 96 * 2**30 and hw.nvlink_bw == 450 * 10**9
    assert hw.network_bw == 50 * 10**9 and hw.bf16_flops == 989 * 10**12
    for bad, why in (("custom:96,450,50", "expected custom:"), ("custom:0,450,50,989", "1..4,096"),
                     ("custom:96,450,50,1e9", "bf16 TFLOP/s"), ("custom:" + "9" * 80, "expected")):
        cfg, issues = parse_params({"gpu": bad})
        assert cfg.gpu == "h100" and issues[0].key == "gpu" and why in issues[0].message, bad
        with pytest.raises(SpecError, match=r"^gpu: "):
            gpu(bad)


def test_deepseek_v3s_start_names_the_gpu_it_was_trained_on_and_the_one_priced():
    from memledger.views.state import start_of
    _, said = start_of("deepseek-v3", Config())
    assert "They trained on H800 SXM; this page prices the sidebar's H100 SXM" in said
    _, said = start_of("deepseek-v3", Config(gpu="h800"))
    assert "They trained on" not in said
