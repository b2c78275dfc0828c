"""Cascade speech recognition for text-only models: faster-whisper on the finished utterance.

Whisper pads every input to a 30 s window, so a two-second question costs as much as thirty. Short utterances
are encoded over a window of max(10 s, utterance + 1 s) instead (NOTES §5: base 0.8-1.0 s → ~0.23 s on 2 cores,
same words); windows under 10 s broke the transcripts. Longer utterances take faster-whisper's own path.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vita.words import said_words

# Whisper invents words ("Thank you.") for coughs and noise; its own confidences say when.
NO_SPEECH_PROB = 0.6
MIN_AVG_LOGPROB = -1.0
WHISPER_RATE = 16000
MIN_WINDOW_S = 10.0
WINDOW_MARGIN_S = 1.0
MAX_REPLY_TOKENS = 128
LOOP_COPIES = 4  # a sentence written this many times running (or until the tokens ran out) is Whisper's decoder
LOOP_MIN_WORDS = 3  # looping, not the user ("Can you hear me?" three times may be; "Stop. Stop. Stop." too)
WORD_LOOP_COPIES = 12  # one or two words written this many times running to the end are the decoder's loop too ("no,
# no, no..." thirty times to its token limit, over a speakerphone's echo); a song's "na na na na, na na na na, hey
# hey, goodbye" goes on to other words, and a person's "No, no, no!" stops well short
SECOND_THREAD_WORTH = 0.85  # asr.cpu_threads auto: two threads an utterance where they hear in this much of one's time


def without_repeats(text: str) -> tuple[str, int, bool]:
    """The transcript with each sentence written more than once running kept once; the most copies, the kept one
    among them, of one sentence of LOOP_MIN_WORDS words or more; and whether such a run ended in a copy cut off (the
    decoder ran out of tokens looping). Whisper's decoder can loop on one sentence, over echo or noise ("Eric Lowle
    once been a year." ten times, cut off at its token limit), or write a question twice; a person who says the same
    sentence twice means it once. Two sentences written again and again in turn are kept once and counted the same
    way. Sentences with letters `said_words` drops (accents, other scripts) are left."""
    kept: list[str] = []
    copies = most = 1
    ran_out = False
    for sentence in re.split(r"(?<=[.!?])\s+", text.strip()):
        said = said_words(sentence) if sentence.isascii() else []
        last = said_words(kept[-1]) if kept and kept[-1].isascii() else []
        cut_off = copies > 1 and said != last and _copy_cut_off(said, last, sentence)
        if said and (said == last or cut_off):
            copies += 1
            if len(last) >= LOOP_MIN_WORDS:
                most, ran_out = max(most, copies), cut_off
            continue
        kept.append(sentence)
        copies = 1
    kept, pair_copies, pair_ran_out = _without_pair_repeats(kept)
    return " ".join(kept), max(most, pair_copies), ran_out or pair_ran_out


def _copy_cut_off(copy: list[str], words: list[str], written: str) -> bool:
    """`copy` (the words of `written`, the transcript's end) begins `words` again and stops short, its last word
    perhaps cut inside, with no sentence end: the decoder ran out of tokens writing it."""
    return (0 < len(copy) <= len(words) and copy[:-1] == words[:len(copy) - 1]
            and words[len(copy) - 1].startswith(copy[-1]) and not re.search(r"[.!?]$", written))


def _without_pair_repeats(sentences: list[str]) -> tuple[list[str], int, bool]:
    """Two sentences written again and again in turn kept once, as without_repeats keeps one (over a
    speakerphone's echo: "Goodbye. Talk to you later." ten times, the last copy cut off at the token limit)."""
    said = [said_words(s) if s.isascii() else [] for s in sentences]
    kept: list[str] = []
    most, ran_out, i = 1, False, 0
    while i < len(sentences):
        pair, copies, j = said[i:i + 2], 1, i + 2
        if len(pair) == 2 and all(pair) and pair[0] != pair[1]:
            while said[j:j + 2] == pair:
                copies, j = copies + 1, j + 2
        if copies == 1:
            kept.append(sentences[i])
            i += 1
            continue
        kept += sentences[i:i + 2]
        words, rest = pair[0] + pair[1], [w for s in said[j:] for w in s]
        cut_off = len(rest) < len(words) and _copy_cut_off(rest, words, sentences[-1])
        if cut_off:  # (the rest of the transcript: a copy begun, never finished)
            copies, j = copies + 1, len(sentences)
        if len(words) >= LOOP_MIN_WORDS:
            most, ran_out = max(most, copies), ran_out or cut_off
        i = j
    return kept, most, ran_out


def repeats_words(words: list[str], copies: int = WORD_LOOP_COPIES) -> bool:
    """One word, or a pair, written `copies` times running to the end of `words` (a decoder that loops does not
    come back; a copy cut off at its token limit may end them)."""
    for size in (1, 2):
        for cut in range(size):
            body = words[:len(words) - cut]
            tail = body[-size * copies:]
            if len(tail) == size * copies and tail == body[-size:] * copies:
                return True
    return False


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word edit distance over the reference's length (two ASR models' disagreement, or one's error)."""
    ref, hyp = said_words(reference), said_words(hypothesis)
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp)] / max(1, len(ref))


def log_softmax_at(logits: np.ndarray, index: int) -> float:
    """The log-probability of token `index` among a step's logits."""
    peak = float(logits.max())
    return float(logits[index]) - peak - float(np.log(np.exp(logits - peak).sum()))


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
    beam: bool = False  # decoded again with a wider beam (WhisperTranscriber's redecode_below), whoever's words won
    looped: bool = False  # the decoder looped (a sentence, kept once in `text`, or a word or two): not heard
    # each token's text and log-probability, then the end of the text's ("", greedy only); where asked for
    # (WhisperTranscriber.hear's token_scores)
    tokens: tuple[tuple[str, float], ...] = ()

    @classmethod
    def decoded(cls, text: str, avg_logprob: float, beam: bool = False) -> Transcription:
        """Whisper's words, its repeats kept once (its confidence is high in a loop: each copy predicts the next)."""
        kept, copies, ran_out = without_repeats(text)
        return cls(kept, avg_logprob, beam, looped=copies >= LOOP_COPIES or ran_out or repeats_words(said_words(kept)))

    def confidence_of(self, ending: str) -> float:
        """Whisper's confidence in the words that end the transcript (the request after a stop command), with the end
        of the text: over a speakerphone's echo the command is where it is least sure ("Mate stop. Is the Earth
        round?"), and that says nothing of the request. Its confidence in the whole transcript where the tokens are
        not known."""
        wanted = len(said_words(ending))
        if not self.tokens or not wanted:
            return self.avg_logprob
        start = len(self.tokens)
        while start > 0:
            start -= 1
            piece = self.tokens[start][0]
            if piece[:1].isspace() and len(said_words("".join(p for p, _ in self.tokens[start:]))) >= wanted:
                break
        scores = [lp for _, lp in self.tokens[start:]]
        return sum(scores) / len(scores)


@dataclass(frozen=True)
class MisheardRule:
    """When a transcript is taken for not what the user said (the config's asr section): Whisper's confidence
    under `ask_again_below`, or, under `doubt_below`, a second model that disagrees on more than
    `disagree_above` of the words; under `reading_below` the language model reads the words too, and Whisper's
    confidence plus `reading_weight` times the model's (the mean log-probability of the words in the prompt, but
    their opening token) is held to `ask_again_below`: fluent nonsense ("Is my murder flying insect?") is unlikely
    to the model where Whisper is only a little unsure. Where the engine cannot read (a remote server), under
    `sense_check_below` the model is asked whether the words make sense (workers/llm/turn_run.SENSE_CHECK). Shared
    by the LLM worker (workers/llm/hearing.py) and scripts/bench/stages/asr.py."""

    ask_again_below: float | None = -0.9
    doubt_below: float = -0.6
    disagree_above: float = 0.5
    sense_check_below: float | None = -0.4
    reading_below: float | None = -0.3
    reading_weight: float = 0.1

    @classmethod
    def from_config(cls, asr: Any) -> MisheardRule:
        return cls(asr.ask_again_below, asr.doubt_below, asr.disagree_above, asr.sense_check_below,
                   asr.reading_below, asr.reading_weight)

    @property
    def reads(self) -> bool:
        """Does the model read unsure words at all (on an engine that can)? Else the sense note is their check."""
        return self.reading_below is not None and self.ask_again_below is not None

    def unsure(self, heard: Transcription) -> bool:
        """Too unsure to answer at all, or the decoder looped (see without_repeats and repeats_words)."""
        return bool(heard.text) and self.ask_again_below is not None and (heard.looped
                                                                        or heard.avg_logprob < self.ask_again_below)

    def worth_a_second_opinion(self, heard: Transcription) -> bool:
        return bool(heard.text) and not self.unsure(heard) and heard.avg_logprob < self.doubt_below

    def worth_a_reading(self, heard: Transcription) -> bool:
        """Unsure enough that the model's reading of the words decides (see `implausible`)."""
        return (bool(heard.text) and self.reads and not self.unsure(heard)
                and heard.avg_logprob < self.reading_below)

    def implausible(self, heard: Transcription, words_logprob: float) -> bool:
        """Misheard, by the ear and the reader together: a question the model finds likely (−1.5 a token) needs
        Whisper under −0.75; nonsense (−5) is asked again from −0.4."""
        assert self.ask_again_below is not None
        return heard.avg_logprob + self.reading_weight * words_logprob < self.ask_again_below

    def worth_a_sense_check(self, heard: Transcription) -> bool:
        """Unsure enough that the model is asked whether the words make sense (they may be fluent nonsense)."""
        return (bool(heard.text) and self.sense_check_below is not None and not self.unsure(heard)
                and heard.avg_logprob < self.sense_check_below)

    def disagreement(self, heard: Transcription, other: Transcription) -> float:
        return word_error_rate(heard.text, other.text)

    def disagree(self, heard: Transcription, other: Transcription) -> bool:
        return self.disagreement(heard, other) > self.disagree_above


class WhisperTranscriber:
    """faster-whisper on one utterance. On the short window (not Whisper's own path: over 29 s, or no fixed
    language), a decode less sure than `redecode_below` is decoded again on the same encoder output with a wider
    beam (`redecode_beam_size`, when it is wider than `beam_size`): on robotic voices that hears a third fewer
    garbled questions ("If I wear a mammal..." → "Is a whale a mammal?") for ~0.14 s on those turns only.

    `workers` utterances are heard at once, from as many threads, each on `cpu_threads` of its own: where a second
    thread barely speeds one utterance up (`threads_worth_it`), turns that end together are better heard side by
    side than one after the other (two: at 0.22 and 0.26 s instead of 0.21 and 0.41 s; Zen 4, whisper-base int8)."""

    def __init__(self, model_dir: Path, compute_type: str, cpu_threads: int, language: str | None,
                 beam_size: int, device: str = "cpu", short_window: bool = True,
                 redecode_below: float | None = None, redecode_beam_size: int = 5, workers: int = 1):
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        self.model = WhisperModel(str(model_dir), device=device, compute_type=compute_type,
                                  cpu_threads=cpu_threads, num_workers=workers)
        self.language = language
        self.beam_size = beam_size
        self.short_window = short_window
        self.redecode_below = redecode_below if redecode_beam_size > beam_size else None
        self.redecode_beam_size = redecode_beam_size
        multilingual = self.model.model.is_multilingual
        # The short path needs a fixed language; language detection takes faster-whisper's own path.
        self._tokenizer = (Tokenizer(self.model.hf_tokenizer, multilingual, task="transcribe",
                                     language=language if multilingual else "en")
                           if language or not multilingual else None)

    def transcribe(self, pcm: bytes, sample_rate: int = WHISPER_RATE, redecode: bool = True) -> str:
        return self.hear(pcm, sample_rate, redecode).text

    def hear(self, pcm: bytes, sample_rate: int = WHISPER_RATE, redecode: bool = True,
             token_scores: bool = False) -> Transcription:
        """The words, and how sure Whisper is of them ("" for silence, a cough, noise); redecode=False: never the
        beam's second pass (a quick check that must not wait for it); token_scores: each token's too
        (Transcription.tokens; on the short window only: ~1 ms greedy, ~25 ms after a beam)."""
        audio = pcm16_to_float(pcm, sample_rate)
        if audio.size < WHISPER_RATE // 10:
            return Transcription("")
        window = window_seconds(audio.size / WHISPER_RATE, self.short_window)
        if window is not None and self._tokenizer is not None:
            return self._transcribe_window(audio, window, redecode, token_scores)
        segments, _ = self.model.transcribe(
            audio, language=self.language, beam_size=self.beam_size, condition_on_previous_text=False,
            vad_filter=False, without_timestamps=True,
        )
        kept = [s for s in segments if s.text.strip()
                and not (s.no_speech_prob > NO_SPEECH_PROB and s.avg_logprob < MIN_AVG_LOGPROB)]
        if not kept:
            return Transcription("")
        return Transcription.decoded(" ".join(s.text.strip() for s in kept), min(s.avg_logprob for s in kept))

    def warm_up(self) -> None:
        """CTranslate2's first run of each decode pays its warm-up: here, on silence, not on a user's words; every
        worker's (each keeps buffers of its own), from as many threads at once, so that each worker takes one.

        First, one encode of Whisper's largest input (a 30 s window): CTranslate2 keeps the buffers it frees for
        reuse, and once it has held buffers this large every later utterance's encode reuses them; warmed on a
        short window alone, each encode allocates afresh and stays slower (a two-second question: 0.91 s against
        0.63 s, on a 2-core AVX2 EPYC, whisper-base int8)."""
        workers = self.model.model.num_workers
        with ThreadPoolExecutor(workers) as pool:
            for warmed in [pool.submit(self._warm_up_one) for _ in range(workers)]:
                warmed.result()

    def _warm_up_one(self) -> None:
        frames = self.model.feature_extractor.nb_max_frames  # 3000: 30 s
        self.model.encode(np.zeros((self.model.model.n_mels, frames), np.float32))
        window = window_seconds(1.0, self.short_window)
        if window is None or self._tokenizer is None:
            self.hear(bytes(2 * WHISPER_RATE))
            return
        encoded, prompt = self._encode(np.zeros(WHISPER_RATE, np.float32), window)
        self._decode(encoded, prompt, self.beam_size)
        if self.redecode_below is not None:
            self._decode(encoded, prompt, self.redecode_beam_size)

    def _encode(self, audio: np.ndarray, window_s: float) -> tuple[Any, list[int]]:
        padded = np.pad(audio, (0, int(window_s * WHISPER_RATE) - audio.size))
        features = self.model.feature_extractor(padded, padding=0)[:, : int(window_s * 100)]
        return self.model.encode(features), self.model.get_prompt(self._tokenizer, [], without_timestamps=True)

    def _transcribe_window(self, audio: np.ndarray, window_s: float, redecode: bool,
                           token_scores: bool = False) -> Transcription:
        encoded, prompt = self._encode(audio, window_s)
        heard = self._decode(encoded, prompt, self.beam_size, token_scores, window_s)
        if redecode and heard.text and self.redecode_below is not None and heard.avg_logprob < self.redecode_below:
            # Its own score judges the beam's words better than the greedy pass's does (their AUC for garbled
            # against exact transcripts, 175 clips greedy called unsure in four voices: 0.94 against 0.92), so the
            # rules downstream get it. A beam that finds no speech keeps the greedy words and their low score.
            again = self._decode(encoded, prompt, self.redecode_beam_size, token_scores, window_s)
            chosen = again if again.text else heard
            return dataclasses.replace(chosen, beam=True)
        return heard

    def _decode(self, encoded: Any, prompt: list[int], beam_size: int, token_scores: bool = False,
                window_s: float = MIN_WINDOW_S) -> Transcription:
        """token_scores: each token's log-probability too, a greedy pass's from its own steps, a beam's read again."""
        greedy_scores = token_scores and beam_size == 1
        result = self.model.model.generate(
            encoded, [prompt], beam_size=beam_size, return_scores=True, return_no_speech_prob=True,
            max_length=len(prompt) + MAX_REPLY_TOKENS, suppress_blank=True, suppress_tokens=[-1],
            return_logits_vocab=greedy_scores,
        )[0]
        eot = self._tokenizer.eot
        ids = list(result.sequences_ids[0])
        tokens = [t for t in ids if t < eot]
        # scores[0] is the length-normalised log-probability: the mean per token.
        if not tokens or (result.no_speech_prob > NO_SPEECH_PROB and result.scores[0] < MIN_AVG_LOGPROB):
            return Transcription("")
        written = self._tokenizer.decode(tokens)
        heard = Transcription.decoded(written.strip(), float(result.scores[0]))
        if greedy_scores:  # each step's log-probabilities over the vocabulary: the chosen token's, and the end's
            steps = [np.asarray(step, np.float32) for step in result.logits[0]]
            scored = [("" if t == eot else self._tokenizer.decode([t]), log_softmax_at(step, t))
                      for t, step in zip([*ids, eot], steps, strict=False) if t <= eot]  # (no end where they ran out)
            return dataclasses.replace(heard, tokens=tuple(scored) if heard.text.split() == written.split() else ())
        return self._with_token_scores(heard, encoded, window_s) if token_scores else heard

    def _with_token_scores(self, heard: Transcription, encoded: Any, window_s: float) -> Transcription:
        """A beam's words with each token's log-probability, the decoder reading them again after the prompt it saw
        (faster-whisper's alignment pass, ~25 ms; it gives no end of text, so the mean is over the words alone)."""
        tokens = self._tokenizer.encode(" " + heard.text)
        probs = self.model.model.align(encoded, list(self._tokenizer.sot_sequence), [tokens],
                                       [int(window_s * 50)])[0].text_token_probs
        return dataclasses.replace(heard, tokens=tuple((self._tokenizer.decode([t]), float(np.log(max(p, 1e-12))))
                                                        for t, p in zip(tokens, probs, strict=False)))


def threads_worth_it(build: Callable[[int], WhisperTranscriber]) -> tuple[WhisperTranscriber, int, str]:
    """asr.cpu_threads auto: one thread an utterance, unless two hear a short one in SECOND_THREAD_WORTH of its time
    on this CPU (on the 2-core Zen 4 both take 0.20 s, so two utterances side by side on one thread each are heard
    sooner than one after the other on two; a CPU whose second core doubles the encoder's speed keeps two). Each is
    `build(threads)`, timed as the best of three runs on two seconds of silence (the encoder's time, which the
    threads share) after one that warms up. Returns the one chosen (kept: it is not loaded again), its threads and
    why, for the log."""
    built, took = {}, {}
    for threads in (1, 2):
        built[threads] = build(threads)
        built[threads].hear(bytes(2 * 2 * WHISPER_RATE))  # warms up
        took[threads] = quickest_on_silence(built[threads], 3)
    threads = threads_from(took[1], took[2])
    return built[threads], threads, (f"{threads} an utterance (measured here: one thread {took[1]:.3f} s, two "
                                     f"{took[2]:.3f} s for two seconds of audio)")


def threads_from(one_thread_s: float, two_threads_s: float) -> int:
    """Two threads an utterance only where they hear it in SECOND_THREAD_WORTH of one's time."""
    return 2 if two_threads_s <= SECOND_THREAD_WORTH * one_thread_s else 1


def quickest_on_silence(whisper: WhisperTranscriber, runs: int) -> float:
    """The best of `runs` hearings of two seconds of silence: the encoder's time, and one step of decoding."""
    took = []
    for _ in range(runs):
        started = time.perf_counter()
        whisper.hear(bytes(2 * 2 * WHISPER_RATE))
        took.append(time.perf_counter() - started)
    return min(took)
