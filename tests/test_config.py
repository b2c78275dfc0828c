from __future__ import annotations

import pytest

from vita.cli import config_from_args
from vita.config import DEFAULT_CONFIG_PATH, Config, ConfigError, load_config
from vita.config_checks import validate

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def test_default_yaml_equals_builtin_defaults():
    # The YAML documents the defaults; both must agree or the comments lie.
    assert load_config(DEFAULT_CONFIG_PATH) == Config()


def test_vita_defaults():
    config = config_from_args([])
    assert (config.server.ip, config.server.port, config.server.max_users, config.server.timeout) == \
        ("127.0.0.1", 8081, None, 600.0)  # max_users auto: sized from the measured speed
    assert config.server.tls is True


def test_max_users_auto_from_the_flag_and_the_yaml(tmp_path):
    (tmp_path / "five.yaml").write_text("server:\n  max_users: 5\n")
    assert config_from_args(["--config", str(tmp_path / "five.yaml")]).server.max_users == 5
    assert config_from_args(["--config", str(tmp_path / "five.yaml"), "--max_users", "auto"]).server.max_users is None
    (tmp_path / "auto.yaml").write_text("server:\n  max_users: auto\n")
    assert config_from_args(["--config", str(tmp_path / "auto.yaml")]).server.max_users is None


def test_flags_override_yaml(tmp_path):
    config = config_from_args(["--ip", "0.0.0.0", "--port", "9000", "--max_users", "5", "--timeout", "30",
                               "--no_tls", "--model_path", str(tmp_path)])
    assert (config.server.ip, config.server.port, config.server.max_users, config.server.timeout) == \
        ("0.0.0.0", 9000, 5, 30.0)
    assert config.server.tls is False
    assert config.llm_model_path() == tmp_path.resolve()


def test_wrong_type_in_yaml_names_the_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("server:\n  port: eighty\n")
    with pytest.raises(ConfigError, match="server.port: must be an integer"):
        load_config(path)


def test_end_threshold_may_not_exceed_start(tmp_path):
    config = Config()
    config.vad.end_threshold = 0.9
    with pytest.raises(ConfigError, match="vad.end_threshold"):
        validate(config)


def test_models_dir_env_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv("VITA_MODELS_DIR", str(tmp_path))
    assert Config().models_path() == tmp_path


@pytest.mark.parametrize("span_ms", [-1, 5000])
def test_a_barge_in_span_out_of_range_is_refused(span_ms):
    config = Config()
    config.turn.barge_in_span_ms = span_ms
    with pytest.raises(ConfigError, match="turn.barge_in_span_ms"):
        validate(config)
    config.turn.barge_in_span_ms = 0  # off
    validate(config)


@pytest.mark.parametrize(("key", "value"), [("reading_below", 0.5), ("reading_below", -0.95),
                                            ("reading_weight", 0.0), ("reading_weight", 2.0)])
def test_a_reading_out_of_range_is_refused(key, value):
    config = Config()
    setattr(config.asr, key, value)  # (-0.95: under ask_again_below, where nothing is left to read)
    with pytest.raises(ConfigError, match=f"asr.{key}"):
        validate(config)
    config.asr.reading_below, config.asr.reading_weight = None, 0.1  # off
    validate(config)


@pytest.mark.parametrize(("key", "value"), [("redecode_below", 0.5), ("redecode_below", -20.0),
                                            ("redecode_beam_size", 1), ("redecode_beam_size", 50)])
def test_a_beam_redecode_out_of_range_is_refused(key, value):
    config = Config()
    setattr(config.asr, key, value)
    with pytest.raises(ConfigError, match=f"asr.{key}"):
        validate(config)
    config.asr.redecode_below, config.asr.redecode_beam_size = None, 5  # off
    validate(config)


@pytest.mark.parametrize("workers", [0, 9])
def test_asr_workers_out_of_range_are_refused(workers):
    config = Config()
    config.asr.workers = workers
    with pytest.raises(ConfigError, match="asr.workers"):
        validate(config)
    config.asr.workers = 1  # one after another
    validate(config)


@pytest.mark.parametrize(("chunk", "share"), [(16, None), (4096, None), (-1, None), (128, 256), (None, -1),
                                              (None, 500)])  # (the CPU's steps are of 128)
def test_prefill_steps_out_of_range_are_refused(chunk, share):
    config = Config()
    config.llm.prefill_chunk_tokens, config.llm.prefill_share_tokens = chunk, share
    with pytest.raises(ConfigError, match="llm.prefill_"):
        validate(config)
    # vLLM's own; the CPU's; set; a cap alone; the CPU's steps with another cap
    for chunk, share in ((0, 0), (None, None), (256, 64), (0, 128), (None, 128)):
        config.llm.prefill_chunk_tokens, config.llm.prefill_share_tokens = chunk, share
        validate(config)
