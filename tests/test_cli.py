"""Bad flags and config values: one line naming the option, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness.server import ROOT
from vita.config import Config

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def run_server(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "server.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize(("args", "option"), [
    (["--port", "70000"], "--port"),
    (["--port", "abc"], "--port"),
    (["--max_users", "0"], "--max_users"),
    (["--timeout", "-5"], "--timeout"),
    (["--model_path", "/no/such/model"], "--model_path"),
    (["--certfile", "/no/cert.pem", "--keyfile", "/no/key.pem"], "--certfile"),
    (["--certfile", __file__], "--certfile/--keyfile"),
    (["--config", "/no/such.yaml"], "--config"),
    (["--models_dir", "/no/models"], "--models_dir"),
    (["--log_level", "loud"], "--log_level"),
    (["--log_format", "xml"], "--log_format"),
    (["--llm_url", "gpu-box:8000"], "--llm_url"),
    (["--message_queue", "localhost:6379"], "--message_queue"),
])
def test_bad_value_exits_with_one_line_naming_the_option(args, option):
    result = run_server(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("server.py: error:") and option in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_config_value_names_the_key(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("vad:\n  start_threshold: 3\n")
    result = run_server("--config", str(config))
    assert result.returncode == 2 and "vad.start_threshold" in result.stderr
    config.write_text("llm:\n  no_such_knob: 1\n")
    result = run_server("--config", str(config))
    assert result.returncode == 2 and "llm.no_such_knob: unknown option" in result.stderr


def test_busy_port_is_reported_not_crashed(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_server("--port", str(port), "--state_dir", str(tmp_path))
    assert result.returncode == 2
    assert "--port" in result.stderr and "Traceback" not in result.stderr


def test_turn_log_flag_sets_the_path_or_turns_it_off(tmp_path):
    from vita.cli import config_from_args

    assert config_from_args(["--turn_log", "off"]).turn_log_path() is None
    path = tmp_path / "t.sqlite3"
    assert config_from_args(["--turn_log", str(path)]).turn_log_path() == path
    assert config_from_args(["--state_dir", str(tmp_path)]).turn_log_path() == tmp_path / "turns.sqlite3"


def test_vision_flag_turns_every_part_off_or_leaves_the_config():
    from vita.cli import config_from_args

    off = config_from_args(["--vision", "off"]).vision
    assert not (off.text or off.objects or off.people or off.hands)
    on = config_from_args(["--vision", "on"]).vision
    assert on.text and on.objects and on.people and on.hands


def test_a_remote_engine_needs_no_local_llm(tmp_path):
    """--llm_url replaces the bundled model: a models folder without it is fine, the other models still count."""
    from vita.cli import config_from_args
    config = config_from_args(["--llm_url", "http://127.0.0.1:8000/v1", "--models_dir", str(tmp_path)])
    assert config.llm.url == "http://127.0.0.1:8000/v1"
    result = run_server("--llm_url", "http://127.0.0.1:8000/v1", "--models_dir", str(tmp_path))
    chosen = Config().chosen_llm()[0]  # what this CPU would serve without --llm_url
    assert result.returncode == 2 and "whisper-base" in result.stderr and chosen not in result.stderr
