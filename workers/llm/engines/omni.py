"""Omni mode: models that take the utterance audio (and camera frames) themselves, with no ASR in between.

The mode is read from the model folder's ``config.json`` (no weights, no remote code): an ``audio_config``
(or a thinker's, for Qwen2.5-Omni) or a known audio model type means the model hears; a ``vision_config``
means it also sees. ``llm.input_mode`` can force either mode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from vita.messages import Picture
from workers.llm.engines.asr import WHISPER_RATE, pcm16_to_float
from workers.llm.engines.generation import EnginePrompt

# Model types vLLM serves with audio input whose configs may not carry an `audio_config` key.
AUDIO_MODEL_TYPES = frozenset({
    "qwen2_audio", "qwen2_5_omni", "qwen3_omni_moe", "ultravox", "gemma3n", "phi4mm", "phi4_multimodal",
    "voxtral", "granite_speech", "kimi_audio", "midashenglm", "minicpmo",
})
IMAGE_MODEL_TYPES = frozenset({"qwen2_5_omni", "qwen3_omni_moe", "gemma3n", "phi4mm", "phi4_multimodal",
                               "minicpmo"})


@dataclass(frozen=True)
class InputMode:
    omni: bool
    images: bool = False
    model_type: str = ""

    def describe(self) -> str:
        if not self.omni:
            return "text (cascade ASR)"
        return "omni (audio" + (" and images" if self.images else "") + " into the model)"


def read_model_config(model_dir: Path) -> dict:
    try:
        return json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def detect_input_mode(model_config: dict, forced: str = "auto") -> InputMode:
    """What the model takes, from its config; ``forced`` ('text' / 'omni') overrides detection."""
    thinker = model_config.get("thinker_config") or {}
    model_type = str(model_config.get("model_type", ""))
    hears = bool(model_config.get("audio_config") or thinker.get("audio_config")) or model_type in AUDIO_MODEL_TYPES
    sees = bool(model_config.get("vision_config") or thinker.get("vision_config")) or model_type in IMAGE_MODEL_TYPES
    if forced == "text" or (forced == "auto" and not hears):
        return InputMode(False, False, model_type)
    return InputMode(True, sees, model_type)


def utterance_audio(pcm: bytes, sample_rate: int) -> tuple[np.ndarray, int]:
    """int16 PCM to float32 at 16 kHz, the rate every audio LLM's feature extractor expects."""
    return pcm16_to_float(pcm, sample_rate), WHISPER_RATE


def frames_to_images(frames: tuple[Picture, ...], limit: int) -> tuple[np.ndarray, ...]:
    """Decode JPEG frames to RGB arrays, keeping at most ``limit`` spread evenly over the utterance."""
    if limit <= 0 or not frames:
        return ()
    if len(frames) > limit:
        picks = np.linspace(0, len(frames) - 1, limit).round().astype(int)
        frames = tuple(frames[i] for i in picks)
    images = []
    for frame in frames:
        bgr = cv2.imdecode(np.frombuffer(frame.image, dtype=np.uint8), cv2.IMREAD_COLOR)
        if bgr is not None:
            images.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    return tuple(images)


def load_processor(model_dir: Path):
    """The model's own processor (feature extractor, image processor, tokenizer, chat template)."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(model_dir))


def omni_prompt(kit: Any, req: Any, history: Any, images_limit: int) -> EnginePrompt:
    """An omni model's prompt: the utterance's audio and the turn's frames go to the model as they are."""
    audio = (utterance_audio(req.audio, req.sample_rate),) if req.audio else ()
    images = frames_to_images(req.frames, images_limit) if kit.mode.images else ()
    messages = kit.omni_prompts.messages(history, req.text, len(images), bool(audio))
    return EnginePrompt(kit.omni_prompts.build(messages), messages, (), audio, images)
