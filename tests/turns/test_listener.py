"""The session's ears with the real Silero model: resampling, events in the order they happened, reset."""

from __future__ import annotations

import numpy as np
import pytest

from tests.harness.speech import babble, noise, silence, spoken, under
from vita.config import Config
from vita.hearing.vad import VadSegmenter
from vita.turns.listener import SpeechListener
from vita.turns.turn_events import SpeechConfirmed, SpeechDropped, SpeechPaused, SpeechStarted, UtteranceEnded


def listener() -> SpeechListener:
    config = Config()
    return SpeechListener(VadSegmenter.from_config(config.vad, config.vad_model_path(), config.turn))


def hear_all(target: SpeechListener, audio: np.ndarray, rate: int, step: int, arrived: float = 100.0) -> list:
    events = []
    for i in range(0, len(audio), step):
        events += target.hear(audio[i:i + step], rate, arrived + i / rate, now=arrived + i / rate)
    return events


def test_a_short_burst_in_one_message_is_started_then_dropped_in_that_order():
    """One message holding a cough's whole life: the machine must see its start before its drop (the other way
    round it would think the user started speaking and never stopped)."""
    burst = spoken("Please tell me a joke about cats.")[3200:5600]  # 150 ms out of the middle of a word
    audio = np.concatenate([silence(0.5), burst, silence(2.0)])
    events = listener().hear(audio, 16000, arrived=10.0, now=10.0)
    assert [type(e) for e in events] == [SpeechStarted, SpeechDropped]


@pytest.mark.parametrize("rate", [16000, 48000, 44100])
def test_speech_at_any_rate_becomes_one_utterance(rate):
    speech = spoken("What is the capital of France?", rate)
    events = hear_all(listener(), np.concatenate([silence(1.0, rate), speech, silence(2.0, rate)]), rate, rate // 50)
    ended = [e for e in events if isinstance(e, UtteranceEnded)]
    assert sum(isinstance(e, SpeechStarted) for e in events) == 1 and len(ended) == 1
    heard = ended[0].speech
    assert abs(heard.details["start_s"] - 1.0) < 0.4
    # 16 kHz audio of the speech (and the silence that ended it) is handed on, whatever the input rate was.
    voiced = heard.details["speech_end_s"] - heard.details["start_s"]
    assert abs(voiced - len(speech) / rate) < 0.6
    assert abs(len(heard.pcm) / 2 / 16000 - heard.details["audio_s"]) < 0.01
    # On the arrival clock (the stream started arriving at 100.0): spoken from about 1 s in, for about its length.
    assert abs(heard.started_at - 101.0) < 0.4 and heard.started_at < heard.ended_at
    assert abs((heard.ended_at - heard.started_at) - len(speech) / rate) < 0.6


def test_reset_forgets_half_heard_speech():
    target = listener()
    speech = spoken("Please tell me a joke about cats.")
    before = hear_all(target, np.concatenate([silence(0.5), speech[: len(speech) // 2]]), 16000, 512)
    assert any(isinstance(e, SpeechStarted) for e in before)
    target.reset()
    after = hear_all(target, silence(2.0), 16000, 512)
    assert not any(isinstance(e, UtteranceEnded) for e in after)


def test_the_end_of_turn_model_can_end_the_utterance_at_a_pause():
    """At the pause (speculative_pause_ms) the owner may end the utterance: it is the speech so far, at once,
    instead of after the long silence the listener would otherwise wait for."""
    target = listener()
    speech = spoken("What is the capital of France?")
    events = hear_all(target, np.concatenate([silence(0.5), speech, silence(0.3)]), 16000, 512)
    assert any(isinstance(e, SpeechPaused) for e in events) and not any(isinstance(e, UtteranceEnded) for e in events)
    (ended,) = target.end_now(now=5.0)
    assert isinstance(ended, UtteranceEnded) and ended.now == 5.0
    assert abs(ended.speech.details["speech_end_s"] - ended.speech.details["start_s"] - len(speech) / 16000) < 0.6
    assert target.end_now(now=5.1) == []  # nothing is being heard any more


def test_a_carried_request_begins_the_next_utterance():
    target = listener()
    first = spoken("My name is Anna.")
    (ended,) = [e for e in hear_all(target, np.concatenate([silence(0.5), first, silence(2.0)]), 16000, 512)
                if isinstance(e, UtteranceEnded)]
    target.carry(ended.speech)  # the user went on before the reply was heard
    second = spoken("Please remember it.")
    later = hear_all(target, np.concatenate([second, silence(2.0)]), 16000, 512, arrived=200.0)
    (joined,) = [e for e in later if isinstance(e, UtteranceEnded)]
    assert joined.speech.pcm.startswith(ended.speech.pcm)
    assert joined.speech.details["start_s"] == ended.speech.details["start_s"]
    assert len(joined.speech.pcm) > len(ended.speech.pcm) + len(second)  # both parts, one utterance
    target.carry(None)
    again = hear_all(target, np.concatenate([second, silence(2.0)]), 16000, 512, arrived=300.0)
    (alone,) = [e for e in again if isinstance(e, UtteranceEnded)]
    assert alone.speech.details["start_s"] > joined.speech.details["end_s"]  # its own start: nothing carried
    assert len(alone.speech.pcm) < len(joined.speech.pcm) - len(ended.speech.pcm) // 2


def test_an_interruption_over_a_phone_line_is_confirmed_across_the_fricative_its_band_lost():
    """"Wait, [s]top." with the "s" gone (a 0.4 s gap): on a 16 kHz line the span starts again after it; on an
    8 kHz phone line the gap is within the span, which confirms the speech as it would with the "s"."""
    from tests.hearing.test_vad import ScriptedVad
    from vita.turns.listener import PHONE_RATE
    from vita.turns.turn_events import SpeechConfirmed

    def confirmed(rate: int) -> int | None:
        script = "." * 40 + "#" * 8 + "." * 12 + "#" * 12 + "." * 40  # 256 ms, a 384 ms gap, 384 ms more
        config = Config()
        segmenter = VadSegmenter(ScriptedVad([0.9 if c == "#" else 0.0 for c in script]), 0.5, 0.35, 1500, 0,
                                 250, 30, 64, 128, config.turn.barge_in_confirm_ms, 0.0,
                                 config.turn.barge_in_span_ms)
        ears = SpeechListener(segmenter)
        tone = (8000 * np.sin(np.arange(rate // 50) / 5 * 16000 / rate)).astype(np.int16)
        chunk_s = 512 / 16000
        at = 100.0
        for i, c in enumerate(script):
            pcm = tone if c == "#" else np.zeros(rate // 50, np.int16)
            events = ears.hear(np.resize(pcm, round(rate * chunk_s)), rate, at, at)  # (32 ms a message)
            at += chunk_s
            if any(isinstance(e, SpeechConfirmed) for e in events):
                return i
        return None

    assert confirmed(16000) is None  # (the span starts again after the gap; 650 ms voiced never comes)
    assert confirmed(PHONE_RATE) is not None


def test_a_client_that_changes_its_format_gets_the_span_of_its_line():
    """A Realtime client may go from 8 kHz G.711 to 16 or 24 kHz PCM in one session: the phone line's longer span
    goes with the 8 kHz audio."""
    from vita.hearing.vad import MASKED_SPAN_MAX_GAP_CHUNKS, SPAN_MAX_GAP_CHUNKS

    ears = listener()
    phone, wide = MASKED_SPAN_MAX_GAP_CHUNKS, SPAN_MAX_GAP_CHUNKS
    for rate, gap in ((8000, phone), (24000, wide), (8000, phone), (16000, wide)):
        ears.hear(np.zeros(rate // 50, np.int16), rate, 100.0, 100.0)
        assert ears.segmenter.span_max_gap_chunks == gap, rate


@pytest.mark.parametrize(("under_db", "loud"), [(0, True), (6, True), (10, False)])
def test_speech_confirmed_over_the_reply_says_whether_it_was_at_the_users_own_level(under_db, loud):
    """While the reply plays, the user's interruption is as loud as their question was, or a little softer; a
    speaker's echo 10 dB under it is not (a client whose echo comes back holds the reply for the words of such speech
    only)."""
    heard = listener()
    question = np.concatenate([silence(0.5), spoken("What is the capital of France?"), silence(1.5)])
    hear_all(heard, question, 16000, 512)
    heard.segmenter.guarded = True
    over = spoken("Paris is the capital and the largest city of France, on the river Seine.")
    over = (over.astype(np.float32) * 10 ** (-under_db / 20)).astype(np.int16)
    later = 100.0 + len(question) / 16000  # (the stream goes on: a gap would start it afresh, its room unknown)
    confirmed = [e for e in hear_all(heard, np.concatenate([over, silence(1.0)]), 16000, 512, arrived=later)
                 if isinstance(e, SpeechConfirmed)]
    assert len(confirmed) == 1 and confirmed[0].loud is loud
    assert confirmed[0].speech is not None and len(confirmed[0].speech.pcm) > 0.5 * 32000  # (what is checked)


@pytest.mark.parametrize("people_db", [None, 20])
def test_the_end_of_speech_says_whether_other_people_talk_in_the_room(people_db):
    """Among other people talking, speech going on with a request whose reply has begun must come at the request's
    level (TurnTaking): the listener says when the room is such a one."""
    heard = listener()
    question = spoken("What is the capital of France?")
    audio = np.concatenate([silence(2.0), question, silence(1.5)])
    if people_db is not None:
        people = under(babble(len(audio) / 16000), question, people_db)
        audio = np.clip(audio.astype(np.int32) + people, -32768, 32767).astype(np.int16)
    events = hear_all(heard, audio, 16000, 512)
    ended = [e for e in events if isinstance(e, UtteranceEnded)]
    assert len(ended) == 1 and ended[0].room_talks is (people_db is not None)
    assert len(ended[0].speech.pcm) // 2 >= 0.8 * len(question)  # (the question, whole)
    confirmed = [e for e in events if isinstance(e, SpeechConfirmed)]  # (the question's last: a stream that opens
    assert confirmed and confirmed[-1].room_talks is (people_db is not None)  # on voices takes them for the user's)


def test_what_a_clients_echo_canceller_leaves_of_a_long_reply_is_not_other_people_talking():
    """In a quiet room the reply's leftover echo, 30 dB under it, is voiced: counted as the room's, it passed for
    other people talking, and a soft "Yes." after a reply that asked something would have been dropped as theirs."""
    heard = listener()
    floor = noise(60.0, level=30.0)  # (a quiet room's microphone: about -61 dBFS)
    question = np.concatenate([silence(1.0), spoken("What is the capital of France?"), silence(1.5)])
    hear_all(heard, question + floor[:question.size], 16000, 512)
    heard.segmenter.guarded = True  # the reply plays, and what the client's canceller leaves of it comes back
    reply = spoken("The capital of France is Paris. It is a large city on the river Seine, famous for its museums "
                   "and the Eiffel tower. Would you like to know more?")
    leftover = (reply.astype(np.float32) * 10 ** (-30 / 20)).astype(np.int16) + floor[question.size:][:reply.size]
    later = 100.0 + question.size / 16000
    hear_all(heard, leftover, 16000, 512, arrived=later)
    assert heard.segmenter.gate.voices  # (what made it pass for them)
    heard.segmenter.guarded = False
    yes = np.concatenate([(spoken("Yes.").astype(np.float32) * 10 ** (-10 / 20)).astype(np.int16), silence(1.5)])
    ended = [e for e in hear_all(heard, yes + floor[:yes.size], 16000, 512, arrived=later + reply.size / 16000)
             if isinstance(e, UtteranceEnded)]
    assert len(ended) == 1 and ended[0].room_talks is False
