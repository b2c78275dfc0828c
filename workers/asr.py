"""Cascade speech recognition for text-only models: faster-whisper on the finished utterance."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# Whisper invents words ("Thank you.") for coughs and noise; its own confidences say when.
NO_SPEECH_PROB = 0.6
MIN_AVG_LOGPROB = -1.0
WHISPER_RATE = 16000


def pcm16_to_float(pcm: bytes, sample_rate: int) -> np.ndarray:
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    if sample_rate != WHISPER_RATE and audio.size:
        import soxr

        audio = soxr.resample(audio, sample_rate, WHISPER_RATE)
    return audio


class WhisperTranscriber:
    def __init__(self, model_dir: Path, compute_type: str, cpu_threads: int, language: str | None,
                 beam_size: int, device: str = "cpu"):
        from faster_whisper import WhisperModel

        self.model = WhisperModel(str(model_dir), device=device, compute_type=compute_type,
                                  cpu_threads=cpu_threads)
        self.language = language
        self.beam_size = beam_size

    def transcribe(self, pcm: bytes, sample_rate: int = WHISPER_RATE) -> str:
        audio = pcm16_to_float(pcm, sample_rate)
        if audio.size < WHISPER_RATE // 10:
            return ""
        segments, _ = self.model.transcribe(
            audio, language=self.language, beam_size=self.beam_size, condition_on_previous_text=False,
            vad_filter=False, without_timestamps=True,
        )
        words = [
            s.text.strip() for s in segments
            if not (s.no_speech_prob > NO_SPEECH_PROB and s.avg_logprob < MIN_AVG_LOGPROB)
        ]
        return " ".join(w for w in words if w).strip()
