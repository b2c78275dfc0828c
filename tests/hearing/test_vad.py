"""The per-session VAD segmenter with the real Silero ONNX model on real (Piper-spoken) speech."""

from __future__ import annotations

import numpy as np
import pytest

from tests.harness.speech import babble, noise, silence, spoken, under, voiced_span
from vita.config import Config
from vita.hearing.utterance import Heard, VadEvent
from vita.hearing.vad import (
    CHUNK,
    QUIET_TAIL_CHUNKS,
    SAMPLE_RATE,
    SileroModel,
    SileroVad,
    VadSegmenter,
)
from vita.hearing.voice_gate import MIN_LEVEL_CHUNKS, EchoReference


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return spoken("What is the capital of France?")


def segmenter() -> VadSegmenter:
    config = Config()
    return VadSegmenter.from_config(config.vad, config.vad_model_path())


def truth(audio: np.ndarray, offset: int) -> tuple[int, int]:
    """First and last clearly audible sample of `audio`, as offsets into a stream where it starts at `offset`."""
    first, last = voiced_span(audio)
    return offset + round(first * SAMPLE_RATE), offset + round(last * SAMPLE_RATE)


def run(stream: np.ndarray, step: int = 128):
    seg = segmenter()
    onsets, utterances = 0, []
    for i in range(0, len(stream), step):  # VITA's page sends 128-sample (8 ms) messages
        for event in seg.feed(stream[i:i + step]):
            onsets += event.kind is Heard.START
            utterances += [event.utterance] if event.kind is Heard.END else []
    return onsets, utterances


def test_one_utterance_covers_the_speech(speech):
    stream = np.concatenate([silence(1.0), speech, silence(1.0)])
    onsets, utterances = run(stream)
    assert onsets == 1 and len(utterances) == 1
    truth_start, truth_end = truth(speech, SAMPLE_RATE)
    u = utterances[0]
    assert u.start_sample <= truth_start and truth_start - u.start_sample < 0.3 * SAMPLE_RATE + 512
    assert abs(u.speech_end_sample - truth_end) < 0.3 * SAMPLE_RATE
    assert u.end_sample >= truth_end  # the audio handed on contains the whole utterance
    assert len(u.pcm) // 2 == u.end_sample - u.start_sample


def test_two_utterances_one_second_apart(speech):
    stream = np.concatenate([silence(0.5), speech, silence(1.0), speech, silence(1.0)])
    onsets, utterances = run(stream)
    assert onsets == 2 and len(utterances) == 2


def test_silence_and_noise_yield_nothing():
    assert run(np.concatenate([silence(2.0), noise(3.0), silence(1.0)])) == (0, [])


def test_end_of_speech_is_reported_within_half_a_second(speech):
    seg = segmenter()
    stream = np.concatenate([silence(0.5), speech, silence(2.0)])
    _, truth_end = truth(speech, int(0.5 * SAMPLE_RATE))
    for i in range(0, len(stream), 128):
        if any(e.kind is Heard.END for e in seg.feed(stream[i:i + 128])):
            detected_at = i + 128
            break
    else:
        pytest.fail("no utterance")
    assert (detected_at - truth_end) / SAMPLE_RATE < 0.5


def test_sessions_sharing_one_model_keep_their_own_state(speech):
    """One ONNX session serves every session's VAD: interleaved use gives what private models give."""
    model_path = Config().vad_model_path()
    shared = SileroModel(model_path)
    a_audio = np.concatenate([silence(0.3), speech]).astype(np.float32) / 32768
    b_audio = noise(len(a_audio) / SAMPLE_RATE, level=2000, seed=3).astype(np.float32) / 32768
    a_shared, b_shared = SileroVad(shared), SileroVad(shared)
    a_alone, b_alone = SileroVad(model_path), SileroVad(model_path)
    for i in range(0, len(a_audio) - CHUNK, CHUNK):
        a, b = a_audio[i:i + CHUNK], b_audio[i:i + CHUNK]
        assert a_shared.probability(a) == pytest.approx(a_alone.probability(a), abs=1e-6)
        assert b_shared.probability(b) == pytest.approx(b_alone.probability(b), abs=1e-6)
    assert not np.allclose(a_shared.state, b_shared.state)


def events_of(stream: np.ndarray, step: int = 512) -> list[str]:
    """What the segmenter reports, in order: start, pause, resume, end."""
    seg, seen = segmenter(), []
    for i in range(0, len(stream), step):
        seen += [event.kind.value for event in seg.feed(stream[i:i + step])]
    return seen


def test_a_short_pause_then_more_speech_is_a_pause_and_a_resume_in_one_utterance():
    def voiced(audio: np.ndarray) -> np.ndarray:  # without Piper's own leading and trailing silence
        first, last = voiced_span(audio)
        return audio[round(first * SAMPLE_RATE):round(last * SAMPLE_RATE)]

    first, second = voiced(spoken("What is the capital")), voiced(spoken("of France?"))
    # 200 ms of silence: longer than the 128 ms pause, shorter than the 300 ms end of speech.
    stream = np.concatenate([silence(0.5), first, silence(0.2), second, silence(1.0)])
    seen = events_of(stream)
    assert seen[0] == "start" and seen[-1] == "end" and seen.count("end") == 1
    assert "pause" in seen and "resume" in seen and seen.index("pause") < seen.index("resume")


def test_the_pause_before_the_end_carries_the_speech_so_far():
    question = spoken("What is the capital of France?")
    seg, paused, ended = segmenter(), [], []
    stream = np.concatenate([silence(0.5), question, silence(1.0)])
    for i in range(0, len(stream), 512):
        for event in seg.feed(stream[i:i + 512]):
            paused += [event.utterance] if event.kind is Heard.PAUSE else []
            ended += [event.utterance] if event.kind is Heard.END else []
    (pause,), (end,) = paused, ended
    assert pause.speech_end_sample == end.speech_end_sample and pause.start_sample == end.start_sample
    assert pause.end_sample - pause.speech_end_sample == seg.pause_chunks * CHUNK  # pause_ms after the voice ended
    assert end.end_sample > pause.end_sample and end.pcm.startswith(pause.pcm)


def test_the_pause_is_found_where_the_voice_fell_silent_not_where_silero_let_go(speech):
    """Silero's probability stays up 2-3 chunks after the voice stops; those chunks, down at the line's noise
    floor, count as the pause's silence: the pause comes ~0.1 s sooner and the end of speech is where the voice
    ended. The pause that goes on is reported once more, QUIET_TAIL_CHUNKS later."""
    rng = np.random.default_rng(1)
    stream = np.concatenate([silence(1.0), speech, silence(1.0)])
    stream = (stream + rng.normal(0, 30, stream.size)).astype(np.int16)  # a quiet room: -60 dBFS
    seg, events = segmenter(), []
    for i in range(0, len(stream), 128):
        events += [(seg.position, e) for e in seg.feed(stream[i:i + 128])]
    (at, pause), = [(p, e.utterance) for p, e in events if e.kind is Heard.PAUSE]
    (longer_at,) = [p for p, e in events if e.kind is Heard.PAUSE_LONGER]
    _, truth_end = truth(speech, SAMPLE_RATE)
    assert abs(pause.speech_end_sample - truth_end) <= 1.5 * CHUNK
    assert at - truth_end <= seg.pause_chunks * CHUNK + 2 * CHUNK  # Silero alone: 3-4 chunks later still
    assert longer_at - at == QUIET_TAIL_CHUNKS * CHUNK


def test_only_chunks_at_the_noise_floor_and_well_under_the_voice_count_as_silence():
    seg = segmenter()
    seg.levels.extend([-25.0] * MIN_LEVEL_CHUNKS)  # the user's voice: -25 dBFS
    seg.speech_start, seg.last_voiced_end = 0, 40 * CHUNK

    def credit(floor: float, tail: list[float]) -> int:
        seg.floor_levels.clear()
        seg.floor_levels.extend([floor] * 10)
        seg.tail_levels.clear()
        seg.tail_levels.extend(tail)
        seg.last_voiced_end = 40 * CHUNK
        seg._credit_quiet_tail()
        return seg.quiet_tail

    assert credit(-70.0, [-30.0, -66.0, -69.0]) == 2  # the last two are at the floor; the voice ended before them
    assert seg.last_voiced_end == 38 * CHUNK
    assert credit(-70.0, [-66.0, -30.0, -69.0]) == 1  # only the run at the very end counts
    assert credit(-42.0, [-40.0, -41.0, -42.0]) == 0  # a noisy room: its floor is within 20 dB of the voice
    assert credit(-90.0, [-55.0, -58.0, -61.0]) == 1  # under -60 dBFS is silence even on a silent line


def test_one_message_of_several_chunks_reports_its_events_in_the_order_they_happened():
    """A cough, then speech, in one message: dropped (the cough's start, then its drop) comes before the speech's
    start — not start, dropped as counting flags gave (which read as the new speech being dropped)."""
    cough = spoken("Please tell me a joke about cats.")[3200:5600]  # 150 ms out of the middle of a word
    speech = spoken("What is the capital of France?")
    stream = np.concatenate([silence(0.5), cough, silence(0.6), speech, silence(1.0)])
    seen = events_of(stream, step=len(stream))  # the whole stream as one message
    assert [k for k in seen if k in ("start", "dropped", "end")] == ["start", "dropped", "start", "end"]


def test_while_the_reply_plays_its_quiet_echo_is_not_speech_but_the_user_is():
    """The echo guard: the user's level is learnt from their own speech; while guarded (the reply plays), speech
    30 dB below it (a browser echo canceller's residual) is the reply leaking back from a speaker, and neither starts
    nor confirms an interruption."""
    config = Config()
    seg = VadSegmenter.from_config(config.vad, config.vad_model_path(), config.turn)
    question = spoken("What is the capital of France?")
    kinds = [e.kind for e in seg.feed(np.concatenate([silence(0.5), question, silence(1.5)]))]
    assert Heard.END in kinds and seg.level_db is not None
    seg.guarded = True
    reply = spoken("Paris is the capital and the largest city of France, on the river Seine.")
    echo = (reply.astype(np.float32) * 10 ** (-30 / 20)).astype(np.int16)
    assert seg.feed(np.concatenate([echo, silence(1.5)])) == []
    interruption = [e.kind for e in seg.feed(np.concatenate([spoken("Wait, stop. What about Germany?"),
                                                             silence(1.5)]))]
    assert interruption[0] is Heard.START and Heard.CONFIRM in interruption
    seg.guarded = False  # nothing plays: a voice 30 dB under the user's is someone far away, not the user
    assert seg.feed(np.concatenate([echo, silence(1.5)])) == []
    fresh = VadSegmenter.from_config(config.vad, config.vad_model_path(), config.turn)
    assert Heard.START in [e.kind for e in fresh.feed(np.concatenate([silence(0.5), echo, silence(1.5)]))]  # unknown


def test_the_quiet_syllables_of_speech_over_the_reply_are_the_users():
    """Guarded, an utterance the user's voice opened keeps its quieter chunks (a third of "How are you today?" is
    20+ dB under the speaker's loud vowels): it is confirmed as it would be with nothing playing, with no pause
    inside."""
    config = Config()
    seg = VadSegmenter.from_config(config.vad, config.vad_model_path(), config.turn)
    seg.feed(np.concatenate([silence(0.5), spoken("Good morning."), silence(1.6)]))
    seg.guarded = True
    kinds = [e.kind for e in seg.feed(np.concatenate([spoken("How are you today?"), silence(1.6)]))]
    assert kinds[:2] == [Heard.START, Heard.CONFIRM] and Heard.END in kinds, kinds


def test_echo_after_a_short_word_over_the_reply_does_not_keep_it_going():
    """"Okay." starts speech over the reply; the reply's echo that follows is not the user's: it neither confirms
    the speech (an interruption) nor keeps the utterance from ending."""
    config = Config()
    seg = VadSegmenter.from_config(config.vad, config.vad_model_path(), config.turn)
    seg.feed(np.concatenate([silence(0.5), spoken("What is the capital of France?"), silence(1.6)]))
    seg.guarded = True
    reply = spoken("Paris is the capital and the largest city of France, on the river Seine. It is lovely in spring.")
    echo = (reply.astype(np.float32) * 10 ** (-30 / 20)).astype(np.int16)
    kinds = [e.kind for e in seg.feed(np.concatenate([spoken("Okay."), echo]))]
    assert kinds[0] is Heard.START and Heard.CONFIRM not in kinds and Heard.END in kinds, kinds


def test_a_clients_turn_detection_settings_retune_the_segmenter(speech):
    """A Realtime client's server_vad: the silence that ends speech, the audio kept before it, the threshold."""
    stream = np.concatenate([silence(0.5), speech, silence(2.5)])

    def ended_at(seg: VadSegmenter) -> float:
        for i in range(0, len(stream), 128):
            if any(e.kind is Heard.END for e in seg.feed(stream[i:i + 128])):
                return i / SAMPLE_RATE
        return float("inf")

    slow, quick = segmenter(), segmenter()
    slow.tune(0.5, 1500, 300)
    quick.tune(0.6, 400, 100)
    assert (quick.start_threshold, quick.end_threshold) == (0.6, pytest.approx(0.45))
    assert quick.pre_roll_chunks == round(100 * SAMPLE_RATE / 1000 / 512)
    assert ended_at(slow) - ended_at(quick) == pytest.approx(1.1, abs=0.1)


class ScriptedVad:
    """Silero's per-chunk probabilities, scripted: the rule under test is the segmenter's, not the model's."""

    def __init__(self, probabilities: list[float]):
        self.probabilities = iter(probabilities)

    def probability(self, chunk: np.ndarray) -> float:
        return next(self.probabilities, 0.0)

    def reset(self) -> None:
        pass


TONE = (8000 * np.sin(np.arange(CHUNK) / 5)).astype(np.int16)
# "#" voiced at the user's level, "-" voiced 12 dB under it, "~" voiced 24 dB under it, "." silent (a tone and
# digital silence: only the scripted probabilities decide what is voiced).
SCRIPTED_AUDIO = {"#": TONE, "-": (TONE / 4).astype(np.int16), "~": (TONE / 16).astype(np.int16),
                  ".": np.zeros(CHUNK, np.int16), "=": (TONE / 8).astype(np.int16),  # "=": a noise 18 dB under
                  "s": (TONE / 9).astype(np.int16),  # a word's soft start 19 dB under, in that noise
                  "b": (TONE / 11).astype(np.int16), "w": (TONE / 9.5).astype(np.int16),  # other voices 21 dB under;
                  "B": (TONE / 6.5).astype(np.int16), "C": (TONE / 4.9).astype(np.int16),
                  "v": (TONE / 22).astype(np.int16)}  # a word's soft start 1.2 dB over them; their loud syllables 4.6
# and 7 dB over, their quietest 6 dB under ("=" is silent to Silero, the rest speech)


def confirmed_at(voiced: str, span_ms: int = 700, echo_guard_db: float = 0.0, learn: str = "",
                 room: str = ".") -> int | None:
    """The chunk (32 ms each) of `voiced` at which speech is confirmed; `learn` is fed first, before a reply plays
    (the user's level), and `voiced` over the reply when `learn` is given. The end-of-turn model's long wait (1.5 s)
    keeps the utterance open across gaps, as over a reply."""
    seg = VadSegmenter(ScriptedVad([0.9 if c in "#-~sbw" else 0.0 for c in room * 32 + learn + voiced]), 0.5, 0.35,
                       end_silence_ms=1500, pre_roll_ms=0, min_utterance_ms=250, max_utterance_s=30, onset_ms=64,
                       pause_ms=128, confirm_ms=650, echo_guard_db=echo_guard_db, span_ms=span_ms)
    for c in room * 32 + learn:  # the microphone opens on the room
        seg.feed(SCRIPTED_AUDIO[c])
    seg.guarded = bool(learn)
    for i, c in enumerate(voiced):
        if any(e.kind is Heard.CONFIRM for e in seg.feed(SCRIPTED_AUDIO[c])):
            return i
    return None


@pytest.mark.fast
def test_speech_that_goes_on_past_its_gaps_is_confirmed_by_its_span():
    """"Wait, stop. What about…" in a robotic voice: 320 ms voiced, a 160 ms gap, then more. 650 ms voiced would
    come at chunk 25; going on 700 ms after it began (chunk 21), more than 390 ms of it voiced, it interrupts."""
    robotic = "#" * 10 + "." * 5 + "#" * 20
    assert confirmed_at(robotic, span_ms=0) == 25
    assert confirmed_at(robotic) == 21
    assert confirmed_at("#" * 30) == 20  # unbroken speech: 650 ms voiced comes first, as before


@pytest.mark.fast
def test_a_backchannel_in_two_parts_is_not_confirmed_and_sparse_speech_needs_its_voiced_share():
    assert confirmed_at("#" * 8 + "." * 4 + "#" * 8 + "." * 20) is None  # "mm-hmm": over in 640 ms
    # 96 ms voiced in every 256: at 700 ms only 288 ms of it is voiced; it is confirmed once 390 ms is.
    assert confirmed_at(("#" * 3 + "." * 5) * 6 + "." * 20) == 32


@pytest.mark.fast
def test_a_long_gap_starts_the_span_again():
    """A 416 ms "yeah", then a breath a second later: not speech going on (the utterance is still open)."""
    assert confirmed_at("#" * 13 + "." * 30 + "#" * 2 + "." * 30) is None
    # A gap of 320 ms is still one stretch of speech: confirmed by the first chunk after it.
    assert confirmed_at("#" * 13 + "." * 10 + "#" * 10) == 23


def confirmed_over_reply(voiced: str, echo_guard_db: float = 20, room: str = ".") -> int | None:
    """confirmed_at while a reply plays and the user's level is known ("-": a word's falling end, not echo, which
    the guard takes out 20 dB down)."""
    return confirmed_at(voiced, 700, echo_guard_db, learn="#" * 20 + room * 50, room=room)


@pytest.mark.fast
def test_over_a_reply_the_span_ends_on_the_users_voice_or_just_after_it():
    """"No, wait." spanning 700 ms as "wait" falls away: confirmed by the falling chunk right after the user's level,
    not by one two chunks on (that is held audio: the hold lets echo through after a word)."""
    assert confirmed_over_reply("#" * 10 + "." * 5 + "#" * 6 + "-" * 3 + "." * 20) == 21
    assert confirmed_over_reply("#" * 10 + "." * 5 + "#" * 5 + "-" * 4 + "." * 20) is None
    assert confirmed_over_reply("#" * 10 + "." * 5 + "#" * 20) == 21  # the user's voice at 700 ms, as before
    # With the echo guard off (turn.echo_guard_db: 0) no level is judged: any voiced chunk completes the span.
    assert confirmed_over_reply("#" * 10 + "." * 5 + "#" * 5 + "-" * 4 + "." * 20, echo_guard_db=0) == 21


def heard_over_reply(voiced: str, guarded: bool = True, onset_ms: int = 64,
                     echo: EchoReference | None = None) -> list[VadEvent]:
    """What is reported of `voiced` ("#" the user's voice, "." silence), the user's level learnt first, while a
    reply plays (`guarded`) or not."""
    learn = "." * 32 + "#" * 20 + "." * 50
    seg = VadSegmenter(ScriptedVad([0.9 if c == "#" else 0.0 for c in learn + voiced]), 0.5, 0.35,
                       end_silence_ms=1500, pre_roll_ms=0, min_utterance_ms=250, max_utterance_s=30,
                       onset_ms=onset_ms, pause_ms=128, confirm_ms=650, echo_guard_db=20, span_ms=700, echo=echo)
    for c in learn:
        seg.feed(SCRIPTED_AUDIO[c])
    seg.guarded = guarded
    return [e for c in voiced for e in seg.feed(SCRIPTED_AUDIO[c])]


def kinds_of(events: list[VadEvent]) -> list[Heard]:
    return [e.kind for e in events]


@pytest.mark.fast
def test_over_the_reply_a_word_too_short_to_keep_pauses_for_its_words_to_be_checked():
    """"Wait," with its soft edges hidden by people talking 10 dB under the voice: 192 ms voiced, under
    min_utterance_ms (250), and no pause was reported until "Wait, stop." had ended (the reply stopped 1.0 s after
    its onset). Over the reply its pause is reported, not kept, with what was heard of it (its words say whether it
    was a command); not when nothing plays (a pause there starts a turn), nor under 160 ms, nor before the start of
    speech was reported."""
    events = heard_over_reply("#" * 6 + "." * 6 + "#" * 6 + "." * 10)
    assert kinds_of(events)[:3] == [Heard.START, Heard.PAUSE, Heard.RESUME], events
    assert not events[1].kept and len(events[1].utterance.pcm) // 2 >= 6 * CHUNK
    assert kinds_of(heard_over_reply("#" * 6 + "." * 6 + "#" * 6 + "." * 10, guarded=False)) == [
        Heard.START, Heard.PAUSE, Heard.PAUSE_LONGER]  # (at its end: kept by then)
    assert kinds_of(heard_over_reply("#" * 5 + "." * 50)) == [Heard.START, Heard.PAUSE, Heard.PAUSE_LONGER,
                                                              Heard.DROPPED]  # (160 ms, never kept)
    assert kinds_of(heard_over_reply("#" * 4 + "." * 50)) == [Heard.START, Heard.DROPPED]
    assert Heard.PAUSE not in kinds_of(heard_over_reply("#" * 6 + "." * 50, onset_ms=224))
    (kept,) = [e for e in heard_over_reply("#" * 8 + "." * 6) if e.kind is Heard.PAUSE]
    assert kept.kept  # (as before)


@pytest.mark.fast
def test_a_client_that_sends_its_speakers_echo_back_gets_no_pause_in_a_word_too_short_to_keep():
    """There a burst may be the reply's own words ("wait", "enough"), and speech over the reply is held for its
    words already."""
    assert Heard.PAUSE not in kinds_of(heard_over_reply("#" * 6 + "." * 50, echo=EchoReference()))


@pytest.mark.fast
def test_in_a_noise_near_the_voice_a_words_soft_start_is_no_gap_in_the_span():
    """"Wait, [s]top." over a fan 10 dB under the voice: Silero hears the soft "s" ("s"), too near the fan for the
    gate, and it was counted as gap, so the span started again and the interruption waited for 650 ms of voice. The
    chunks Silero calls speech right before the user's voice are their word's start (chunk 28, not 36). Not when the
    fan comes between them and the voice, and not in a quiet room, where nothing hides a word's start."""
    assert confirmed_over_reply("#" * 8 + "=" * 12 + "s" * 4 + "#" * 20, room="=") == 28
    assert confirmed_over_reply("#" * 8 + "=" * 16 + "#" * 20, room="=") == 36
    assert confirmed_over_reply("#" * 8 + "=" * 12 + "s" * 4 + "=" * 4 + "#" * 20, room="=") == 40
    assert confirmed_over_reply("#" * 8 + "." * 8 + "~" * 4 + "#" * 20) == 32


@pytest.mark.fast
def test_in_a_noise_near_the_voice_a_words_soft_start_before_speech_opens_is_voiced():
    """The first 60 ms of "Wait" under a fan's bar for opening speech: "Wait, stop." came to 640 ms voiced and
    waited for its next words. Silero's chunks right before the opening count (at most 5); not in a quiet room, and
    not under the echo guard's bar while the reply plays ("~", 24 dB under the user: what a client's own echo
    cancellation leaves of the reply)."""
    assert confirmed_over_reply("s" * 3 + "#" * 18 + "=" * 20, room="=") == 20
    assert confirmed_over_reply("=" * 3 + "#" * 18 + "=" * 20, room="=") is None
    assert confirmed_over_reply("s" * 7 + "#" * 16 + "=" * 20, room="=") == 22  # (5 of the 7 counted)
    assert confirmed_over_reply("~" * 3 + "#" * 18 + "." * 20) is None
    assert confirmed_over_reply("~" * 3 + "#" * 18 + "=" * 20, room="=") is None


@pytest.mark.fast
def test_among_other_voices_only_a_word_start_over_the_rooms_loud_end_is_voiced():
    """People talking 21 dB under the user: Silero's chunks right before the user's voice count as their word's
    start only where they stand over the room's loud end (a run of the room's own syllables seldom does)."""
    assert confirmed_over_reply("w" * 3 + "#" * 18 + "b" * 20, room="b") == 20
    assert confirmed_over_reply("b" * 3 + "#" * 18 + "b" * 20, room="b") is None


@pytest.mark.fast
def test_a_noise_near_the_voice_hides_the_soft_sounds_between_words_and_the_span_bridges_a_longer_gap():
    """A noise 18 dB under the user (the room's bar for going on within 20 dB of their voice): a gap of 0.38 s between
    "Wait," and "stop" is one stretch of speech (0.45 s, as over a phone line); in a quiet room it starts the span
    again (0.32 s)."""
    assert confirmed_over_reply("#" * 8 + "=" * 12 + "#" * 20, room="=") == 24
    assert confirmed_over_reply("#" * 8 + "." * 12 + "#" * 20) == 32
    assert confirmed_over_reply("#" * 8 + "=" * 16 + "#" * 20, room="=") == 36


QUESTIONS = ("What is the capital of France?", "How many legs does a spider have?")


def fan(seconds: float) -> np.ndarray:
    """Steady noise with a fan's downward tilt: white noise through a one-pole low-pass (float32)."""
    white = np.random.default_rng(9).normal(0, 1000, int(seconds * SAMPLE_RATE))
    tilted = np.empty_like(white)
    acc = 0.0
    for i, x in enumerate(white):  # (a few seconds: fast enough as a loop)
        acc = 0.9 * acc + 0.1 * x
        tilted[i] = acc
    return tilted.astype(np.float32)


def in_a_room(bed_db: float | None, seconds_between: float = 3.0, scale_db: float = 0.0, steady: bool = False):
    """Two questions with `seconds_between` of the room before, between and after them, other people talking
    `bed_db` under the user (None: a quiet room, -70 dBFS of hiss; `steady`: a fan instead of people); the user
    `scale_db` louder or softer. Returns the mixed stream and each question's first and last voiced sample in it."""
    parts, spans, at = [silence(seconds_between)], [], int(seconds_between * SAMPLE_RATE)
    for text in QUESTIONS:
        question = (np.asarray(spoken(text)).astype(np.float32) * 10 ** (scale_db / 20)).astype(np.int16)
        spans.append(truth(np.asarray(spoken(text)), at))  # (where the voice is, at any level)
        parts += [question, silence(seconds_between)]
        at += question.size + int(seconds_between * SAMPLE_RATE)
    stream = np.concatenate(parts).astype(np.float32)
    stream += np.random.default_rng(5).normal(0, 10, stream.size)
    if bed_db is not None:
        bed = fan(stream.size / SAMPLE_RATE) if steady else babble(stream.size / SAMPLE_RATE)
        stream += under(bed, np.asarray(spoken(QUESTIONS[0])), bed_db)
    return np.clip(stream, -32768, 32767).astype(np.int16), spans


def heard_in(stream: np.ndarray, seg: VadSegmenter | None = None) -> list[tuple[int, Heard, object]]:
    seg = seg or VadSegmenter.from_config(Config().vad, Config().vad_model_path(), Config().turn)
    seen = []
    for i in range(0, len(stream), 128):
        seen += [(seg.position, e.kind, e.utterance) for e in seg.feed(stream[i:i + 128])]
    return seen


def assert_each_question_heard_alone(seen, spans, end_within_s: float) -> None:
    starts = [at for at, kind, _ in seen if kind is Heard.START]
    ends = [u for _, kind, u in seen if kind is Heard.END]
    assert len(starts) == len(ends) == len(spans), [(at / SAMPLE_RATE, k.value) for at, k, _ in seen]
    for start_at, end, (first, last) in zip(starts, ends, spans, strict=True):
        assert first <= start_at <= first + 0.3 * SAMPLE_RATE  # opened by the user's voice, not the room's
        assert abs(end.speech_end_sample - last) < end_within_s * SAMPLE_RATE  # ...and ended where they stopped


def test_other_people_talking_20_db_under_the_user_start_nothing_and_end_nothing_late():
    """Three other people talking 20 dB under the user, without a break: Silero calls all of it speech, so an
    utterance used to run to its 30 s cap. Only the user's voice opens speech, and each question ends where the
    user stopped, as in a quiet room."""
    quiet, spans = in_a_room(None)
    assert_each_question_heard_alone(heard_in(quiet), spans, 0.3)
    noisy, spans = in_a_room(20)
    assert_each_question_heard_alone(heard_in(noisy), spans, 0.3)


def test_other_people_10_db_under_the_user_start_nothing_before_the_user_speaks():
    noisy, spans = in_a_room(10)
    seen = heard_in(noisy)
    starts = [at for at, kind, _ in seen if kind is Heard.START]
    assert starts and spans[0][0] <= starts[0] <= spans[0][0] + 0.3 * SAMPLE_RATE
    first_end = next(u for _, kind, u in seen if kind is Heard.END)
    assert abs(first_end.speech_end_sample - spans[0][1]) < 0.5 * SAMPLE_RATE


def test_a_fan_10_db_under_the_user_cuts_no_question_short():
    """Steady noise sits just under its own loud end: a bar of 12 dB over the floor once held the user's quieter
    words for noise, and the question ended early ("How many days are there" of "...in a leap year?")."""
    noisy, spans = in_a_room(10, steady=True)
    assert_each_question_heard_alone(heard_in(noisy), spans, 0.4)


def test_over_a_fan_a_question_pauses_once_at_its_end():
    """As the voice fades into a fan, Silero calls the fan speech for a while: let through as the user's softer
    syllables, one such chunk after the pause the question ends with resumed it (the turn begun at the pause
    withdrawn and begun again) after most questions."""
    noisy, spans = in_a_room(10, steady=True)
    seen = heard_in(noisy)
    for first, last in spans:
        heard = [(at, kind) for at, kind, _ in seen if first <= at <= last + 1.0 * SAMPLE_RATE]
        pauses = [at for at, kind in heard if kind is Heard.PAUSE]
        assert pauses and abs(pauses[-1] - last) < 0.3 * SAMPLE_RATE, heard  # the pause that ends it...
        assert Heard.RESUME not in [kind for at, kind in heard if at > pauses[-1] - 0.3 * SAMPLE_RATE], heard


def test_a_quiet_speaker_in_a_quiet_room_is_heard_from_their_first_word():
    """30 dB softer than the bundled voice (about -50 dBFS while speaking) over -70 dBFS of hiss."""
    quiet, spans = in_a_room(None, scale_db=-30)
    assert_each_question_heard_alone(heard_in(quiet), spans, 0.3)


def test_over_the_reply_other_people_do_not_interrupt_it_and_the_user_does():
    """Barge-in goes through the same gate: while the reply plays, the room's voices start nothing; the user's
    "Wait, stop." is confirmed."""
    config = Config()
    seg = VadSegmenter.from_config(config.vad, config.vad_model_path(), config.turn)
    noisy, _ = in_a_room(20)
    heard_in(noisy, seg)  # the user asked two questions: their level and the room's are known
    seg.guarded = True
    bed = under(babble(4.0, talkers=3), np.asarray(spoken(QUESTIONS[0])), 20)
    assert heard_in(bed, seg) == []
    over = np.asarray(spoken("Wait, stop. What about Germany?"))
    mixed = np.clip(np.concatenate([over, silence(1.5)]).astype(np.float32)
                    + np.resize(bed, over.size + int(1.5 * SAMPLE_RATE)), -32768, 32767).astype(np.int16)
    kinds = [kind for _, kind, _ in heard_in(mixed, seg)]
    # "Wait," pauses first (not kept yet: its words are checked), then the speech goes on and is confirmed
    assert kinds[:2] == [Heard.START, Heard.PAUSE] and Heard.CONFIRM in kinds and Heard.DROPPED not in kinds, kinds


def heard_live(stream: np.ndarray, t0: float = 100.0) -> list[tuple[int, Heard, object]]:
    """As heard_in, each 8 ms message stamped with when it arrived (real time from `t0`), as the server feeds it:
    a stream's first moments are judged by how it started."""
    config = Config()
    seg = VadSegmenter.from_config(config.vad, config.vad_model_path(), config.turn)
    seen = []
    for i in range(0, len(stream), 128):
        arrived = t0 + (i + 128) / SAMPLE_RATE
        seen += [(seg.position, e.kind, e.utterance) for e in seg.feed(stream[i:i + 128], arrived)]
    return seen


def talk_in_babble(lead_s: float, between_s: float = 1.5, tail_s: float = 5.0) -> tuple[np.ndarray, list]:
    """Three other people talking 20 dB under the user from the stream's first sample; the two questions from
    `lead_s` on. Returns the stream and each question's first and last voiced sample in it."""
    parts, spans, at = [silence(lead_s)], [], int(lead_s * SAMPLE_RATE)
    for text in QUESTIONS:
        question = np.asarray(spoken(text))
        spans.append(truth(question, at))
        parts += [question, silence(between_s)]
        at += question.size + int(between_s * SAMPLE_RATE)
    parts.append(silence(tail_s))
    stream = np.concatenate(parts).astype(np.float32)
    stream += np.random.default_rng(5).normal(0, 10, stream.size)
    stream += under(babble(stream.size / SAMPLE_RATE), np.asarray(spoken(QUESTIONS[0])), 20)
    return np.clip(stream, -32768, 32767).astype(np.int16), spans


def assert_each_question_its_own_utterance(seen, spans, end_within_s: float = 0.3) -> None:
    """Every start reported is ended or withdrawn, and the utterances are the questions, each from where it began to
    where the user stopped (by the utterances' samples: a start withdrawn is reported again later)."""
    kinds = [kind for _, kind, _ in seen]
    ends = [u for _, kind, u in seen if kind is Heard.END]
    assert kinds.count(Heard.START) == len(ends) + kinds.count(Heard.DROPPED), kinds
    assert len(ends) == len(spans), [(u.start_sample / SAMPLE_RATE, u.speech_end_sample / SAMPLE_RATE) for u in ends]
    for end, (first, last) in zip(ends, spans, strict=True):
        assert first - 0.6 * SAMPLE_RATE <= end.start_sample <= first  # (with its pre-roll)
        assert abs(end.speech_end_sample - last) < end_within_s * SAMPLE_RATE


@pytest.mark.parametrize("lead_s", [1.5, 5.0])
def test_other_people_talking_from_the_streams_first_moment_are_the_room_and_the_user_is_heard(lead_s):
    """A page that opens its microphone in a cafe: Silero hears a voice from the first chunk, and none of the quiet
    that follows a user's words. Taken for the user's, it held an utterance open to the 30 s cap, again and again;
    it is the room's, and each question is heard alone (the first once the room is clear, 4 s in)."""
    stream, spans = talk_in_babble(lead_s)
    seen = heard_live(stream)
    assert Heard.DROPPED in [kind for _, kind, _ in seen]  # the voice first taken for the user's, withdrawn
    assert_each_question_its_own_utterance(seen, spans)


def test_a_user_who_speaks_as_the_stream_starts_over_other_people_is_heard_and_each_question_ends_where_they_stop():
    """The room is learnt from the gaps between the user's words: its loud end only after the first question, which
    may end up to half a second late (with 2.5 s between the questions, as a user waiting for an answer leaves)."""
    stream, spans = talk_in_babble(0.2, between_s=2.5)
    assert_each_question_its_own_utterance(heard_live(stream), spans, end_within_s=0.6)


def test_a_stream_that_starts_with_a_long_question_is_the_users_from_its_first_word_to_its_last():
    """A client that sends audio only while its user speaks, and six seconds of speech with hardly a pause in it:
    its level falls between words as no room's does, so it stays the user's (judged again as a room's, it was cut
    into pieces)."""
    from scripts.eval.questions import LONG

    speech = np.asarray(spoken(" ".join(LONG[:3])))
    seen = heard_live(np.concatenate([speech, silence(1.5)]))
    kinds = [kind for _, kind, _ in seen]
    assert kinds.count(Heard.START) == 1 and Heard.DROPPED not in kinds, kinds
    (end,) = [u for _, kind, u in seen if kind is Heard.END]
    first, last = truth(speech, 0)
    assert end.start_sample <= first and abs(end.speech_end_sample - last) < 0.3 * SAMPLE_RATE


def scripted_stream(script: str, pre_roll_ms: int = 0) -> tuple[VadSegmenter, object]:
    """A segmenter whose Silero is scripted by `script` ("#", "-" voiced; "." silent) and a feeder of such chunks on
    the arrival clock (a gap in the clock is a gap in what the client sent)."""
    seg = VadSegmenter(ScriptedVad([0.9 if c in "#-" else 0.0 for c in script]), 0.5, 0.35, end_silence_ms=500,
                       pre_roll_ms=pre_roll_ms, min_utterance_ms=250, max_utterance_s=30, onset_ms=64)
    clock = [100.0]

    def feed(chunks: str, after_s: float = 0.0) -> list[Heard]:
        clock[0] += after_s
        kinds = []
        for c in chunks:
            clock[0] += CHUNK / SAMPLE_RATE
            kinds += [e.kind for e in seg.feed(SCRIPTED_AUDIO[c], clock[0])]
        return kinds

    return seg, feed


@pytest.mark.fast
def test_audio_back_after_a_long_gap_ends_the_speech_it_cut_off_which_stays_the_users():
    """The client stopped sending mid-utterance and came back 3.5 s later (the stream starts afresh): the speech cut
    off is over, and when the new stream's first voice turns out to be the room's, only that is withdrawn."""
    seg, feed = scripted_stream("." * 32 + "#" * 20 + "#" * 200)
    feed("." * 32)
    speech = feed("#" * 20)
    assert speech[0] is Heard.START and Heard.END not in speech
    back = feed("#" * 200, after_s=3.5)  # a voice whose level never falls: the room's
    assert back[0] is Heard.END  # the speech the gap cut off, ended where its audio did
    assert back.count(Heard.END) == 1 and back.count(Heard.DROPPED) == 1  # ...and the room's voice withdrawn
    assert back.index(Heard.DROPPED) > back.index(Heard.END)


@pytest.mark.fast
def test_a_clients_own_settings_made_while_a_streams_start_is_unclear_stay_when_it_is_judged_again():
    seg, feed = scripted_stream("#" * 200, pre_roll_ms=96)
    feed("#" * 10)
    seg.tune(0.5, 500, 288)  # a Realtime session.update: 9 chunks of pre-roll
    assert Heard.DROPPED in feed("#" * 190)  # 4 s of a voice whose level never falls: judged again
    assert seg.pre_roll_chunks == 9


@pytest.mark.parametrize("after_s", [0.0, 0.15, 0.3, 0.6])
def test_a_user_as_loud_as_the_reply_interrupts_its_first_moments_on_a_call_that_cancels_its_own_echo(after_s):
    """A call guarded against its speaker's echo whose client cancels it itself: the microphone stays quiet while
    the reply plays, and the user says "Wait, stop please." as loud as the reply, `after_s` into it, before the echo's
    coupling is known. Their words are kept: confirmed (a barge-in), or paused after (then the words decide:
    "Wait," is a stop command), never dropped as a cough."""
    from vita.hearing.voice_gate import EchoReference

    config = Config()
    seg = VadSegmenter.from_config(config.vad, config.vad_model_path(), config.turn)
    seg.gate.echo = EchoReference()
    quiet = np.random.default_rng(3).normal(0, 3, 2 * SAMPLE_RATE).astype(np.int16)  # a decoded call's silence
    t0 = 100.0
    for i in range(0, quiet.size, 320):  # 20 ms frames, as a call's arrive
        seg.feed(quiet[i:i + 320], t0 + (i + 320) / SAMPLE_RATE)
    reply = np.asarray(spoken("Once upon a time, a dragon lived in a cave high in the mountains."))
    played_at = t0 + quiet.size / SAMPLE_RATE
    seg.gate.echo.play(reply.astype("<i2").tobytes(), SAMPLE_RATE, played_at)
    seg.guarded = True
    user = np.asarray(spoken("Wait, stop please."))
    mic = np.concatenate([quiet[:int(after_s * SAMPLE_RATE)], user, quiet[:SAMPLE_RATE]])
    kinds = []
    for i in range(0, mic.size, 320):
        kinds += [e.kind for e in seg.feed(mic[i:i + 320], played_at + (i + 320) / SAMPLE_RATE)]
    assert kinds[0] is Heard.START and kinds[1] in (Heard.CONFIRM, Heard.PAUSE), kinds
    assert Heard.DROPPED not in kinds


def opened_at(lead_in_db: float, reply_over: int = 0) -> tuple[int, int]:
    """Other people talk 6 s (Silero: speech throughout, ±2 dB around one level), then the user: 0.5 s at
    `lead_in_db` over the room, then at 14 dB over it (`reply_over`: the assistant's reply plays until that many
    chunks into the lead-in). Returns (the utterance's first chunk, the chunk its louder part began), in chunks of
    the stream."""
    rng = np.random.default_rng(7)
    room = [float(rng.uniform(-2, 2)) for _ in range(190)]
    script = room + [lead_in_db] * 16 + [14.0] * 30 + [-40.0] * 60
    seg = VadSegmenter(ScriptedVad([0.9 if db > -40 else 0.0 for db in script]), 0.5, 0.35, end_silence_ms=700,
                       pre_roll_ms=300, min_utterance_ms=250, max_utterance_s=30)
    ends = []
    for i, db in enumerate(script):
        seg.guarded = bool(reply_over) and len(room) - 10 <= i < len(room) + reply_over
        chunk = (TONE / 8 * 10 ** (db / 20)).astype(np.int16)
        ends += [e.utterance for e in seg.feed(chunk) if e.kind is Heard.END]
    (utterance,) = ends
    return utterance.start_sample // CHUNK, len(room) + 16


@pytest.mark.fast
def test_speech_opened_over_a_talking_room_begins_where_the_users_voice_rose_over_it():
    """The room's voices hold speech back until the user stands well over them (12 dB over the room's floor), a word
    into the sentence; the voiced chunks just before that already over the bar for going on (6 dB) are the
    sentence's start."""
    first, louder = opened_at(7.0)
    assert first <= louder - 16 - 5  # the whole 0.5 s lead-in, and some pre-roll before it
    first, louder = opened_at(-40.0 + 1)  # (nothing over the room before: the fixed pre-roll only)
    assert louder - 10 <= first <= louder - 9
    first, louder = opened_at(7.0, reply_over=6)  # the reply played into it: the lead-in stops where it did
    assert first == louder - 16 + 6


@pytest.mark.fast
def test_a_word_after_an_end_at_the_pause_is_kept_as_the_user_going_on_and_a_later_one_is_not():
    """The end-of-turn model ended "What color is" at its pause; "grass?" (160 ms voiced in a talking room: under
    min_utterance_ms) opens before that pause would have ended the speech, and is kept to go on with the request,
    from where the request was ended. The same word after the pause's whole length is a burst of its own, dropped."""
    for gap, kept in ((4, True), (20, False)):
        script = "." * 32 + "#" * 20 + "." * 4 + "." * gap + "#" * 5 + "." * 20
        seg, feed = scripted_stream(script)
        feed("." * 32)
        assert Heard.END not in feed("#" * 20 + "." * 4)  # a pause of 128 ms: the speech goes on (500 ms ends it)
        (ended,) = seg.end_now(at_pause=True)
        assert ended.kind is Heard.END
        events = []
        for c in "." * gap + "#" * 5 + "." * 20:
            events += seg.feed(SCRIPTED_AUDIO[c])
        assert events[0].kind is Heard.START
        assert events[-1].kind is (Heard.END if kept else Heard.DROPPED), events
        if kept:  # (the silence since the end, then the word: the stream once, as the request left open holds it)
            assert events[-1].utterance.start_sample == ended.utterance.end_sample


@pytest.mark.fast
def test_among_other_voices_their_syllables_after_an_end_at_the_pause_do_not_go_on_with_it_and_the_user_does():
    """People talking 10 dB under the voice ("-", the user): a pair of their loud syllables over the bar for going on
    but under the one for starting ("B") and a louder one ("C") after the question was ended at its pause re-opened it
    as going on (the turn withdrawn and answered seconds later); the user going on still does."""
    room = "bv" * 32
    for then, goes_on in (("BBC", False), ("-" * 5, True)):
        script = room + "-" * 20 + "bv" * 6 + then + "bv" * 10
        seg = VadSegmenter(ScriptedVad([0.9 if c in "-bBCv" else 0.0 for c in script]), 0.5, 0.35,
                           end_silence_ms=1500, pre_roll_ms=0, min_utterance_ms=250, max_utterance_s=30,
                           onset_ms=64, pause_ms=128)
        for c in room:
            seg.feed(SCRIPTED_AUDIO[c])
        assert seg.gate.voices
        heard = [e.kind for c in "-" * 20 + "bv" * 6 for e in seg.feed(SCRIPTED_AUDIO[c])]
        assert Heard.PAUSE in heard
        seg.end_now(at_pause=True)
        heard = [e.kind for c in then + "bv" * 10 for e in seg.feed(SCRIPTED_AUDIO[c])]
        assert (Heard.START in heard) is goes_on, heard
        assert seg.going_on is goes_on


@pytest.mark.fast
def test_speech_carried_into_the_next_holds_the_audio_they_share_once():
    """The next part begins where the carried part ended (its pre-roll holds only what came after that end): the
    request holds the stream it covers once, with no audio twice and no gap."""
    seg, _ = scripted_stream("." * 32 + "#" * 20 + "." * 4 + "#" * 20 + "." * 20, pre_roll_ms=288)
    events = []
    for c in "." * 32 + "#" * 20 + "." * 4:
        events += seg.feed(SCRIPTED_AUDIO[c])
    (first,) = seg.end_now()
    seg.carry(first.utterance)
    for c in "#" * 20 + "." * 20:
        events += seg.feed(SCRIPTED_AUDIO[c])
    (end,) = [e for e in events if e.kind is Heard.END]
    covered = end.utterance.end_sample - end.utterance.start_sample
    assert len(end.utterance.pcm) // 2 == covered


@pytest.mark.fast
def test_only_an_end_at_a_pause_lets_a_short_word_after_it_go_on():
    """Audio that stopped coming, or a client's own commit, ends the speech with no pause in it to go on from: a
    160 ms burst after such an end is a burst of its own; so is one after the stream starts afresh."""
    for at_pause, after_s, kept in ((False, 0.0, False), (True, 3.5, False), (True, 0.0, True)):
        seg, feed = scripted_stream("." * 32 + "#" * 20 + "." * 4 + "." * 4 + "#" * 5 + "." * 20)
        feed("." * 32 + "#" * 20 + "." * 4)
        (ended,) = seg.end_now(at_pause)
        assert ended.kind is Heard.END
        after = feed("." * 4 + "#" * 5 + "." * 20, after_s=after_s)
        assert after[-1] is (Heard.END if kept else Heard.DROPPED), (at_pause, after_s, after)


@pytest.mark.fast
def test_a_burst_as_the_reply_starts_after_an_end_at_the_pause_goes_on_only_from_a_client_that_cancels_its_echo():
    """The reply starts at once (a speculative turn's, held for the end): the user's last word over its first
    moments still goes on with the request, unless the client sends its speaker's echo back (then the burst may be
    that echo, and the turn machine lets nothing over the reply go on there)."""
    from vita.hearing.voice_gate import EchoReference

    for echo, kept in ((None, True), (EchoReference(), False)):
        seg, feed = scripted_stream("." * 32 + "#" * 20 + "." * 4 + "." * 4 + "#" * 5 + "." * 20)
        feed("." * 32 + "#" * 20 + "." * 4)
        (ended,) = seg.end_now(at_pause=True)
        seg.gate.echo = echo
        seg.guarded = True  # the reply plays
        assert feed("." * 4 + "#" * 5 + "." * 20)[-1] is (Heard.END if kept else Heard.DROPPED), echo


@pytest.mark.fast
def test_a_soft_last_word_after_an_end_at_the_pause_goes_on_under_the_bar_for_starting_speech():
    """"...does water | freeze?": Silero gives the soft word 0.4, under the 0.5 that starts speech but over the 0.35
    that keeps it going. Ended at the pause, it goes on as it would have with the request left open; a word as soft
    with nothing ended before it starts nothing."""
    for end_first, kept in ((True, True), (False, False)):
        script = "." * 32 + "#" * 20 + "." * 4 + "." * 40 * (not end_first) + "~" * 3 + "." * 20
        seg = VadSegmenter(ScriptedVad([{".": 0.0, "#": 0.9, "~": 0.4}[c] for c in script]), 0.5, 0.35,
                           end_silence_ms=500, pre_roll_ms=0, min_utterance_ms=250, max_utterance_s=30, onset_ms=64)
        opening = 32 + 20 + 4 + 40 * (not end_first)  # (without the end, the request ends by its silence first)
        for c in script[:opening]:
            seg.feed(SCRIPTED_AUDIO[c])
        if end_first:
            (ended,) = seg.end_now(at_pause=True)
        heard = []
        for c in script[opening:]:
            heard += [e.kind for e in seg.feed(SCRIPTED_AUDIO["#" if c == "~" else c])]
        assert (Heard.END in heard) is kept, heard

