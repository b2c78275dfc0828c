"""Whose voice a chunk is (vita/hearing/voice_gate.py), on levels alone: Silero's probability is scripted."""

from __future__ import annotations

import numpy as np
import pytest

from vita.hearing.voice_gate import (
    CHUNK,
    ECHO_MARGIN_DB,
    ECHO_PRIOR_DB,
    FLOOR_MIN_CHUNKS,
    FRESH_GAPS,
    FRESH_MAX_CHUNKS,
    HOLD_SAMPLES,
    MIN_LEVEL_CHUNKS,
    ROOM_MIN_CHUNKS,
    STEADY_HOLD_SAMPLES,
    STREAM_GAP_S,
    EchoReference,
    VoiceGate,
    quieter_by,
)

pytestmark = pytest.mark.fast
VOICED, SILENT, THRESHOLD = 0.9, 0.0, 0.35


class Stream:
    """A gate fed chunk after chunk: each with Silero's probability and a level (dBFS)."""

    def __init__(self, gate: VoiceGate | None = None):
        self.gate = gate or VoiceGate()
        self.position = 0

    def feed(self, p: float, level: float, within: bool = False, at: float | None = None,
             paused: bool = False, going_on: bool = False) -> float:
        out = self.gate.judge(p, level, self.position, within, THRESHOLD, at, paused, going_on)
        self.position += CHUNK
        return out

    def room(self, levels: list[float], p: float = VOICED) -> list[float]:
        return [self.feed(p, level) for level in levels]


def babble_levels(n: int, median: float, seed: int = 0) -> list[float]:
    """Other people talking: voiced all the time, their level wandering ±5 dB around `median`."""
    return list(median + np.random.default_rng(seed).uniform(-5, 5, n))


def test_nothing_is_the_users_before_the_room_is_known():
    s = Stream()
    assert [s.feed(VOICED, -20.0) for _ in range(FLOOR_MIN_CHUNKS - 1)] == [0.0] * (FLOOR_MIN_CHUNKS - 1)
    s = Stream()
    s.room([-90.0] * FLOOR_MIN_CHUNKS, p=SILENT)
    assert s.feed(VOICED, -20.0) == VOICED  # a quiet room: the first word of a session is the user's


def test_a_quiet_speaker_in_a_quiet_room_is_the_user_but_not_under_the_absolute_floor():
    s = Stream()
    s.room([-75.0] * ROOM_MIN_CHUNKS, p=SILENT)
    assert s.feed(VOICED, -50.0) == VOICED
    assert s.feed(VOICED, -62.0) == 0.0


def test_among_voices_speech_going_on_with_an_ended_question_opens_as_speech_opens():
    """Ended at a pause, a question may go on (the user adds to it); among other voices their loudest syllables, a
    pair of chunks over the bar for going on, re-opened it seconds after its end. Speech going on with it opens over
    the bar for starting; inside an open utterance, and right after the user's voice, the bar for going on stays."""
    s = Stream()
    s.room(babble_levels(4 * ROOM_MIN_CHUNKS, -40.0))
    loud = s.gate.room_loud_db
    s.feed(VOICED, loud + 12.0)  # the user's last word
    s.position += 2 * HOLD_SAMPLES  # (its end at a pause, well past the hold)
    syllables = [s.feed(VOICED, loud + 4.5, within=True, going_on=True) for _ in range(3)]
    assert syllables == [0.0] * 3  # the room's, not the question going on
    assert [s.feed(VOICED, loud + 4.5, within=True) for _ in range(2)] == [0.0, VOICED]  # (open: going on)
    s.position += 2 * HOLD_SAMPLES
    going_on = [s.feed(VOICED, loud + 7.0, within=True, going_on=True) for _ in range(2)]
    assert going_on == [0.0, VOICED]  # the user, going on (with the chunk after, as among voices after any gap)


def test_voices_far_under_the_room_floor_margin_never_start_speech_and_the_user_does():
    s = Stream()
    s.room(babble_levels(4 * ROOM_MIN_CHUNKS, -45.0))  # three people talking, Silero says speech throughout
    assert all(out == 0.0 for out in s.room(babble_levels(100, -45.0, seed=1)))
    assert s.feed(VOICED, -22.0) == VOICED  # the user, 20 dB over them


def test_once_the_users_level_is_known_speech_opens_only_near_it_but_goes_on_through_softer_syllables():
    s = Stream()
    s.room([-80.0] * ROOM_MIN_CHUNKS, p=SILENT)
    for _ in range(MIN_LEVEL_CHUNKS):
        s.feed(VOICED, -20.0, within=True)
    assert s.gate.level_db == pytest.approx(-20.0)
    s.room([-80.0] * 10, p=SILENT)
    assert s.feed(VOICED, -31.0) == 0.0  # 11 dB under the user: not an opening
    assert s.feed(VOICED, -24.0) == VOICED  # near their level: it opens
    assert s.feed(VOICED, -31.0, within=True) == VOICED  # inside their speech, 11 dB under: still theirs
    assert s.feed(VOICED, -40.0, within=True) == VOICED  # a soft syllable right after their voice (held)
    for _ in range(HOLD_SAMPLES // CHUNK):
        s.feed(VOICED, -40.0, within=True)
    assert s.feed(VOICED, -40.0, within=True) == 0.0  # ...but not for good: 20 dB under them, after the hold


def test_a_user_who_moved_away_is_heard_again_after_speaking_softer_for_a_while():
    s = Stream()
    s.room([-90.0] * ROOM_MIN_CHUNKS, p=SILENT)
    for _ in range(2 * MIN_LEVEL_CHUNKS):
        s.feed(VOICED, -15.0, within=True)
    s.room([-90.0] * 20, p=SILENT)
    assert s.feed(VOICED, -35.0) == 0.0  # 20 dB softer: not them, at first
    for _ in range(20):  # words and the gaps between them
        s.room([-35.0] * 10)
        s.room([-90.0] * 5, p=SILENT)
    assert s.feed(VOICED, -35.0) == VOICED


def test_the_hold_never_lets_a_talking_rooms_floor_through():
    s = Stream()
    s.room([-50.0] * 2 * ROOM_MIN_CHUNKS)  # other people talking at -50 dBFS: Silero calls it speech
    assert s.feed(VOICED, -30.0) == VOICED
    assert s.feed(VOICED, -47.0, within=True) == 0.0  # their syllables at the floor, within the hold: not the user's


def test_in_steady_noise_silero_tells_the_users_softer_syllables_from_it():
    """Noise 10 dB under the voice: the softer half of "Wait, stop." sits at its floor, Silero sure it is speech.
    Refused, the interruption waited for its next words to be confirmed (1.0-1.2 s instead of 0.7); Silero, which
    calls steady noise silence, is taken at its word inside the user's speech near their voice. Not to open it, not
    a lone chunk long after their voice, and not in a room Silero often calls speech."""
    s = Stream()
    s.room([-36.0] * 2 * ROOM_MIN_CHUNKS, p=SILENT)  # a fan
    assert s.gate.steady
    assert s.feed(VOICED, -35.5) == 0.0  # at the floor: no opening
    assert s.feed(VOICED, -22.0) == VOICED  # a loud syllable opens it
    for _ in range(HOLD_SAMPLES // CHUNK + 2):
        assert s.feed(VOICED, -35.5, within=True) == VOICED  # after the hold: still theirs
    assert s.feed(VOICED, -37.0, within=True) == 0.0  # under the floor: the fan
    for _ in range(STEADY_HOLD_SAMPLES // CHUNK):
        s.feed(SILENT, -36.0, within=True)
    assert s.feed(VOICED, -35.5, within=True) == 0.0  # a lone call of Silero's long after their voice: the fan
    some = Stream()
    some.room(([-36.0] * 4 + [-36.0]) * ROOM_MIN_CHUNKS, p=SILENT)
    some.room([-36.0] * ROOM_MIN_CHUNKS)  # ...and a voice now and then: a fifth of the room's chunks
    assert not some.gate.steady and not some.gate.voices
    assert some.feed(VOICED, -22.0) == VOICED
    for _ in range(HOLD_SAMPLES // CHUNK + 2):
        some.feed(SILENT, -36.0, within=True)
    assert some.feed(VOICED, -35.5, within=True) == 0.0


def test_in_steady_noise_10_db_under_the_voice_the_users_level_is_learnt_and_among_voices_only_far_over_them():
    """No chunk of a voice 10 dB over a fan stood 20 dB over its floor: the user's level went unlearnt, and with it
    what tells the user's voice over the reply (an interruption in a voice that pauses between words waited 0.5 s
    more than in quiet). In an audible room with no other voices, a voiced chunk 6 dB over its loud end is the user's;
    among other voices, and in a quiet room, the bar stays 20 dB over the floor (other voices' loudest syllables stand
    8-14 dB over it; a voice's faint tails in quiet held a robotic voice's interruptions back)."""
    fan = Stream()
    fan.room([-40.0] * 2 * ROOM_MIN_CHUNKS, p=SILENT)
    assert fan.gate.steady
    for _ in range(MIN_LEVEL_CHUNKS):
        fan.feed(VOICED, -27.0, within=True)
    assert fan.gate.level_db == pytest.approx(-27.0)
    voices = Stream()
    voices.room(babble_levels(2 * ROOM_MIN_CHUNKS, -40.0))
    assert voices.gate.voices
    assert voices.feed(VOICED, -27.0) == VOICED
    for _ in range(MIN_LEVEL_CHUNKS):
        assert voices.feed(VOICED, -27.0, within=True) == VOICED  # the user's...
    assert voices.gate.level_db is None  # ...but not clear enough of the room to learn their level from
    quiet = Stream()
    quiet.room([-75.0] * 2 * ROOM_MIN_CHUNKS, p=SILENT)  # a quiet room: a voice's faint tails teach nothing there
    assert quiet.gate.steady
    for _ in range(MIN_LEVEL_CHUNKS):
        assert quiet.feed(VOICED, -58.0, within=True) == VOICED
    assert quiet.gate.level_db is None


def test_in_steady_noise_a_pause_holds_against_silero_calling_the_fading_voice_speech():
    """As a voice fades into a fan, Silero still calls the fan's chunks speech for a while: after the pause the
    segmenter reported there (or an end at a pause), the user's voice comes back over the bar, not at the floor; the
    same chunk before the pause is a softer syllable of theirs."""
    s = Stream()
    s.room([-36.0] * 2 * ROOM_MIN_CHUNKS, p=SILENT)
    assert s.feed(VOICED, -22.0) == VOICED
    assert s.feed(VOICED, -35.5, within=True) == VOICED  # inside their speech: theirs
    assert s.feed(VOICED, -35.5, within=True, paused=True) == 0.0  # after a pause: the fan
    assert s.feed(VOICED, -27.0, within=True, paused=True) == VOICED  # their voice, back over the bar


def test_in_steady_noise_the_softer_syllables_stay_near_the_users_level_and_over_the_absolute_floor():
    s = Stream()
    s.room([-80.0] * 2 * ROOM_MIN_CHUNKS, p=SILENT)  # quiet: its floor under the absolute one
    assert s.gate.steady
    for _ in range(MIN_LEVEL_CHUNKS):
        s.feed(VOICED, -20.0, within=True)
    for _ in range(HOLD_SAMPLES // CHUNK + 1):
        s.feed(SILENT, -80.0, within=True)
    assert s.feed(VOICED, -34.0, within=True) == VOICED  # within 15 dB of them
    for _ in range(HOLD_SAMPLES // CHUNK + 1):
        s.feed(SILENT, -80.0, within=True)
    assert s.feed(VOICED, -40.0, within=True) == 0.0  # 20 dB under them: someone further off
    quiet = Stream()
    quiet.room([-80.0] * 2 * ROOM_MIN_CHUNKS, p=SILENT)
    assert quiet.feed(VOICED, -30.0) == VOICED  # (their level not yet known)
    for _ in range(HOLD_SAMPLES // CHUNK + 1):
        quiet.feed(SILENT, -80.0, within=True)
    assert quiet.feed(VOICED, -65.0, within=True) == 0.0  # never the user's under the absolute floor


def played(echo: EchoReference, level_db: float, seconds: float, at: float, rate: int = 24000) -> None:
    amplitude = 32768 * np.sqrt(2) * 10 ** (level_db / 20)
    tone = (amplitude * np.sin(np.arange(int(seconds * rate)) * 0.3)).astype("<i2")
    echo.play(tone.tobytes(), rate, at)


def test_what_was_played_explains_its_echo_and_the_user_stands_above_it():
    """A speakerphone: the reply at -20 dBFS comes back 0.12 s later at a third of its level (-29.5 dBFS); the
    user, louder than that echo, is heard over it."""
    echo = EchoReference()
    s = Stream(VoiceGate(echo=echo))
    s.room([-80.0] * ROOM_MIN_CHUNKS, p=SILENT)
    played(echo, -20.0, 3.0, at=100.0)
    times = 100.12 + np.arange(1, 60) * CHUNK / 16000
    assert [s.feed(VOICED, -29.5, at=t) for t in times[:30]] == [0.0] * 30  # the echo: not the user
    assert s.feed(VOICED, -29.5 + ECHO_MARGIN_DB + 3, at=times[30]) == VOICED  # learnt: echo + margin is them
    assert s.feed(VOICED, -29.5, at=103.0 + 0.12) == 0.0  # the echo's tail after the reply ended
    assert s.feed(VOICED, -29.5, at=104.0) == VOICED  # nothing played for a while: the same level is the user
    assert s.gate.level_db is None  # nothing was learnt as the user's while the reply could echo


def test_before_the_coupling_is_learnt_the_echo_is_taken_to_come_back_10_db_under_the_reply():
    """As a speakerphone's does; taken as loud as the reply, a call that cancels its own echo could not be
    interrupted."""
    echo = EchoReference()
    s = Stream(VoiceGate(echo=echo))
    s.room([-80.0] * ROOM_MIN_CHUNKS, p=SILENT)
    played(echo, -20.0, 1.0, at=10.0)
    assert s.feed(VOICED, -20.0 + ECHO_PRIOR_DB + ECHO_MARGIN_DB - 1, at=10.2) == 0.0
    assert s.feed(VOICED, -20.0 + ECHO_PRIOR_DB + ECHO_MARGIN_DB + 1, at=10.25) == VOICED


def test_a_fans_noise_under_a_soft_stretch_of_the_reply_is_not_learnt_as_its_echo():
    """A client taken to echo that does not (a headset, its own canceller) in a fan's noise 10 dB under the user:
    the microphone holds the fan whatever plays. Where the reply is soft the fan is louder than it, and learnt as its
    echo it made the echo 9 dB louder than the reply: the user, 8 dB under the reply, was never heard over it."""
    echo = EchoReference()
    s = Stream(VoiceGate(echo=echo))
    s.room([-36.0] * ROOM_MIN_CHUNKS, p=SILENT)
    for piece in range(12):  # the reply: half a second loud, half a second soft, in turn
        played(echo, -14.0 if piece % 2 == 0 else -44.0, 0.5, at=10.0 + piece * 0.5)
    times = 10.1 + np.arange(int(5.8 * 16000 / CHUNK)) * CHUNK / 16000
    for t in times[:-4]:
        s.feed(SILENT, -36.0 + float(np.sin(t * 7)), at=t)  # the fan, within a dB of its level
    assert len(echo.coupling) >= ROOM_MIN_CHUNKS and max(echo.coupling) <= ECHO_PRIOR_DB
    assert s.feed(VOICED, -22.0, at=times[-4]) == VOICED  # the user, 14 dB over the fan, over the loud reply


def test_a_loud_echo_through_a_long_reply_in_a_quiet_room_is_learnt_and_never_the_users():
    """A speakerphone whose echo comes back only 4 dB under the reply, for six seconds: the floor of all that is heard
    rises to the echo itself, and the room's own floor (heard while nothing played) still tells the echo from it."""
    echo = EchoReference()
    s = Stream(VoiceGate(echo=echo))
    s.room([-80.0] * ROOM_MIN_CHUNKS, p=SILENT)
    played(echo, -20.0, 6.0, at=10.0)
    times = 10.12 + np.arange(int(5.5 * 16000 / CHUNK)) * CHUNK / 16000
    heard = [s.feed(VOICED, -24.0 + float(np.sin(t * 9)), at=t) for t in times]
    assert len(echo.coupling) >= ROOM_MIN_CHUNKS and np.percentile(echo.coupling, 80) > -5.0
    assert heard[-40:] == [0.0] * 40  # the echo, learnt: never the user's


@pytest.mark.parametrize("tail", [VOICED, SILENT], ids=["tails-voiced", "tails-silent"])
def test_a_user_as_loud_as_the_reply_interrupting_its_first_moments_is_not_learnt_as_its_echo(tail):
    """A call whose client cancels its own echo: the microphone is silent while the reply plays, and the user talks
    over the reply's first half second, as loud as it, before the echo's coupling is known. Their words' rising
    onsets and falling tails fall under the bar (the reply's 10 dB prior, plus the margin); learnt as the echo, they
    raised the bar over the user word by word until the interruption was never heard."""
    echo = EchoReference()
    s = Stream(VoiceGate(echo=echo))
    s.room([-80.0] * ROOM_MIN_CHUNKS, p=SILENT)
    played(echo, -20.0, 6.0, at=10.0)
    at = iter(10.1 + np.arange(400) * CHUNK / 16000)
    for _ in range(3):  # a few chunks of silence while the reply plays
        s.feed(SILENT, -80.0, at=next(at))
    word = [-32.0, -28.0, -26.0, -22.0, -21.0, -22.0, -23.0, -27.0, -29.0, -31.0, -33.0, -35.0, -37.0]
    heard_last = []
    for _ in range(10):  # (Silero lets go of a word's falling tail, or holds on to it)
        heard_last = [s.feed(VOICED if i < 7 else tail, level, within=True, at=next(at))
                      for i, level in enumerate(word)]
    assert heard_last[3:5] == [VOICED, VOICED]  # the tenth word is still theirs
    assert max(echo.coupling) < -40  # only the silence was learnt as the echo


def test_a_stream_that_starts_with_the_users_voice_is_theirs_and_so_after_a_long_silence_of_the_client():
    """A client that sends audio only while its user speaks (push-to-talk, its own VAD, speech over a reply to a
    typed question) starts its stream with their voice: taken for the room's floor, that voice barred itself and
    the user could not interrupt."""
    s = Stream()
    times = 50.0 + np.arange(40) * CHUNK / 16000
    assert [s.feed(VOICED, -24.0, at=t) for t in times] == [VOICED] * 40  # no room heard: the voice is theirs
    assert s.gate.floor_db is None  # ...and not taken for the room's floor
    s.room([-80.0] * ROOM_MIN_CHUNKS, p=SILENT)
    later = times[-1] + STREAM_GAP_S + 1  # nothing sent for longer than a gap: the next stream starts afresh
    assert s.feed(VOICED, -24.0, at=later) == VOICED


def arrival(n: int, start: float = 50.0) -> list[float]:
    return list(start + np.arange(1, n + 1) * CHUNK / 16000)


def test_a_stream_that_starts_amid_other_people_talking_is_found_to_be_the_rooms_and_judged_again():
    """A page opened in a cafe: a voice from the first chunk that never falls silent nor far under itself. Until it
    is clear, it is taken for the user's; then the gate forgets that, learns the room from all of it, and the user,
    20 dB over it, is heard while the room is not."""
    s = Stream()
    levels, times = babble_levels(FRESH_MAX_CHUNKS, -45.0), arrival(FRESH_MAX_CHUNKS + 40)
    outs = [s.feed(VOICED, level, at=t) for level, t in zip(levels, times, strict=False)]
    assert outs[:-1] == [VOICED] * (FRESH_MAX_CHUNKS - 1) and s.gate.expired
    s.gate.judge_again()
    assert not s.gate.expired and s.gate.start is None
    assert s.gate.floor_db == pytest.approx(np.percentile(levels, 20), abs=0.5)
    later = babble_levels(30, -45.0, seed=3)
    after = times[FRESH_MAX_CHUNKS:]
    assert [s.feed(VOICED, level, at=t) for level, t in zip(later, after, strict=False)] == [0.0] * 30
    assert s.feed(VOICED, -24.0, at=times[-1]) == VOICED


def test_a_near_talkers_falling_level_makes_the_stream_theirs_and_the_room_is_heard_in_their_gaps():
    """The user speaks from the stream's first chunk over other people 20 dB under: between the user's syllables
    the level falls to the room's, which a room's own voices never do. The voice is the user's, and the room is
    learnt from those gaps (not from the user's voice)."""
    s = Stream()
    times = iter(arrival(200))
    pattern = [-24.0, -22.0, -26.0, -44.0]  # three chunks of a word, then the room between words
    outs = []
    for i in range(4 * FRESH_GAPS + 16):
        outs.append(s.feed(VOICED, pattern[i % len(pattern)], within=i > 2, at=next(times)))
        if s.gate.start is None:
            break
    assert s.gate.start is None and not s.gate.expired
    assert outs[:-1] == [VOICED] * (len(outs) - 1)  # taken for the user's until then...
    assert outs[-1] == 0.0  # ...and the gap that made it clear is judged as the room it is
    assert s.gate.floor_db is not None and s.gate.floor_db < -40  # the room's, heard in the gaps
    assert s.feed(VOICED, -45.0, at=next(times)) == 0.0  # ...and it is not the user


def test_a_stream_that_starts_with_a_voice_over_noise_8_db_under_it_is_the_users_once_they_pause():
    """Push-to-talk from a car: the user's pauses fall only to the engine's noise, 8 dB under their voice (not the
    10-12 dB a gap needs): that quiet still makes the voice theirs, before the stream could be taken for a room."""
    s = Stream()
    times = iter(arrival(60))
    assert [s.feed(VOICED, -24.0, within=True, at=next(times)) for _ in range(20)] == [VOICED] * 20
    for _ in range(FLOOR_MIN_CHUNKS):
        s.feed(SILENT, -32.0, within=True, at=next(times))
    assert s.gate.start is None and not s.gate.expired
    assert s.feed(VOICED, -24.0, within=True, at=next(times)) == VOICED  # ...and goes on being theirs


def chunks_at(levels: list[float]) -> bytes:
    """int16 PCM: one 32 ms chunk of a steady tone at each level (dBFS)."""
    t = np.arange(CHUNK) / 16000
    tone = np.sqrt(2) * np.sin(2 * np.pi * 220 * t)  # (an RMS of 1: 0 dBFS at full scale)
    return np.concatenate([np.round(tone * 32767 * 10 ** (db / 20)).astype("<i2") for db in levels]).tobytes()


def test_how_far_one_voice_stands_under_another_is_taken_from_more_than_one_loud_chunk():
    request = chunks_at([-70] * 10 + [-26, -30, -24, -28, -27, -25, -29, -26, -31, -27] + [-70] * 10)
    assert quieter_by(chunks_at([-70, -25, -27, -26, -70]), request) == pytest.approx(0.0, abs=0.5)  # as loud
    assert quieter_by(chunks_at([-70, -33, -32, -31, -70]), request) == pytest.approx(6.0, abs=0.5)
    # one loud syllable of the room's, the rest far under: as far under as its second loudest chunk
    assert quieter_by(chunks_at([-45, -24, -38, -40, -45]), request) == pytest.approx(12.0, abs=0.5)
    assert quieter_by(b"", request) == np.inf and quieter_by(chunks_at([-20]), b"") == -np.inf


def test_other_people_talk_only_as_heard_while_nothing_plays():
    """What a client's echo canceller leaves of the reply is voiced, and the room's to the gate, but is nobody
    talking: only chunks heard while nothing played say whether other people do."""
    quiet = Stream()
    quiet.room([-62.0] * 40, p=SILENT)
    quiet.gate.guarded = True
    quiet.room([-58.0] * 100)  # (the reply's leftover echo, voiced)
    assert quiet.gate.voices and not quiet.gate.others_talk
    quiet.gate.guarded = False
    quiet.room([-62.0] * 40, p=SILENT)
    assert not quiet.gate.others_talk
    people = Stream()
    people.room(babble_levels(60, -40.0))
    assert people.gate.voices and people.gate.others_talk
