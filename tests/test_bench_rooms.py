"""The room benchmark builds the rooms it claims: beds at the level asked for under the user's voice, a room
impulse response that dies away in its RT60, and a speaker whose echo comes back when, and as loud as, it says."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from scripts.bench.rooms import sounds as rooms

pytestmark = pytest.mark.fast


def test_a_bed_is_mixed_the_asked_decibels_under_the_voice():
    for db in (5, 10, 20):
        bed = rooms.under_user(rooms.steady_noise(4.0), db)
        assert abs(rooms.level_db(bed) - (rooms.USER_DB - db)) < 0.5
    tv = rooms.under_user(rooms.music(4.0), 10)
    assert abs(rooms.level_db(tv) - (rooms.USER_DB - 10)) < 0.5
    voice = rooms.at_level(np.random.default_rng(0).normal(0, 2000, 16000), rooms.USER_DB)
    assert voice.dtype == np.int16 and abs(rooms.level_db(voice) - rooms.USER_DB) < 0.3


def test_the_steady_noise_is_mostly_low_frequencies():
    x = rooms.steady_noise(4.0)
    power = np.abs(np.fft.rfft(x)) ** 2
    f = np.fft.rfftfreq(len(x), 1 / rooms.RATE)
    assert power[f < 1000].sum() > 5 * power[f > 2000].sum()


def test_the_impulse_response_dies_away_in_its_rt60():
    h = rooms.room_impulse_response(0.3)
    assert len(h) == int(0.3 * rooms.RATE) and abs(float(np.sum(h ** 2)) - 1) < 1e-4
    assert np.argmax(np.abs(h)) == 0  # the direct path first
    tenth = len(h) // 10
    first, last = np.sum(h[1:tenth] ** 2), np.sum(h[-tenth:] ** 2)
    assert 40 < 10 * np.log10(first / last) < 70  # ~54 dB between the first and last tenth of a 60 dB decay


def test_the_speaker_echo_comes_back_delayed_at_its_level_and_stops_with_the_reply():
    rate, t0 = rooms.RATE, 100.0
    # one second of reply (noise: a room passes its energy through, a pure tone's it may not)
    tone = np.random.default_rng(3).normal(0, 3000, rooms.REPLY_RATE).astype(np.int16)
    reply_db = rooms.level_db(soxr.resample(tone, rooms.REPLY_RATE, rate))  # what it holds below 8 kHz
    for delay in (0.05, 0.25):
        speaker = rooms.Speaker(t0, rooms.speaker_gain(reply_db), rooms.room_impulse_response(), delay)
        speaker.play(tone.tobytes(), t0 + 1.0)  # one second of reply, arriving 1 s into the microphone's clock
        speaker.play(tone.tobytes(), t0 + 1.2)  # queued behind it: sounds from 2.0 s
        heard = np.concatenate([speaker.echo(a, a + 128) for a in range(0, 4 * rate, 128)])
        loud = np.flatnonzero(np.abs(heard) > 50)
        assert abs(loud[0] / rate - (1.0 + delay)) < 0.005
        assert 3.0 + delay < loud[-1] / rate <= 3.0 + delay + 0.3  # two seconds of reply and the room's tail
        steady = heard[int((1.4 + delay) * rate):int((2.9 + delay) * rate)]  # past the room's build-up and tail
        assert abs(rooms.level_db(steady) - (rooms.USER_DB - rooms.ECHO_DB)) < 1.0
    speaker = rooms.Speaker(t0, 1.0, rooms.room_impulse_response(), 0.1)
    speaker.play(tone.tobytes(), t0 + 1.0)
    speaker.stop(t0 + 1.5)  # stop_tts half-way: the rest never sounds
    heard = np.concatenate([speaker.echo(a, a + 128) for a in range(0, 3 * rate, 128)])
    loud = np.flatnonzero(np.abs(heard) > 50)
    assert 1.5 + 0.1 < loud[-1] / rate <= 1.5 + 0.1 + 0.3
    assert not speaker.playing(t0 + 2.0)


def test_echo_delays_vary_within_50_to_250_ms():
    delays = {rooms.echo_delay(i) for i in range(10)}
    assert len(delays) >= 4 and min(delays) == 0.05 and max(delays) == 0.25


def test_a_turn_that_began_over_the_reply_without_the_users_words_is_a_reply_nobody_asked_for():
    """The reply's echo heard as a turn of its own soon after the question is not the user's, even when it repeats
    the question's words; a turn withdrawn because the user went on, and the whole question's after it, are."""
    from scripts.bench.rooms.__main__ import Asked, score
    from scripts.bench.rooms.doors import Turn

    question = {"id": "capital-japan", "q": "What is the capital of Japan?", "accept": ["tokyo"]}
    asked = Asked("question", question["q"], "hibari", onset=10.0, end=11.5, qid="capital-japan")
    answer = Turn("1", 11.8, "What is the capital of Japan?", "The capital of Japan is Tokyo.", first_audio=12.6,
                  end=15.0)
    echo = Turn("2", 14.6, "The capital of Japan is still there.", "Yes, it is.", first_audio=15.4, end=16.0)
    unasked = score([asked], [answer, echo], [], {"capital-japan": question})
    assert [t["key"] for t in unasked] == ["2"]
    assert asked.right and asked.answer["key"] == "1" and asked.v2v_s == pytest.approx(1.1)
    # a reply withdrawn because the user went on, then the whole question's: both theirs
    withdrawn = Turn("1", 11.8, "What is the", "The", first_audio=12.4, end=12.6, reason="extended")
    whole = Turn("3", 12.9, "What is the capital of Japan?", "Tokyo.", first_audio=13.8, end=15.0)
    assert score([asked], [withdrawn, whole], [], {"capital-japan": question}) == []
    assert asked.answer["key"] == "3"
    # the answer's words missed by Whisper, its echo holding the question's: the echo is still not the answer
    missed = Turn("1", 11.8, "What is the capital of Jap?", "Tokyo.", first_audio=12.6, end=15.0)
    assert [t["key"] for t in score([asked], [missed, echo], [], {"capital-japan": question})] == ["2"]
    assert asked.answer["key"] == "1"
    # a request of theirs answered at once ("Sorry...") while they went on: what they went on with is theirs
    sorry = Turn("7", 12.0, "We are stop.", "Sorry, I didn't catch that.", first_audio=12.3, end=12.5)
    on = Turn("8", 11.9 + 0.36, "What do you know, says new?", "Sorry, I didn't catch that.", first_audio=13.5)
    assert score([asked], [sorry, on], [], {"capital-japan": question}) == []
    # a long request's reply withdrawn because it went on, then the whole request's: both its own
    request = Asked("request", "Tell me three things about Mars.", "piper", onset=20.0, end=22.0)
    early = Turn("5", 21.0, "Tell me three", "Three", first_audio=21.5, end=21.7, reason="extended")
    late = Turn("6", 22.3, "Tell me three things about Mars.", "Mars is red.", first_audio=23.0, end=30.0)
    barge = Asked("barge", "Wait, stop. What is the capital of Japan?", "piper", qid="capital-japan")  # not said
    assert score([request, barge], [early, late], [], {"capital-japan": question}) == []
    # the question answered, then heard again in the echo of that answer: a second reply nobody asked for
    again = Turn("4", 14.5, "What is the capital of Japan?", "Tokyo.", first_audio=15.4, end=16.5)
    assert [t["key"] for t in score([asked], [answer, again], [], {"capital-japan": question})] == ["4"]


def test_the_asr_benchmark_puts_a_voice_in_a_room_at_the_rooms_levels():
    from scripts.bench.stages.asr import in_room

    voice = np.concatenate([np.zeros(3200), np.random.default_rng(1).normal(0, 300, 32000), np.zeros(4800)])
    mixed = in_room(voice, "noise10", np.random.default_rng(0))
    alone = in_room(voice, "quiet", np.random.default_rng(0))
    assert abs(rooms.level_db(alone) - rooms.USER_DB) < 0.3  # the voice at the user's level
    assert abs(rooms.level_db(mixed - alone) - (rooms.USER_DB - 10)) < 0.5  # the fan 10 dB under it
    assert np.abs(mixed[:3200]).max() > 0  # the room is heard before the voice too


def test_an_interruption_answered_after_its_stop_command_is_answered():
    """"Wait, stop." heard as a turn of its own (no reply), or misheard and asked again, then the question in a turn of
    its own that is answered: the question was answered, by that turn."""
    from scripts.bench.rooms.__main__ import Asked, score
    from scripts.bench.rooms.doors import Turn

    who = {"id": "who", "q": "Who are you?", "accept": ["assistant"]}  # no key word: any transcript "heard" it
    barge = Asked("barge", "Wait, stop. Who are you?", "hibari", onset=10.0, end=12.0, qid="who")
    stop = Turn("1", 11.0, "Wait, stop.", "", reason="stop command")
    answer = Turn("2", 12.5, "Who are you?", "I am a voice assistant.", first_audio=13.4, end=15.0)
    assert score([barge], [stop, answer], [10.6], {"who": who}) == []
    assert barge.right and barge.answer["key"] == "2" and barge.v2v_s == pytest.approx(1.4)

    hands = {"id": "hands", "q": "How should I wash my hands?", "accept": ["soap"]}
    barge = Asked("barge", "Wait, stop. How should I wash my hands?", "hibari", onset=10.0, end=12.5, qid="hands")
    misheard = Turn("1", 11.0, "Wave stop.", "Sorry, I didn't catch that. Could you say it again?", first_audio=11.3,
                    end=12.0, reason="barge-in")
    answer = Turn("2", 12.9, "How should I wash my hands?", "Use soap and warm water.", first_audio=13.8, end=16.0)
    assert score([barge], [misheard, answer], [10.6], {"hands": hands}) == []
    assert barge.right and barge.answer["key"] == "2"
    # both: a question no transcript can miss, its stop command misheard and asked again, then answered
    barge = Asked("barge", "Wait, stop. Who are you?", "hibari", onset=10.0, end=12.0, qid="who")
    answer = Turn("2", 12.5, "Who are you?", "I am a voice assistant.", first_audio=13.4, end=15.0)
    assert score([barge], [misheard, answer], [10.6], {"who": who}) == []
    assert barge.right and barge.answer["key"] == "2"


@pytest.mark.parametrize(("question", "reply", "right"), [
    ("Is water wet?", "Water is wet.", True),
    ("Is a whale a mammal?", "A whale is a mammal.", True),
    ("Do chickens lay eggs?", "Yes, they do.", True),
    ("Is a whale a mammal?", "A whale is not a mammal.", False),
    ("Is the Earth round?", "The Earth isn't round.", False),
    ("Is water wet?", "Water is a liquid.", False),
    ("Is a bat a bird?", "A bat is a bird.", False),  # a "no" question's answer is never an affirmation
    ("Is a tomato a fruit?", "A tomato is a fruit, botanically speaking.", True),
    ("Is a whale a mammal?", "A whale is a fish rather than a mammal.", False),
    ("Is the sun a star?", "The sun is a planet that orbits a star.", False),
    ("Is a tomato a fruit?", "A tomato is a vegetable, unlike a fruit.", False),
    ("Is a penguin a bird?", "A penguin cannot be a bird.", False),
    ("Is water wet?", "You asked whether water is wet?", False),
])
def test_a_yes_said_as_the_answer_is_right_and_a_negated_or_partial_one_is_not(question, reply, right):
    from scripts.eval.questions import load_questions
    from scripts.eval.scoring import is_right

    (q,) = [q for q in load_questions("all") if q["q"] == question]
    assert is_right(q, reply) is right
