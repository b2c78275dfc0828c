"""A session's ears: microphone audio at any rate → 16 kHz → Silero VAD → turn-taking events, in order.

No thread of its own: the session's mailbox thread (``vita/turns/session_actor.py``) calls ``hear`` for each audio
message, so what the VAD heard reaches the turn machine in the order it happened, between the session's other
events and never beside them.
"""

from __future__ import annotations

import logging

import numpy as np
import soxr

from vita.hearing.echo_canceller import EchoCanceller
from vita.hearing.utterance import Heard, Utterance, VadEvent
from vita.hearing.vad import CHUNK, MASKED_SPAN_MAX_GAP_CHUNKS, SAMPLE_RATE, SPAN_MAX_GAP_CHUNKS, VadSegmenter
from vita.hearing.voice_gate import CHUNK_S, ECHO_LEARN_ABOVE_DBFS, chunk_levels
from vita.turns.turn_events import (
    Event,
    Speech,
    SpeechConfirmed,
    SpeechDropped,
    SpeechPaused,
    SpeechPausedLonger,
    SpeechResumed,
    SpeechStarted,
    UtteranceEnded,
)


def _speech(utterance: Utterance, arrived: float, position: int) -> Speech:
    """The utterance on the monotonic clock: `position` samples of the stream had arrived at `arrived`."""
    started_at = arrived - (position - utterance.start_sample) / SAMPLE_RATE
    ended_at = arrived - (position - utterance.speech_end_sample) / SAMPLE_RATE
    details = {"audio_s": round((utterance.end_sample - utterance.start_sample) / SAMPLE_RATE, 3),
               "start_s": round(utterance.start_sample / SAMPLE_RATE, 3),
               "end_s": round(utterance.end_sample / SAMPLE_RATE, 3),
               "speech_end_s": round(utterance.speech_end_sample / SAMPLE_RATE, 3)}
    samples = (utterance.start_sample, utterance.end_sample, utterance.speech_end_sample)
    return Speech(utterance.pcm, started_at, ended_at, details, samples)


# A phone line's band stops at 4 kHz: an "s" or "t" between words is lost (Silero hears no voice in it), and the
# gap in "Wait, [s]top." grows past the span's 0.32 s: an interruption in a low voice was confirmed 0.58 s later
# than on the page. Over a phone line the span's gap may be 0.45 s, as in a noise near the voice (a "yeah" and a
# breath 1 s later still are not speech going on).
PHONE_RATE = 8000
# Over the reply, speech whose loudest chunk comes this near the user's own loud chunks (the 95th percentile of
# their voiced chunks' levels) is theirs: at confirmation, a question in their voice at their level reaches +3.5 to
# +4.7 dB of it, 6 dB softer -1.3 to -2.5, 9 dB softer (a speaker's echo) -4.3 to -5.5. Judged on its last
# LOUD_WINDOW_S.
LOUD_UNDER_USER_DB = 4.0
LOUD_WINDOW_S = 2

log = logging.getLogger("vita.turns.listener")


class SpeechListener:
    def __init__(self, segmenter: VadSegmenter, canceller: EchoCanceller | None = None):
        self.segmenter = segmenter
        self.canceller = canceller  # takes what the client played out of its microphone's audio (None: nothing)
        self._resampler: soxr.ResampleStream | None = None
        self._rate = SAMPLE_RATE

    def reset(self) -> None:
        """Forget any half-heard speech (recording restarted)."""
        self.segmenter.reset()
        if self.canceller is not None:
            self.canceller.held = self.canceller.held[:0]

    def carry(self, speech: Speech | None) -> None:
        """The utterance being heard continues `speech` (a request the user went on with); None: it does not."""
        self.segmenter.carried = Utterance(speech.pcm, *speech.samples) if speech and speech.samples else None

    def played(self, pcm: bytes, rate: int, at: float) -> None:
        """Reply audio the client starts playing at `at` (monotonic): its echo may come back in the microphone, to
        be told from the user (the voice gate's echo reference) and taken out (the canceller), where they are on."""
        echo = self.segmenter.gate.echo
        if echo is not None:
            echo.play(pcm, rate, at)
        if self.canceller is not None:
            self.canceller.played(pcm, rate, at)

    def began_over_echo(self, speech: Speech) -> bool:
        """Speech whose onset (after the VAD's pre-roll) came where the reply's audible echo could be (a client whose
        speaker's echo comes back: its voice gate keeps the echo's reference)."""
        echo = self.segmenter.gate.echo
        if echo is None:
            return False
        played = echo.reference(speech.started_at + self.segmenter.pre_roll_chunks * CHUNK_S + CHUNK_S)
        return played is not None and played >= ECHO_LEARN_ABOVE_DBFS

    def at_users_level(self, speech: Speech) -> bool:
        """Its loudest chunk comes within LOUD_UNDER_USER_DB of the user's own loud chunks (a speaker's echo, or
        what the canceller leaves of it, stays under them; the user interrupting speaks as they asked). False while
        the user's level is unknown."""
        if self.segmenter.level_db is None:
            return False
        loudest = np.percentile(self.segmenter.levels, 95)
        levels = chunk_levels(speech.pcm[-2 * LOUD_WINDOW_S * SAMPLE_RATE:])
        its = float(levels.max()) if levels.size else -120.0
        log.debug("confirmed: %.2f s of speech, its loudest chunk %+.1f dB from the user's", speech.ended_at -
                  speech.started_at, its - loudest)
        return bool(its >= loudest - LOUD_UNDER_USER_DB)

    def samples_to_next_step(self) -> int:
        """16 kHz samples the VAD needs before it reads its next step."""
        needed = CHUNK - self.segmenter.pending.size
        return needed if self.canceller is None else self.canceller.samples_for(needed)

    def end_now(self, now: float, at_pause: bool = False) -> list[Event]:
        """End the utterance being heard here. at_pause: the end-of-turn model says the user has finished at a pause
        (speech that follows before the pause would have ended it goes on with it: VadSegmenter.end_now)."""
        return self._events(self.segmenter.end_now(at_pause), now, now)

    def hear(self, pcm: np.ndarray, rate: int, arrived: float, now: float) -> list[Event]:
        """One message of int16 audio that arrived at `arrived`; the events it completes, stamped `now`."""
        if rate != self._rate:  # (a client may change its format: a Realtime session's, say)
            self._rate = rate
            self._resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="int16") if rate != SAMPLE_RATE else None
            phone = rate <= PHONE_RATE
            self.segmenter.span_max_gap_chunks = MASKED_SPAN_MAX_GAP_CHUNKS if phone else SPAN_MAX_GAP_CHUNKS
        if self._resampler is not None:
            pcm = self._resampler.resample_chunk(pcm)
        if self.canceller is not None:  # the echo goes before the VAD judges the audio and before it is kept
            cancelling = self.canceller.cancelling
            pcm = self.canceller.clean(pcm, arrived)
            arrived -= self.canceller.held_s  # (the cleaned audio ends that much before what arrived)
            if self.canceller.cancelling and not cancelling:  # (what the gate learnt of the echo is stale)
                self.segmenter.gate.echo_removed()
        return self._events(self.segmenter.feed(pcm, arrived), arrived, now)

    def _events(self, heard: list[VadEvent], arrived: float, now: float) -> list[Event]:
        position = self.segmenter.position + self.segmenter.pending.size  # samples arrived by `arrived`
        events: list[Event] = []
        room_talks = self.segmenter.gate.others_talk
        for vad in heard:
            if vad.kind is Heard.START:
                events.append(SpeechStarted(now))
            elif vad.kind is Heard.CONFIRM:
                so_far = _speech(vad.utterance, arrived, position) if vad.utterance is not None else None
                events.append(SpeechConfirmed(now, so_far, so_far is not None and self.at_users_level(so_far),
                                              room_talks))
            elif vad.kind is Heard.DROPPED:
                events.append(SpeechDropped(now))
            elif vad.kind is Heard.PAUSE:
                events.append(SpeechPaused(now, _speech(vad.utterance, arrived, position), vad.kept))
            elif vad.kind is Heard.PAUSE_LONGER:
                events.append(SpeechPausedLonger(now, _speech(vad.utterance, arrived, position)))
            elif vad.kind is Heard.RESUME:
                events.append(SpeechResumed(now))
            else:
                events.append(UtteranceEnded(now, _speech(vad.utterance, arrived, position), room_talks))
        return events
