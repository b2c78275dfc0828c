"""Voice activity detection for one session: a segmenter that turns a stream of 16 kHz PCM into utterances, over
Silero's per-chunk probabilities (vita/hearing/silero.py) and the voice gate's judgement of whose voice each is.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vita.hearing.silero import CHUNK, SAMPLE_RATE, SileroModel, SileroVad
from vita.hearing.utterance import Heard, Utterance, VadEvent
from vita.hearing.voice_gate import ECHO_LEARN_ABOVE_DBFS, EchoReference, VoiceGate, level_db

if TYPE_CHECKING:
    from vita.config import TurnConfig, VadConfig

MAX_JOIN_GAP_S = 0.3  # silence kept between the two parts of a request joined into one turn (ASR needs a little)
ECHO_VOICE_DB = 10  # while a reply plays, a chunk within this of the user's level is their voice (it renews the hold)
# Silero's probability falls 2-3 chunks after the voice does (its recurrent state lags: 85-230 ms, p50 ~110 ms on
# 10 spoken questions), so pauses and the end of speech were found ~0.1 s late. Chunks at the end of the voiced
# run whose level is down at the room's noise floor are counted as the silence they are (at most QUIET_TAIL_CHUNKS).
QUIET_TAIL_CHUNKS = 3
QUIET_OVER_FLOOR_DB = 6  # a chunk this close to the noise floor is silent...
QUIET_FLOOR_MIN_DBFS = -60  # ...and one under -60 dBFS always is (a digitally silent or very quiet line)...
QUIET_UNDER_VOICE_DB = 20  # ...but never one within 20 dB of the user's voice in a room of other voices (their
# syllables are no floor; a steady noise's level is)
FLOOR_CHUNKS = 64  # the noise floor: the median level of the last ~2 s of chunks Silero calls silent
SPAN_VOICED_SHARE = 0.6  # speech spanning turn.barge_in_span_ms interrupts with this share of the confirm_ms voiced
# ...counted from the end of its last gap longer than this: a robotic voice pauses up to ~0.29 s between words
# ("Sorry, stop there."); a longer gap is a new start (a "yeah" and a breath 1 s later are not speech going on).
SPAN_MAX_GAP_CHUNKS = 10
# ...or 0.45 s where the room's bar for going on stands within QUIET_UNDER_VOICE_DB of the user's voice: the soft
# sounds at a word's edges fall under it, as under a phone line's band (over a fan 10 dB under the voice or people
# talking 20 dB under it, the gap in "Wait, stop." grew from 8 chunks to 11-12, and the interruption waited 0.5 s
# more for its next words)
MASKED_SPAN_MAX_GAP_CHUNKS = 14
# Where the room hides them (see MASKED_SPAN_MAX_GAP_CHUNKS), the chunks Silero calls speech right before the one the
# gate takes for the user's (at most this many; in a room of other voices, only those over its loud end) are their
# word's start: voiced if speech opens there, and no gap if it goes on there. A fan 10 dB under the voice hid the
# first 60 ms of "Wait" and the soft "s" of "stop" under the gate's bars, and "Wait, stop." came to 640 ms voiced,
# under barge_in_confirm_ms, and waited for its next words (so did one in four over people talking 20 dB under).
WORD_START_MAX_CHUNKS = 5
# While a reply plays, speech too short yet to be kept (min_utterance_ms) pauses once this much of it is voiced, so
# that its owner can check its words: a one-word command. Among people talking 10 dB under the voice the room hid
# the soft edges of "Wait," (190-220 ms voiced), no pause was reported until "Wait, stop." had ended, and the reply
# stopped 1.0 s after its onset instead of 0.6-0.7 s in quiet (Whisper heard "Wait" at that pause in 12 of 12 in a
# robotic voice). 160 ms: a margin under that "Wait,", and over a click's or a knock's few chunks. Not on a client
# that sends its speaker's echo back: a burst there may be the reply's own words, and those sessions' speech over
# the reply is held for its words already (the turn machine's hold_for_words).
COMMAND_MIN_SAMPLES = 5 * CHUNK
# While a reply plays, the span is completed by a chunk at the user's level or by the one just after it: a word's
# last syllable falls under that level as it ends, and Silero still calls it voiced ("No, wait." in a robotic
# voice went on 700 ms with its "t" 12 dB down, and was confirmed only 130 ms later, at the next word).
SPAN_USER_LAG_CHUNKS = 1
# In a talking room speech opens a word into the sentence (babble and a fan 10 dB under cut "What is the capital
# of..." 0.7 s late): it begins where its voice first stood over the bar for going on (`_lead_in`).
LEAD_IN_MAX_CHUNKS = 47  # at most ~1.5 s back...
LEAD_IN_GAP_CHUNKS = 3  # ...across gaps of at most ~0.1 s between words
# Where the segmentation stands: kept when a stream starts afresh, to judge its chunks again if its first voice turns
# out to be the room's.
_SEGMENT_STATE = ("position", "speaking", "speech", "speech_start", "last_voiced_end", "silent_chunks",
                  "voiced_samples", "onset_reported", "confirmed", "confirm_reported", "pause_reported", "span_from",
                  "span_voiced", "floor_levels", "tail_levels", "quiet_tail", "before", "resume_until",
                  "going_on", "onset_run")


@dataclass(frozen=True)
class HeardBefore:
    """A chunk heard while no speech was open, with what the lead-in of the next speech is judged by."""

    chunk: np.ndarray
    probability: float  # Silero's
    level: float  # dBFS
    near_reply: bool  # the assistant's reply was playing, or its echo may still be in it


@dataclass(frozen=True)
class KeptChunk:
    """A chunk heard since the stream started afresh, with what judging it again needs."""

    chunk: np.ndarray
    probability: float  # Silero's
    level: float  # dBFS
    at: float | None  # when it arrived (monotonic)
    guarded: bool  # whether the assistant's reply was playing


class VadSegmenter:
    """Hysteresis over Silero probabilities: open at start_threshold, close after end_silence below
    end_threshold; keep pre-roll so the first syllable is not clipped; drop bursts under min_utterance
    (but not the user going on after an end at a pause: resume_until).

    The start of speech is reported once onset_ms of it is voiced, confirmed once confirm_ms is (or once it has
    gone on for span_ms, short gaps included, with SPAN_VOICED_SHARE of confirm_ms voiced); the utterance is kept
    only if min_utterance_ms of it is voiced. The owner may end the utterance at a pause (``end_now``,
    when the end-of-turn model says the turn is complete) and may carry a previous utterance into the current
    one (``carry``: the user went on with a request already sent).
    """

    def __init__(self, vad: SileroVad, start_threshold: float, end_threshold: float, end_silence_ms: int,
                 pre_roll_ms: int, min_utterance_ms: int, max_utterance_s: float, onset_ms: int = 64,
                 pause_ms: int = 0, confirm_ms: int = 0, echo_guard_db: float = 0.0, span_ms: int = 0,
                 echo: EchoReference | None = None):
        self.vad = vad
        self.start_threshold, self.end_threshold = start_threshold, end_threshold
        self.end_silence_chunks = max(1, round(end_silence_ms * SAMPLE_RATE / 1000 / CHUNK))
        # A shorter silence inside a kept utterance is a pause: a speculative turn may start there (0 = never); over
        # the reply, also inside one that may be a one-word command (COMMAND_MIN_SAMPLES).
        pause_chunks = max(1, round(pause_ms * SAMPLE_RATE / 1000 / CHUNK)) if pause_ms > 0 else 0
        self.pause_chunks = pause_chunks if pause_chunks < self.end_silence_chunks else 0
        self.longer_pause_chunks = self.pause_chunks + QUIET_TAIL_CHUNKS if self.pause_chunks else 0
        self.pause_reported = False
        self.pre_roll_chunks = max(0, round(pre_roll_ms * SAMPLE_RATE / 1000 / CHUNK))
        # The latest chunks heard before speech opened: the pre-roll, and the lead-in that may come before it.
        self.before: deque[HeardBefore] = deque(maxlen=self.pre_roll_chunks + LEAD_IN_MAX_CHUNKS)
        self.min_samples = min_utterance_ms * SAMPLE_RATE // 1000
        self.onset_samples = min(onset_ms * SAMPLE_RATE // 1000, self.min_samples)
        self.confirm_samples = max(confirm_ms * SAMPLE_RATE // 1000, self.onset_samples)
        self.confirm_reported = False
        # Speech voiced on and off for span_ms without a long gap, SPAN_VOICED_SHARE of confirm_ms of it voiced,
        # is confirmed too: robotic voices leave gaps between words that a "mm-hmm" is over before.
        self.span_samples = span_ms * SAMPLE_RATE // 1000 if span_ms and confirm_ms else 0
        self.span_min_voiced = max(int(self.confirm_samples * SPAN_VOICED_SHARE), self.onset_samples)
        self.span_from = 0  # stream position of the first voiced chunk after the speech's last long gap
        self.span_voiced = 0  # voiced samples since span_from
        self.span_max_gap_chunks = SPAN_MAX_GAP_CHUNKS  # (a phone line's is longer: see SpeechListener.hear)
        self.onset_run = 0  # the latest chunks in a row Silero called speech and the gate did not take for the user's
        self.carried: Utterance | None = None  # an earlier utterance this one continues (see carry)
        # An utterance the end-of-turn model ended at a pause (end_now(at_pause=True)): speech that opens before
        # that pause would have ended it by silence (not over an echo) goes on: opened on the bars for going on
        # (among other voices, after the user's own has gone quiet, on those for starting),
        # kept once onset_ms of it is voiced, with the audio since the end ("What color is | grass?": the last
        # word alone was under min_utterance_ms in a talking room, and dropped). Stream position, or None.
        self.resume_until: int | None = None
        self.going_on = False  # the speech being heard opened before resume_until
        self.echo_guard_db = echo_guard_db
        # Whose voice each chunk is: the user's, or the room's (other people, the reply's echo).
        self.gate = VoiceGate(echo_guard_db, echo, ECHO_VOICE_DB)
        self.floor_levels: deque[float] = deque(maxlen=FLOOR_CHUNKS)  # dBFS of chunks Silero calls silent
        self.tail_levels: deque[float] = deque(maxlen=QUIET_TAIL_CHUNKS)  # dBFS of the last voiced chunks
        self.quiet_tail = 0  # voiced chunks before the silence that were already silent by their level
        self.max_samples = int(max_utterance_s * SAMPLE_RATE)
        self.pending = np.zeros(0, dtype=np.int16)
        self.position = 0  # samples consumed so far
        self.speaking = False
        self.speech: list[np.ndarray] = []
        self.speech_start = 0
        self.last_voiced_end = 0
        self.silent_chunks = 0
        self.voiced_samples = 0
        self.onset_reported = False  # onset_ms voiced: the start of speech has been reported
        self.confirmed = False  # min_utterance_ms voiced: the utterance will be kept
        # Since the stream started afresh (the gate takes its first voice for the user's until it is clear whose):
        # where the segmentation stood then, and each chunk since with Silero's probability, level and arrival.
        self._before_fresh: dict | None = None
        self._fresh_chunks: list[KeptChunk] = []

    @property
    def guarded(self) -> bool:
        """The assistant's reply is playing (the owner sets it)."""
        return self.gate.guarded

    @guarded.setter
    def guarded(self, on: bool) -> None:
        self.gate.guarded = on

    @property
    def levels(self) -> deque[float]:
        return self.gate.levels

    @property
    def loud_at(self) -> int:
        return self.gate.loud_at

    @classmethod
    def from_config(cls, v: VadConfig, model: SileroModel | Path | SileroVad, turn: TurnConfig | None = None,
                    echo: EchoReference | None = None) -> VadSegmenter:
        """A segmenter with its own Silero state, tuned by the config's `vad` section; with the end-of-turn model
        on (`turn`), silence alone ends an utterance only after turn.incomplete_wait_ms (the model ends it at the
        pause when it says the turn is complete). `echo`: what the client is played, for a client that does not
        cancel its own echo."""
        model_on = turn is not None and turn.end_of_turn_model
        end_silence_ms = turn.incomplete_wait_ms if model_on else v.end_silence_ms
        confirm_ms = turn.barge_in_confirm_ms if turn is not None else 0
        echo_guard_db = turn.echo_guard_db if turn is not None else 0.0
        span_ms = turn.barge_in_span_ms if turn is not None else 0
        vad = model if isinstance(model, SileroVad) else SileroVad(model)
        return cls(vad, v.start_threshold, v.end_threshold, end_silence_ms, v.pre_roll_ms,
                   v.min_utterance_ms, v.max_utterance_s, v.barge_in_ms, v.speculative_pause_ms, confirm_ms,
                   echo_guard_db, span_ms, echo)

    def tune(self, start_threshold: float, end_silence_ms: int, pre_roll_ms: int) -> None:
        """A client's own thresholds (a Realtime session's turn_detection): the probability that opens speech (the
        closing one stays 0.15 under it), the silence that ends it, the audio kept from before it."""
        self.start_threshold = start_threshold
        self.end_threshold = max(0.01, start_threshold - 0.15)
        self.end_silence_chunks = max(1, round(end_silence_ms * SAMPLE_RATE / 1000 / CHUNK))
        if self.pause_chunks >= self.end_silence_chunks:
            self.pause_chunks = self.longer_pause_chunks = 0
        self.pre_roll_chunks = max(0, round(pre_roll_ms * SAMPLE_RATE / 1000 / CHUNK))
        self.before = deque(self.before, maxlen=self.pre_roll_chunks + LEAD_IN_MAX_CHUNKS)

    def reset(self) -> None:
        self.vad.reset()
        self.before.clear()
        self.pending = np.zeros(0, dtype=np.int16)
        self.speaking = self.confirmed = self.onset_reported = self.confirm_reported = self.going_on = False
        self.speech, self.carried, self.pause_reported, self.resume_until = [], None, False, None
        self.silent_chunks = self.quiet_tail = self.onset_run = 0
        self.tail_levels.clear()
        if self._before_fresh is not None:  # (judged again, if it comes to that, from here)
            self._keep_from_here()

    def end_now(self, at_pause: bool = False) -> list[VadEvent]:
        """End the utterance being heard at this point (its turn is complete), as a long enough silence would.
        at_pause: the end-of-turn model ended it at a pause, which opens the window for the user going on (not a
        client's commit, nor audio that stopped coming)."""
        if not self.speaking:
            return []
        # (set before the close: a stream that may be judged again keeps it where the close leaves the segmentation)
        left = max(0, self.end_silence_chunks - self.silent_chunks)  # (silence alone ends it: see _step)
        self.resume_until = self.position + left * CHUNK if at_pause else None
        event = self._close()
        if event is None or event.kind is not Heard.END:
            self.resume_until = None
        return [event] if event is not None else []

    def carry(self, earlier: Utterance) -> None:
        """The current utterance continues `earlier` (already closed): it will begin with it."""
        self.carried = earlier

    def feed(self, pcm: np.ndarray, arrived: float | None = None) -> list[VadEvent]:
        """Feed int16 samples (the last of them arrived at `arrived`, monotonic: what was played then may echo in
        them); return what was heard in them, in the order it happened (one message may hold several chunks: a
        cough's start and drop, then the next sentence's start)."""
        self.pending = np.concatenate([self.pending, pcm]) if self.pending.size else pcm
        arrived_end = self.position + self.pending.size  # the stream position `arrived` stands for
        events: list[VadEvent] = []
        while self.pending.size >= CHUNK:
            chunk, self.pending = self.pending[:CHUNK], self.pending[CHUNK:]
            samples = chunk.astype(np.float32) / 32768.0
            level = level_db(samples)
            at = None if arrived is None else arrived - (arrived_end - self.position - CHUNK) / SAMPLE_RATE
            probability = self.vad.probability(samples)
            guarded = self.gate.guarded
            echo = self._echo_in(at)
            near_reply = guarded or echo
            p = self._judge(probability, level, near_reply, at)
            if self.gate.fresh_started:
                if self.speaking:  # (its audio stopped for over STREAM_GAP_S: the speech it carried is over)
                    events += [e for e in [self._close()] if e is not None]
                self.before.clear()  # (nor does a lead-in reach back across the gap)
                self.resume_until = None  # (nor is speech after it going on with what came before)
                self.onset_run = 0  # (nor is a word's start)
                self._keep_from_here()
            if self.gate.start is not None:
                self._fresh_chunks.append(KeptChunk(chunk, probability, level, at, guarded))
            elif self._before_fresh is not None:  # the voice was the user's: nothing to judge again
                self._before_fresh, self._fresh_chunks = None, []
            events += self._step(chunk, p, level, probability, near_reply, echo)
            if self.gate.expired:
                events += self._judge_again()
        return events

    def _step(self, chunk: np.ndarray, p: float, level: float, probability: float,
              near_reply: bool, echo: bool) -> list[VadEvent]:
        """Advance by one chunk whose voice the gate judged `p` (0: not the user's; Silero's own: `probability`;
        `near_reply`: the reply was playing, or `echo`: its audible echo may be in it)."""
        events: list[VadEvent] = []
        if p < self.end_threshold:
            self.floor_levels.append(level)
        chunk_start = self.position
        self.position += CHUNK
        word_start = min(self.onset_run, WORD_START_MAX_CHUNKS)  # (what Silero heard of a word before the gate did)
        self.onset_run = self.onset_run + 1 if self._word_may_start(probability, p, level, echo) else 0
        if not self.speaking:
            goes_on = self._goes_on(chunk_start, near_reply)
            if p >= (self.end_threshold if goes_on else self.start_threshold):
                self.speaking, self.going_on, self.resume_until = True, goes_on, None
                # (going on: from where the utterance was ended, as the one kept open would have held it)
                lead = [kept.chunk for kept in self.before] if goes_on else self._lead_in()
                self.speech = [*lead, chunk]
                self.speech_start = chunk_start - CHUNK * len(lead)
                self.span_from, self.span_voiced = chunk_start - word_start * CHUNK, word_start * CHUNK
                self.last_voiced_end = self.position
                self.silent_chunks = self.quiet_tail = 0
                self.tail_levels.clear()
                self.tail_levels.append(level)
                self.voiced_samples = CHUNK + word_start * CHUNK
                events += self._count_voiced()
                self.before.clear()
            else:
                self.before.append(HeardBefore(chunk, probability, level, near_reply))
            return events
        self.speech.append(chunk)
        if p < self.end_threshold:
            if self.silent_chunks == 0:
                self._credit_quiet_tail()
            self.silent_chunks += 1
            paused = self.silent_chunks + self.quiet_tail
            if self.pause_chunks and paused >= self.pause_chunks and not self.pause_reported and (
                    self.confirmed or self._may_be_a_command()):
                self.pause_reported = True
                events.append(VadEvent(Heard.PAUSE, self._so_far(), kept=self.confirmed))
            elif self.pause_reported and paused == self.longer_pause_chunks:
                events.append(VadEvent(Heard.PAUSE_LONGER, self._so_far()))
        else:
            if self.pause_reported:
                self.pause_reported = False
                events.append(VadEvent(Heard.RESUME))
            gap = self.silent_chunks + self.quiet_tail - word_start
            if gap > self.span_max_gap_chunks and (gap > MASKED_SPAN_MAX_GAP_CHUNKS or not self._masks_soft_sounds()):
                self.span_from, self.span_voiced = chunk_start, 0
            self.silent_chunks = self.quiet_tail = 0
            self.tail_levels.append(level)
            self.last_voiced_end = self.position
            self.voiced_samples += CHUNK
            events += self._count_voiced()
        began = self.carried.start_sample if self.carried is not None else self.speech_start
        too_long = self.position - began >= self.max_samples  # a request carried on and on is still capped
        if self.silent_chunks >= self.end_silence_chunks or too_long:
            event = self._close()
            if event is not None:
                events.append(event)
        return events

    def _may_be_a_command(self) -> bool:
        """Speech over the reply, too short yet to be kept, may be a one-word command ("Wait," before "stop."): a
        pause in it is reported for its words to be checked (COMMAND_MIN_SAMPLES), once its start has been."""
        return (self.gate.guarded and self.gate.echo is None and self.onset_reported
                and self.voiced_samples >= COMMAND_MIN_SAMPLES)

    def _word_may_start(self, probability: float, p: float, level: float, echo: bool) -> bool:
        """A chunk Silero calls speech that the gate did not take for the user's may be the start of their next word,
        in a room whose sound hides such soft sounds (``_masks_soft_sounds``): one with no other voices (Silero tells
        speech from its noise), or over the loud end of a room of voices (a run of their syllables rarely is). Never
        where the reply's echo may be (`echo`), nor, while the reply plays, under the echo guard's bar (what a client
        that cancels its own echo leaves of it)."""
        if probability < self.end_threshold or p >= self.end_threshold or echo or not self._masks_soft_sounds():
            return False
        if self.gate.guarded and self.echo_guard_db and level < self.level_db - self.echo_guard_db:
            return False
        loud = self.gate.room_loud_db
        return self.gate.steady or (loud is not None and level > loud)

    def _masks_soft_sounds(self) -> bool:
        """The room's own bar for going on with the user's speech stands within QUIET_UNDER_VOICE_DB of their voice:
        the soft sounds at their words' edges fall under it, as under a phone line's band."""
        voice, bar = self.level_db, self.gate.room_bar(speaking=True)
        return voice is not None and bar is not None and bar >= voice - QUIET_UNDER_VOICE_DB

    def _keep_from_here(self) -> None:
        """Judging the stream again, if it comes to that, starts from where the segmentation stands now."""
        self._before_fresh, self._fresh_chunks = self._segment_state(), []

    def _segment_state(self) -> dict:
        """A copy of where the segmentation stands (not Silero's state: its probabilities are kept)."""
        state = {}
        for name in _SEGMENT_STATE:
            value = getattr(self, name)
            state[name] = (deque(value) if isinstance(value, deque)
                           else list(value) if isinstance(value, list) else value)
        return state

    def _restore(self, state: dict) -> None:
        for name, value in state.items():
            current = getattr(self, name)  # (a deque keeps its length now: `tune` may have changed it since)
            setattr(self, name, deque(value, maxlen=current.maxlen) if isinstance(current, deque) else value)

    def _judge_again(self) -> list[VadEvent]:
        """The stream's first voice was the room's, not the user's (see VoiceGate.judge_again): the utterance it
        holds open is withdrawn, and the chunks since the stream started (or since the last utterance ended, which
        stays reported) are judged again, with the room learnt from them."""
        events = []
        if self.speaking and self.onset_reported:
            if self.pause_reported:
                events.append(VadEvent(Heard.RESUME))
            events.append(VadEvent(Heard.DROPPED))
        chunks, before = self._fresh_chunks, self._before_fresh
        self._fresh_chunks, self._before_fresh = [], None
        self.gate.judge_again()
        if before is None:  # (nothing kept to judge again from)
            return events
        self._restore(before)
        guarded = self.gate.guarded
        for kept in chunks:
            self.gate.guarded = kept.guarded
            echo = self._echo_in(kept.at)
            near_reply = kept.guarded or echo
            p = self._judge(kept.probability, kept.level, near_reply, kept.at)
            events += self._step(kept.chunk, p, kept.level, kept.probability, near_reply, echo)
        self.gate.guarded = guarded
        return events

    def _judge(self, probability: float, level: float, near_reply: bool, at: float | None) -> float:
        """The gate's judgement of the next chunk, with where the user's speech stands: open, or ended at a pause
        with speech now going on with it (see ``_goes_on``)."""
        open_ = self.speaking and self.onset_reported
        going_on = not open_ and self._goes_on(self.position, near_reply)
        return self.gate.judge(probability, level, self.position, open_ or going_on, self.end_threshold, at,
                               self.pause_reported, going_on=going_on)

    def _goes_on(self, start: int, near_reply: bool) -> bool:
        """Speech opening at stream position `start` goes on with the utterance ended at a pause (resume_until), on
        the bars for going on (among other voices, once the user's own has gone quiet, on those for starting: see
        VoiceGate.judge), as it would have had the model waited; not from a client that sends its speaker's echo
        back while the reply may be in it (the turn machine lets nothing over the reply go on there)."""
        return (not self.speaking and self.resume_until is not None and start < self.resume_until
                and not (near_reply and self.gate.echo is not None))

    def _echo_in(self, at: float | None) -> bool:
        """Whether the reply's audible echo may be in the chunk that arrived at `at` (a client that sends it back)."""
        echo = self.gate.echo
        played = echo.reference(at) if echo is not None and at is not None else None
        return played is not None and played >= ECHO_LEARN_ABOVE_DBFS

    def _lead_in(self) -> list[np.ndarray]:
        """What the opening speech begins with: the fixed pre-roll, or the voiced chunks just before it that stood over
        the bar for going on and the pre-roll before them, none near the reply (nor a lone one after a gap)."""
        heard = list(self.before)
        bar = self.gate.needed(self.level_db, speaking=True)
        run = gap = streak = 0
        for back, kept in enumerate(reversed(heard), start=1):
            if kept.near_reply or back > LEAD_IN_MAX_CHUNKS:
                break
            if kept.probability >= self.end_threshold and kept.level >= bar:
                streak += 1
                if run == back - 1 or streak >= 2:  # (joined to the speech, or two in a row)
                    run, gap = back, 0
            else:
                streak = 0
                if (gap := gap + 1) > LEAD_IN_GAP_CHUNKS:
                    break
        near = next((back - 1 for back, kept in enumerate(reversed(heard), start=1) if kept.near_reply), len(heard))
        keep = min(run + self.pre_roll_chunks, near) if run else min(self.pre_roll_chunks, len(heard))
        return [kept.chunk for kept in heard[len(heard) - keep:]] if keep else []

    def _credit_quiet_tail(self) -> None:
        """Silero has just called a chunk silent: the voiced chunks before it that were already down at the
        noise floor count as silence too (the pause began there), and the voice ended where they begin."""
        floor = float(np.median(self.floor_levels)) if self.floor_levels else None
        bound = max(floor + QUIET_OVER_FLOOR_DB, QUIET_FLOOR_MIN_DBFS) if floor is not None else QUIET_FLOOR_MIN_DBFS
        if (voice := self.level_db) is not None and not self.gate.steady:
            bound = min(bound, voice - QUIET_UNDER_VOICE_DB)
        quiet = 0
        for level in reversed(self.tail_levels):
            if level >= bound or self.last_voiced_end - (quiet + 1) * CHUNK <= self.speech_start:
                break
            quiet += 1
        self.quiet_tail = quiet
        self.last_voiced_end -= quiet * CHUNK
        self.tail_levels.clear()

    @property
    def level_db(self) -> float | None:
        """The user's speech level (dBFS), learnt from the chunks that were theirs."""
        return self.gate.level_db

    def _count_voiced(self) -> list[VadEvent]:
        """Update the flags after a voiced chunk; the start or confirmation of speech to report now."""
        self.confirmed = self.voiced_samples >= (self.onset_samples if self.going_on else self.min_samples)
        events = []
        if not self.onset_reported and self.voiced_samples >= self.onset_samples:
            self.onset_reported = True
            events.append(VadEvent(Heard.START))
        self.span_voiced += CHUNK
        # ...completed only by a chunk at (or just after one at) the user's own level while a reply plays: the hold
        # lets quieter chunks after their word through, and "Okay." with the reply's echo after it is not speech
        # going on. Without the echo guard there is no level to judge by (and no hold).
        users = (not self.guarded or not self.echo_guard_db
                 or self.position - CHUNK - self.loud_at <= SPAN_USER_LAG_CHUNKS * CHUNK)
        spanned = (self.span_samples and users and self.position - self.span_from >= self.span_samples
                   and self.span_voiced >= self.span_min_voiced)
        if self.confirm_samples and not self.confirm_reported and (self.voiced_samples >= self.confirm_samples
                                                                   or spanned):
            self.confirm_reported = True
            events.append(VadEvent(Heard.CONFIRM, self._so_far()))  # (what a check of its words hears)
        return events

    def _utterance(self, audio: np.ndarray) -> Utterance:
        """The speech heard, after the earlier utterance it continues (with at most MAX_JOIN_GAP_S between)."""
        if self.carried is None:
            return Utterance(audio.tobytes(), self.speech_start, self.position, self.last_voiced_end)
        earlier = self.carried
        gap = min(self.speech_start - earlier.end_sample, int(MAX_JOIN_GAP_S * SAMPLE_RATE))
        pcm = earlier.pcm + np.zeros(max(0, gap), np.int16).tobytes() + audio.tobytes()
        return Utterance(pcm, earlier.start_sample, self.position, self.last_voiced_end)

    def _so_far(self) -> Utterance:
        return self._utterance(np.concatenate(self.speech))

    def _close(self) -> VadEvent | None:
        self.speaking = self.going_on = False
        self.pause_reported = False
        audio = np.concatenate(self.speech)
        self.speech = []
        self.silent_chunks = self.quiet_tail = 0
        confirmed, reported = self.confirmed, self.onset_reported
        self.confirmed = self.onset_reported = self.confirm_reported = False
        if not confirmed:  # a click or a cough (what it would have continued is still carried)
            return VadEvent(Heard.DROPPED) if reported else None
        utterance = self._utterance(audio)
        self.carried = None
        if self._before_fresh is not None:  # (reported, it stays: the stream may be judged again from here on)
            self._keep_from_here()
        return VadEvent(Heard.END, utterance)
