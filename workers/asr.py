"""Cascade speech recognition for text-only models: faster-whisper on the finished utterance.

Whisper pads every input to a 30 s window, so a two-second question costs as much as thirty. Short utterances
are encoded over a window of max(10 s, utterance + 1 s) instead (NOTES §5: base 0.8-1.0 s → ~0.23 s on 2 cores,
same words); windows under 10 s broke the transcripts. Longer utterances take faster-whisper's own path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Whisper invents words ("Thank you.") for coughs and noise; its own confidences say when.
NO_SPEECH_PROB = 0.6
MIN_AVG_LOGPROB = -1.0
WHISPER_RATE = 16000
MIN_WINDOW_S = 10.0
WINDOW_MARGIN_S = 1.0
MAX_REPLY_TOKENS = 128


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word edit distance over the reference's length (two ASR models' disagreement, or one's error)."""
    ref, hyp = words(reference), words(hypothesis)
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp)] / max(1, len(ref))


def pcm16_to_float(pcm: bytes, sample_rate: int) -> np.ndarray:
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    if sample_rate != WHISPER_RATE and audio.size:
        import soxr

        audio = soxr.resample(audio, sample_rate, WHISPER_RATE)
    return audio


def window_seconds(audio_s: float, short_window: bool) -> float | None:
    """The encoder window for an utterance this long, or None for Whisper's own 30 s path."""
    if not short_window:
        return None
    window = max(MIN_WINDOW_S, audio_s + WINDOW_MARGIN_S)
    return window if window < 30.0 else None


@dataclass(frozen=True)
class Transcription:
    """A transcript and Whisper's own confidence in it: the mean log-probability of its tokens (on Whisper's long
    path, over 29 s, that of its least sure segment)."""

    text: str
    avg_logprob: float = 0.0


class WhisperTranscriber:
    def __init__(self, model_dir: Path, compute_type: str, cpu_threads: int, language: str | None,
                 beam_size: int, device: str = "cpu", short_window: bool = True):
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        self.model = WhisperModel(str(model_dir), device=device, compute_type=compute_type,
                                  cpu_threads=cpu_threads)
        self.language = language
        self.beam_size = beam_size
        self.short_window = short_window
        multilingual = self.model.model.is_multilingual
        # The short path needs a fixed language; language detection takes faster-whisper's own path.
        self._tokenizer = (Tokenizer(self.model.hf_tokenizer, multilingual, task="transcribe",
                                     language=language if multilingual else "en")
                           if language or not multilingual else None)

    def transcribe(self, pcm: bytes, sample_rate: int = WHISPER_RATE) -> str:
        return self.hear(pcm, sample_rate).text

    def hear(self, pcm: bytes, sample_rate: int = WHISPER_RATE) -> Transcription:
        """The words, and how sure Whisper is of them ("" for silence, a cough, noise)."""
        audio = pcm16_to_float(pcm, sample_rate)
        if audio.size < WHISPER_RATE // 10:
            return Transcription("")
        window = window_seconds(audio.size / WHISPER_RATE, self.short_window)
        if window is not None and self._tokenizer is not None:
            return self._transcribe_window(audio, window)
        segments, _ = self.model.transcribe(
            audio, language=self.language, beam_size=self.beam_size, condition_on_previous_text=False,
            vad_filter=False, without_timestamps=True,
        )
        kept = [s for s in segments if s.text.strip()
                and not (s.no_speech_prob > NO_SPEECH_PROB and s.avg_logprob < MIN_AVG_LOGPROB)]
        if not kept:
            return Transcription("")
        return Transcription(" ".join(s.text.strip() for s in kept), min(s.avg_logprob for s in kept))

    def _transcribe_window(self, audio: np.ndarray, window_s: float) -> Transcription:
        padded = np.pad(audio, (0, int(window_s * WHISPER_RATE) - audio.size))
        features = self.model.feature_extractor(padded, padding=0)[:, : int(window_s * 100)]
        encoded = self.model.encode(features)
        prompt = self.model.get_prompt(self._tokenizer, [], without_timestamps=True)
        result = self.model.model.generate(
            encoded, [prompt], beam_size=self.beam_size, return_scores=True, return_no_speech_prob=True,
            max_length=len(prompt) + MAX_REPLY_TOKENS, suppress_blank=True, suppress_tokens=[-1],
        )[0]
        tokens = [t for t in result.sequences_ids[0] if t < self._tokenizer.eot]
        # scores[0] is the length-normalised log-probability: the mean per token.
        if not tokens or (result.no_speech_prob > NO_SPEECH_PROB and result.scores[0] < MIN_AVG_LOGPROB):
            return Transcription("")
        return Transcription(self._tokenizer.decode(tokens).strip(), float(result.scores[0]))
