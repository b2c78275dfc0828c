"""The turn-taking state machine, event by event: pure logic, no model, no thread, no clock."""

from __future__ import annotations

import numpy as np
import pytest

from vita.client_events import ErrorNotice, OutOfTime, StopSpeaking, VadChanged
from vita.turns.turn_events import (
    DISCARDED,
    ECHOED,
    EXTENDED,
    STALLED,
    AudioSent,
    CarrySpeech,
    CloseSession,
    CommitTurn,
    Connected,
    Disconnected,
    EndPauseAfter,
    EndUtterance,
    FinishAfter,
    FirstAudio,
    HearInterjection,
    InputCommitted,
    InterjectionHeard,
    Interrupted,
    JudgeTurn,
    PauseWaited,
    Phase,
    PlaybackDone,
    RecordingToggled,
    ReleaseHeld,
    ReplyComplete,
    Route,
    Send,
    Speech,
    SpeechConfirmed,
    SpeechDropped,
    SpeechPaused,
    SpeechPausedLonger,
    SpeechResumed,
    SpeechStarted,
    StartTurn,
    StopTurn,
    TextTyped,
    Tick,
    TurnDone,
    TurnHeard,
    TurnJudged,
    TurnRules,
    TurnUnanswered,
    UtteranceEnded,
    WorkerProgress,
    joined,
)
from vita.turns.turn_taking import MAX_EXTENDED_S, TurnTaking
from vita.words import echoes, is_stop_command, only_asks_to_stop, sounds_unfinished

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

SPEECH = Speech(b"\0\0" * 1600, started_at=0.5, ended_at=2.0)
LONGER = Speech(b"\0\0" * 3200, started_at=0.5, ended_at=3.0)


def sent(actions) -> list[str]:
    return [a.event.EVENT for a in actions if isinstance(a, Send)]


def of(actions, kind) -> list:
    return [a for a in actions if isinstance(a, kind)]


def machine(speculative: bool = True) -> TurnTaking:
    return TurnTaking(idle_timeout_s=60, now=0.0, speculative=speculative)


def spoken_turn(m: TurnTaking, speech: Speech = SPEECH, now: float = 2.3) -> int:
    m.handle(SpeechStarted(speech.started_at))
    m.handle(SpeechConfirmed(speech.started_at + 0.4))  # a real request is voiced for longer than a "mm-hmm"
    actions = m.handle(UtteranceEnded(now, speech))
    return of(actions, CommitTurn)[0].turn_id


def speaking(m: TurnTaking) -> int:
    turn = spoken_turn(m)
    m.handle(AudioSent(3.0, turn, 1.0))
    return turn


# --- a turn's ordinary life ----------------------------------------------------------------------------------
def test_end_of_speech_starts_and_commits_a_turn_that_thinks_speaks_and_ends_after_playback():
    m = machine(speculative=False)
    assert sent(m.handle(SpeechStarted(0.5))) == ["vad"]
    actions = m.handle(UtteranceEnded(2.3, SPEECH))
    (start,), (commit,) = of(actions, StartTurn), of(actions, CommitTurn)
    assert start.speech == SPEECH and not start.speculative and commit.turn_id == start.turn_id
    assert sent(actions) == ["vad", "state"] and m.phase is Phase.THINKING
    assert m.route(start.turn_id) is Route.DELIVER
    first = m.handle(AudioSent(3.0, start.turn_id, 1.0))
    (timings,) = [a.times for a in of(first, FirstAudio) if a.turn_id == start.turn_id]
    assert timings["voice_to_voice_s"] == pytest.approx(1.0) and timings["first_audio_s"] == pytest.approx(0.7)
    assert m.phase is Phase.SPEAKING
    assert m.handle(AudioSent(3.1, start.turn_id, 1.0)) == []  # first-audio times once, state once
    assert m.handle(ReplyComplete(3.2, start.turn_id)) == [FinishAfter(start.turn_id, pytest.approx(1.8))]
    assert m.phase is Phase.SPEAKING  # still interruptible while the client plays
    done = m.handle(PlaybackDone(5.0, start.turn_id))
    assert of(done, TurnDone) == [TurnDone(start.turn_id, "done")] and m.phase is Phase.LISTENING
    assert m.route(start.turn_id) is Route.DROP


def test_reply_complete_after_playback_already_ran_out_ends_at_once():
    m = machine()
    turn = speaking(m)
    assert of(m.handle(ReplyComplete(10.0, turn)), TurnDone) == [TurnDone(turn, "done")]


def test_typed_text_is_a_turn_of_its_own_without_speech_times():
    m = machine()
    actions = m.handle(TextTyped(1.0, "hello"))
    (start,) = of(actions, StartTurn)
    assert start.text == "hello" and start.speech is None and of(actions, CommitTurn)
    (first,) = of(m.handle(AudioSent(2.0, start.turn_id, 0.5)), FirstAudio)
    assert "voice_to_voice_s" not in first.times and first.times["first_audio_s"] == pytest.approx(1.0)


def test_committed_input_is_a_turn_at_once_without_any_vad_event():
    m = machine()
    actions = m.handle(InputCommitted(3.0, SPEECH, "and in French"))
    (start,), (commit,) = of(actions, StartTurn), of(actions, CommitTurn)
    assert start.speech == SPEECH and start.text == "and in French" and not start.speculative
    assert commit.turn_id == start.turn_id and m.phase is Phase.THINKING
    (first,) = of(m.handle(AudioSent(4.0, start.turn_id, 0.5)), FirstAudio)
    assert first.times["voice_to_voice_s"] == pytest.approx(2.0)  # from the end of the committed speech


def test_committed_input_supersedes_a_reply_audibly_and_a_speculative_turn_silently():
    m = machine()
    turn = speaking(m)
    actions = m.handle(InputCommitted(4.0, None, "something else"))
    assert of(actions, StopTurn) == [StopTurn(turn, "new turn", audible=True)] and "stop_tts" in sent(actions)
    assert of(actions, StartTurn)[0].turn_id == turn + 1
    m2 = machine()
    m2.handle(SpeechStarted(0.5))
    (spec,) = of(m2.handle(SpeechPaused(2.0, SPEECH)), StartTurn)
    actions = m2.handle(InputCommitted(2.1, SPEECH))
    assert of(actions, StopTurn) == [StopTurn(spec.turn_id, DISCARDED, audible=False, forget=True)]
    assert "stop_tts" not in sent(actions) and m2.speech is None
    assert of(actions, StartTurn)[0].turn_id == spec.turn_id + 1
    assert not of(actions, CarrySpeech)  # nothing was carried


def test_committed_input_forgets_a_request_the_listener_was_carrying():
    m = TurnTaking(idle_timeout_s=60, now=0.0, rules=TurnRules(extend=True, extend_grace_s=0.3))
    turn = spoken_turn(m)
    m.handle(SpeechStarted(2.5))  # the user goes on before any reply was heard: the request is carried
    m.handle(SpeechConfirmed(3.0))
    assert m.speech is not None and m.speech.carrying is not None
    actions = m.handle(InputCommitted(3.2, None, "typed instead"))
    assert CarrySpeech(None) in actions and of(actions, StartTurn)[0].turn_id > turn


def test_unanswered_turn_goes_back_to_listening_with_the_reason():
    m = machine()
    turn = spoken_turn(m)
    actions = m.handle(TurnUnanswered(3.0, turn, "no speech recognised"))
    assert of(actions, TurnDone) == [TurnDone(turn, "no speech recognised")]
    assert [a.event.reason for a in actions if isinstance(a, Send)] == ["no speech recognised"]


# --- barge-in and cancels ------------------------------------------------------------------------------------
@pytest.mark.parametrize("busy", ["thinking", "speaking"])
def test_confirmed_speech_while_busy_cancels_the_turn_audibly(busy):
    m = machine()
    turn = spoken_turn(m) if busy == "thinking" else speaking(m)
    onset = m.handle(SpeechStarted(4.0))
    assert not of(onset, StopTurn)  # a cough or a "mm-hmm" starts like this: nothing is cancelled yet
    assert sent(onset) == (["vad", "duck"] if busy == "speaking" else ["vad"])
    actions = m.handle(SpeechConfirmed(4.4))
    assert of(actions, StopTurn) == [StopTurn(turn, "barge-in", audible=True)]
    assert sent(actions) == ["stop_tts", "turn_cancelled", "state"]
    assert m.phase is Phase.LISTENING and m.route(turn) is Route.DROP


def test_outputs_of_a_cancelled_or_superseded_turn_are_dropped_and_change_nothing():
    m = machine()
    old = spoken_turn(m)
    new = spoken_turn(m, now=5.0)
    assert new == old + 1 and m.route(old) is Route.DROP and m.route(new) is Route.DELIVER
    assert m.handle(AudioSent(5.1, old, 1.0)) == [] and m.phase is Phase.THINKING
    assert m.handle(ReplyComplete(5.2, old)) == [] and m.handle(TurnUnanswered(5.2, old, "error")) == []
    assert m.handle(PlaybackDone(5.3, old)) == [] and m.active_turn == new


def test_text_during_an_utterance_joins_it():
    m = machine(speculative=False)
    m.handle(SpeechStarted(0.5))
    assert sent(m.handle(TextTyped(1.0, "and Germany?"))) == ["text_queued"]
    (start,) = of(m.handle(UtteranceEnded(2.3, SPEECH)), StartTurn)
    assert start.text == "and Germany?" and start.speech == SPEECH
    m.handle(SpeechStarted(8.0))
    m.handle(SpeechConfirmed(8.4))
    (later,) = of(m.handle(UtteranceEnded(9.0, SPEECH)), StartTurn)  # taken once
    assert later.text == ""


@pytest.mark.parametrize(("event", "reason"), [(RecordingToggled(4.0, "recording started"), "recording started"),
                                               (Interrupted(4.0, "reset"), "reset"),
                                               (Interrupted(4.0, "worker failed"), "worker failed")])
def test_recording_toggle_reset_and_worker_failure_cancel_the_turn(event, reason):
    m = machine()
    turn = speaking(m)
    assert of(m.handle(event), StopTurn) == [StopTurn(turn, reason, audible=True)]


def test_recording_toggle_without_a_turn_still_stops_playback():
    assert sent(machine().handle(RecordingToggled(1.0, "recording stopped"))) == ["stop_tts"]


def test_a_dropped_start_is_reported_and_is_not_speech():
    m = machine()
    m.handle(SpeechStarted(1.0))
    assert [a.event for a in m.handle(SpeechDropped(1.1))] == [VadChanged(speaking=False, dropped=True)]
    assert not m.user_speaking


def test_disconnect_cancels_the_turn_silently():
    m = machine()
    turn = speaking(m)
    assert m.handle(Disconnected(4.0)) == [StopTurn(turn, "disconnect", audible=False)]


# --- speculative turn start ----------------------------------------------------------------------------------
def test_a_pause_starts_a_speculative_turn_whose_outputs_are_held():
    m = machine()
    m.handle(SpeechStarted(0.5))
    actions = m.handle(SpeechPaused(2.15, SPEECH))
    assert actions == [StartTurn(1, SPEECH, "", speculative=True)]  # nothing reaches the client yet
    assert m.route(1) is Route.HOLD and m.phase is Phase.LISTENING
    assert m.handle(AudioSent(2.2, 1, 0.5)) == []  # held audio is not accounted


def test_the_real_end_of_speech_commits_the_speculative_turn_without_redoing_it():
    m = machine()
    m.handle(SpeechStarted(0.5))
    m.handle(SpeechPaused(2.15, SPEECH))
    actions = m.handle(UtteranceEnded(2.3, SPEECH))
    assert of(actions, StartTurn) == [] and of(actions, StopTurn) == []
    assert of(actions, CommitTurn) == [CommitTurn(1, SPEECH, "")]
    assert m.route(1) is Route.DELIVER and m.phase is Phase.THINKING and m.turn.speech_end_at == SPEECH.ended_at


def test_speech_resuming_after_a_pause_discards_the_speculative_turn_then_a_new_one_follows():
    m = machine()
    m.handle(SpeechStarted(0.5))
    m.handle(SpeechPaused(2.15, SPEECH))
    discarded = m.handle(SpeechResumed(2.25))
    assert discarded == [StopTurn(1, DISCARDED, audible=False, forget=True)]  # no stop_tts: nothing was heard
    assert m.route(1) is Route.DROP
    assert m.handle(SpeechPaused(3.15, LONGER)) == [StartTurn(2, LONGER, "", speculative=True)]
    assert of(m.handle(UtteranceEnded(3.3, LONGER)), CommitTurn) == [CommitTurn(2, LONGER, "")]


def test_text_typed_while_speaking_discards_the_speculative_turn_that_lacks_it():
    m = machine()
    m.handle(SpeechStarted(0.5))
    m.handle(SpeechPaused(2.15, SPEECH))
    assert of(m.handle(TextTyped(2.2, "in Paris")), StopTurn) == [StopTurn(1, DISCARDED, False, True)]
    (start,) = of(m.handle(UtteranceEnded(2.3, SPEECH)), StartTurn)
    assert start.text == "in Paris" and not start.speculative


def test_speculative_turn_that_heard_nothing_is_forgotten_and_the_end_starts_afresh():
    m = machine()
    m.handle(SpeechStarted(0.5))
    m.handle(SpeechPaused(2.15, SPEECH))
    assert m.handle(TurnUnanswered(2.2, 1, "no speech recognised")) == [StopTurn(1, DISCARDED, False, True)]
    (start,) = of(m.handle(UtteranceEnded(2.3, SPEECH)), StartTurn)
    assert start.turn_id == 2 and not start.speculative


def test_speculation_can_be_switched_off():
    m = machine(speculative=False)
    m.handle(SpeechStarted(0.5))
    assert m.handle(SpeechPaused(2.15, SPEECH)) == []


# --- idle timeout --------------------------------------------------------------------------------------------
def test_idle_timeout_fires_on_ticks_while_nothing_the_user_does_arrives():
    m = TurnTaking(idle_timeout_s=10, now=0.0)
    assert m.handle(Tick(9.0, workers_ready=True)) == []
    assert m.handle(Tick(10.5, workers_ready=True)) == [Send(OutOfTime()), CloseSession("idle")]


def test_an_idle_seat_is_given_up_sooner_while_someone_waits_for_one():
    m = TurnTaking(idle_timeout_s=600, now=0.0, idle_when_waiting_s=120)
    assert m.handle(Tick(300.0, workers_ready=True)) == []  # nobody waits: the usual limit
    assert m.handle(Tick(301.0, workers_ready=True, give_seat_up=True)) == [Send(OutOfTime()),
                                                                             CloseSession("idle")]
    active = TurnTaking(idle_timeout_s=600, now=0.0, idle_when_waiting_s=120)
    active.handle(Connected(250.0))
    assert active.handle(Tick(300.0, workers_ready=True, give_seat_up=True)) == []  # not idle that long


def test_the_idle_clock_starts_when_the_client_is_told_it_is_connected():
    m = TurnTaking(idle_timeout_s=10, now=0.0)
    m.handle(Connected(0.5))
    assert m.handle(Tick(10.2, workers_ready=True)) == []
    assert of(m.handle(Tick(10.6, workers_ready=True)), CloseSession)


def test_waiting_for_models_or_an_answer_is_not_idleness():
    m = TurnTaking(idle_timeout_s=10, now=0.0, stall_s=100)
    assert m.handle(Tick(30.0, workers_ready=False)) == []
    assert m.handle(Tick(35.0, workers_ready=True)) == []  # the clock restarted when the models came up
    turn = spoken_turn(m, now=36.0)
    assert m.handle(Tick(60.0, workers_ready=True)) == []  # thinking
    m.handle(TurnUnanswered(60.0, turn, "error"))
    assert m.handle(Tick(69.0, workers_ready=True)) == []
    assert of(m.handle(Tick(71.0, workers_ready=True)), CloseSession)


def test_speech_typing_and_recording_count_as_activity():
    for event in (SpeechStarted(8.0), TextTyped(8.0, "hi"), RecordingToggled(8.0, "recording started")):
        m = TurnTaking(idle_timeout_s=10, now=0.0)
        m.handle(event)
        m.handle(Interrupted(8.0, "reset"))
        m.speech = None  # whatever was heard is over
        assert m.handle(Tick(15.0, workers_ready=True)) == [], event


# --- the watchdog: a turn always ends -------------------------------------------------------------------------
def stalled_error(actions) -> bool:
    return any(isinstance(a, Send) and isinstance(a.event, ErrorNotice) and a.event.code == "turn_stalled"
               for a in actions)


def test_a_turn_that_never_answers_is_cancelled_with_an_error_and_the_idle_clock_runs_again():
    m = TurnTaking(idle_timeout_s=60, now=0.0, stall_s=15)
    turn = spoken_turn(m, now=2.3)  # committed at 2.3: thinking, and nothing ever comes back
    assert m.handle(Tick(17.0, workers_ready=True)) == []
    actions = m.handle(Tick(17.5, workers_ready=True))
    assert stalled_error(actions) and of(actions, StopTurn) == [StopTurn(turn, STALLED, audible=True)]
    assert sent(actions)[-1] == "state" and actions[-1].event.state == "listening"
    assert m.phase is Phase.LISTENING and m.active_turn is None and m.route(turn) is Route.DROP
    assert m.handle(Tick(77.0, workers_ready=True)) == []  # idle from the cancel on, not from the question
    assert of(m.handle(Tick(78.0, workers_ready=True)), CloseSession)


def test_a_reply_whose_end_is_lost_is_cancelled_once_its_audio_has_played_and_the_limit_passed():
    m = TurnTaking(idle_timeout_s=600, now=0.0, stall_s=15)
    turn = spoken_turn(m, now=2.3)
    m.handle(AudioSent(3.0, turn, 10.0))  # 10 s of reply audio, playing until 13.0; its last chunk never comes
    m.handle(AudioSent(4.0, turn, 2.0))  # ...until 15.0
    assert m.handle(Tick(29.9, workers_ready=True)) == []  # 15 s after the audio the client is playing ran out
    actions = m.handle(Tick(30.1, workers_ready=True))
    assert stalled_error(actions) and of(actions, StopTurn)[0].turn_id == turn and m.phase is Phase.LISTENING


def test_reply_audio_is_progress_and_speculative_turns_are_not_watched():
    m = TurnTaking(idle_timeout_s=600, now=0.0, stall_s=15)
    turn = spoken_turn(m, now=2.3)
    for t in (10.0, 20.0, 30.0):
        m.handle(AudioSent(t, turn, 0.2))
        assert m.handle(Tick(t + 14.0, workers_ready=True)) == []
    assert m.phase is Phase.SPEAKING
    m = TurnTaking(idle_timeout_s=600, now=0.0, stall_s=15)
    m.handle(SpeechStarted(0.5))
    m.handle(SpeechPaused(1.0, SPEECH))  # speculative: the user is still talking; nothing to watch yet
    assert not stalled_error(m.handle(Tick(40.0, workers_ready=True)))


def test_a_slow_worker_telling_of_its_progress_is_not_stalled_and_one_that_falls_silent_is():
    m = TurnTaking(idle_timeout_s=600, now=0.0, stall_s=15)
    turn = spoken_turn(m, now=2.3)
    for t in (12.0, 24.0):  # the words heard, then a piece of the reply's text: a loaded machine, still at it
        assert m.handle(WorkerProgress(t, turn)) == []
        assert m.handle(Tick(t + 14.0, workers_ready=True)) == []
    assert m.phase is Phase.THINKING and m.active_turn == turn
    m.handle(WorkerProgress(30.0, turn + 1))  # news of another turn is no news of this one
    assert stalled_error(m.handle(Tick(39.1, workers_ready=True)))


# --- turn-taking like a person: the end-of-turn model, extending a request, barge-in that means it ---------------
def judging(extend: bool = True, words_wait_s: float = 0.0) -> TurnTaking:
    return TurnTaking(idle_timeout_s=60, now=0.0, rules=TurnRules(judge=True, complete_threshold=0.5, extend=extend,
                                                                  extend_grace_s=0.3,
                                                                  finished_words_wait_s=words_wait_s))


def test_a_pause_starts_a_speculative_turn_and_asks_the_model_complete_ends_the_utterance_at_once():
    m = judging()
    m.handle(SpeechStarted(0.5))
    actions = m.handle(SpeechPaused(2.1, SPEECH))
    (start,), (judge,) = of(actions, StartTurn), of(actions, JudgeTurn)
    assert start.speculative and judge.speech == SPEECH
    assert m.handle(TurnHeard(2.12, start.turn_id, "What is the capital of France?")) == []  # the model's turn
    assert m.handle(TurnJudged(2.15, judge.pause, 0.9)) == [EndUtterance()]
    (commit,) = of(m.handle(UtteranceEnded(2.16, SPEECH)), CommitTurn)
    assert commit.turn_id == start.turn_id  # the speculative turn's work is kept


def test_finished_by_the_model_the_turn_ends_at_once_and_its_reply_waits_for_the_words_to_agree():
    m = judging()
    m.handle(SpeechStarted(0.5))
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(2.1, SPEECH)))
    assert m.handle(TurnJudged(2.15, judge.pause, 0.9)) == [EndUtterance()]  # before the speculative ASR answered
    (commit,) = of(m.handle(UtteranceEnded(2.16, SPEECH)), CommitTurn)
    assert commit.turn_id == start.turn_id and m.phase is Phase.THINKING
    assert m.route(start.turn_id) is Route.HOLD  # its words may yet say the user is going on
    assert m.handle(TurnHeard(2.3, start.turn_id, "How many legs does a spider have?")) == [ReleaseHeld()]
    assert m.route(start.turn_id) is Route.DELIVER


def ended_before_its_words(m: TurnTaking, words: str | None) -> tuple[int, JudgeTurn, list]:
    """A pause judged finished at 2.15 s, 50 ms after it opened, the turn committed (its reply held, the long
    silence's wait set), then its words heard (None: not yet)."""
    m.handle(SpeechStarted(0.5))
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(2.1, SPEECH)))
    assert m.handle(TurnJudged(2.15, judge.pause, 0.95)) == [EndUtterance()]
    committed = m.handle(UtteranceEnded(2.16, SPEECH))
    assert of(committed, CommitTurn)
    assert of(committed, EndPauseAfter) == [EndPauseAfter(judge.pause, pytest.approx(1.44))]  # 1.5 s from the pause
    return start.turn_id, judge, [] if words is None else m.handle(TurnHeard(2.4, start.turn_id, words))


def test_words_heard_after_the_end_that_go_on_hold_the_reply_until_the_long_silence():
    m = judging()
    turn, judge, actions = ended_before_its_words(m, "I have a question.")
    assert actions == []
    assert m.route(turn) is Route.HOLD and m.phase is Phase.THINKING
    assert m.handle(PauseWaited(3.6, judge.pause - 1)) == []  # another pause's wait releases nothing
    assert m.handle(PauseWaited(3.6, judge.pause)) == [ReleaseHeld()]  # nothing more was said: the reply goes
    assert m.route(turn) is Route.DELIVER


def test_words_heard_after_the_end_that_go_on_then_more_speech_is_one_request_and_no_early_end():
    """As if the turn had never ended: the speech joins it, and the pause does not count against the request
    (EARLY_ENDS_PER_REQUEST): its words kept it open."""
    m = judging()
    turn, judge, _ = ended_before_its_words(m, "I have a question.")
    m.handle(SpeechStarted(2.9))
    assert of(m.handle(SpeechConfirmed(3.3)), StopTurn) == [StopTurn(turn, EXTENDED, audible=False, forget=True)]
    assert m.handle(PauseWaited(3.6, judge.pause)) == []  # the withdrawn turn's wait releases nothing
    assert m.went_on == 0
    (start,) = of(m.handle(UtteranceEnded(4.5, LONGER)), StartTurn)
    assert start.speech == LONGER and m.route(start.turn_id) is Route.DELIVER


def test_words_that_never_come_hold_the_reply_no_longer_than_the_long_silence():
    """A failed ASR, a worker restarting: its outputs (an error, the turn's end) reach the page after the wait."""
    m = judging()
    turn, judge, _ = ended_before_its_words(m, None)
    assert m.route(turn) is Route.HOLD
    assert m.handle(PauseWaited(3.6, judge.pause)) == [ReleaseHeld()]
    assert m.route(turn) is Route.DELIVER
    assert m.handle(TurnHeard(3.7, turn, "I have a question.")) == []  # too late to hold anything


def test_words_for_a_turn_withdrawn_meanwhile_decide_nothing():
    m = judging()
    turn, judge, _ = ended_before_its_words(m, None)
    m.handle(SpeechStarted(2.3))
    assert of(m.handle(SpeechConfirmed(2.7)), StopTurn)  # went on before the words: withdrawn, carried
    assert m.handle(TurnHeard(2.8, turn, "What is the capital of France?")) == []
    assert m.handle(PauseWaited(3.6, judge.pause)) == []


def test_going_on_before_the_words_came_keeps_the_speculation_backoff_and_is_no_early_end():
    """As if the speculative turn had been discarded: a client pausing between every word gains nothing."""
    m = judging()
    ended_before_its_words(m, None)  # speculated at 2.1 s
    m.handle(SpeechStarted(2.2))
    assert of(m.handle(SpeechConfirmed(2.4)), StopTurn)
    assert m.went_on == 0
    assert not of(m.handle(SpeechPaused(2.5, LONGER)), StartTurn)  # 0.5 s backoff since the last speculation
    m.handle(SpeechResumed(2.55))
    assert of(m.handle(SpeechPaused(2.65, LONGER)), StartTurn)


def test_without_extending_the_words_decide_before_the_turn_ends():
    """A turn ended early could not take the rest of the request in: the words come first, as before."""
    m = judging(extend=False)
    m.handle(SpeechStarted(0.5))
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(2.1, SPEECH)))
    assert m.handle(TurnJudged(2.15, judge.pause, 0.95)) == []
    assert m.handle(TurnHeard(2.3, start.turn_id, "What is the capital of France?")) == [EndUtterance()]
    (commit,) = of(m.handle(UtteranceEnded(2.31, SPEECH)), CommitTurn)
    assert m.route(commit.turn_id) is Route.DELIVER


def test_words_heard_after_the_end_release_nothing_while_the_user_may_be_going_on():
    m = judging()
    m.handle(SpeechStarted(0.5))
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(2.1, SPEECH)))
    m.handle(TurnJudged(2.15, judge.pause, 0.95))
    m.handle(UtteranceEnded(2.16, SPEECH))
    m.handle(SpeechStarted(2.3))  # a sound, or more of the request: not yet confirmed
    assert m.handle(TurnHeard(2.4, start.turn_id, "What is the capital of France?")) == []
    assert m.route(start.turn_id) is Route.HOLD
    assert of(m.handle(SpeechDropped(2.6)), ReleaseHeld)  # a cough: the reply goes
    assert m.route(start.turn_id) is Route.DELIVER


@pytest.mark.parametrize("words", ["I have a question.", "Tell me about the moon and", "My favourite colours are,",
                                   "What is the capital of"])
def test_words_that_go_on_keep_the_turn_open_whatever_the_audio_model_says(words):
    m = judging()
    m.handle(SpeechStarted(0.5))
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(2.1, SPEECH)))
    assert m.handle(TurnHeard(2.3, start.turn_id, words)) == []
    assert m.handle(TurnJudged(2.35, judge.pause, 0.95)) == []
    assert m.phase is Phase.LISTENING and m.speculative  # the long silence or more speech decides
    m.handle(SpeechResumed(2.9))
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(4.1, LONGER)))
    assert m.handle(TurnHeard(4.3, start.turn_id, f"{words} How many legs does a spider have?")) == []
    assert m.handle(TurnJudged(4.35, judge.pause, 0.95)) == [EndUtterance()]


def test_words_that_end_a_sentence_end_a_doubted_pause_sooner_than_the_long_silence():
    m = judging(words_wait_s=0.6)
    m.handle(SpeechStarted(0.5))
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(2.1, SPEECH)))
    assert m.handle(TurnJudged(2.15, judge.pause, 0.2)) == []  # the audio model doubts it
    (wait,) = m.handle(TurnHeard(2.4, start.turn_id, "How many legs does a spider have?"))
    assert wait == EndPauseAfter(judge.pause, pytest.approx(0.3))  # 0.6 s from the pause, not from the words
    assert m.handle(PauseWaited(2.7, judge.pause)) == [EndUtterance()]


def test_a_pause_the_user_went_on_from_is_not_ended_by_its_wait():
    m = judging(words_wait_s=0.6)
    m.handle(SpeechStarted(0.5))
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(2.1, SPEECH)))
    m.handle(TurnJudged(2.15, judge.pause, 0.2))
    assert of(m.handle(TurnHeard(2.4, start.turn_id, "My name is Anna.")), EndPauseAfter)
    m.handle(SpeechResumed(2.5))  # "Please remember it."
    assert m.handle(PauseWaited(2.7, judge.pause)) == []
    (judge2,) = of(m.handle(SpeechPaused(3.6, LONGER)), JudgeTurn)
    assert m.handle(PauseWaited(3.61, judge.pause)) == []  # an old pause's wait ends nothing
    m.handle(TurnJudged(3.65, judge2.pause, 0.2))
    assert m.handle(TurnHeard(3.8, m.active_turn, "My name is Anna, and.")) == []  # goes on: no shorter wait


def test_a_speculative_turn_that_hears_nothing_leaves_the_models_word_standing():
    m = judging()
    m.handle(SpeechStarted(0.5))
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(2.1, SPEECH)))
    assert m.handle(TurnJudged(2.15, judge.pause, 0.2)) == []
    assert of(m.handle(TurnUnanswered(2.2, start.turn_id, "not ready")), StopTurn)  # e.g. a worker restarting
    (again,) = m.handle(SpeechPausedLonger(2.3, LONGER))
    assert m.handle(TurnJudged(2.35, again.pause, 0.9)) == [EndUtterance()]  # no words will come: the model decides
    (start,) = of(m.handle(UtteranceEnded(2.36, LONGER)), StartTurn)
    assert m.route(start.turn_id) is Route.DELIVER  # a turn of its own, whose ASR is its own: nothing to wait for


def test_the_words_of_an_old_pause_or_another_turn_decide_nothing():
    m = judging()
    m.handle(SpeechStarted(0.5))
    (first,) = of(m.handle(SpeechPaused(2.1, SPEECH)), StartTurn)
    m.handle(SpeechResumed(2.2))
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(3.1, LONGER)))
    assert m.handle(TurnHeard(3.2, first.turn_id, "I have a question.")) == []  # the discarded turn's
    assert m.handle(TurnJudged(3.25, judge.pause, 0.9)) == [EndUtterance()]
    (commit,) = of(m.handle(UtteranceEnded(3.26, LONGER)), CommitTurn)
    assert m.handle(TurnHeard(3.3, first.turn_id, "I have a question.")) == []
    assert m.handle(TurnHeard(3.4, start.turn_id, "What is the capital of France? Keep it short.")) == [ReleaseHeld()]


@pytest.mark.parametrize(("words", "unfinished"), [
    ("What is it for?", False), ("Who is it from?", False), ("Tell me a joke.", False), ("Hello.", False),
    ("Can I ask you something?", False), ("", False), ("I have a question.", True), ("Quick question:", True),
    ("I was thinking about the moon and", True), ("So, um,", True), ("What is the capital of", True),
    ("Tell me about the...", True), ("My name is Anna.", False), ("How long should I?", True),
    ("Can you?", False), ("Tell me a joke, can you?", False), ("What time is it?", False), ("I think so.", False),
    ("I stayed home because", True)])
def test_sounds_unfinished(words, unfinished):
    assert sounds_unfinished(words) is unfinished


def test_incomplete_keeps_listening_and_the_long_silence_still_ends_the_turn():
    m = judging()
    m.handle(SpeechStarted(0.5))
    (judge,) = of(m.handle(SpeechPaused(2.1, SPEECH)), JudgeTurn)
    assert m.handle(TurnJudged(2.15, judge.pause, 0.2)) == []
    assert m.phase is Phase.LISTENING and m.speculative
    assert of(m.handle(UtteranceEnded(3.3, SPEECH)), CommitTurn)


def test_a_pause_the_model_doubted_is_judged_again_once_it_has_gone_on():
    m = judging()
    m.handle(SpeechStarted(0.5))
    (start,), (first,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(2.1, SPEECH)))
    assert m.handle(TurnJudged(2.15, first.pause, 0.3)) == []  # unfinished, ~0.13 s into the silence
    (again,) = m.handle(SpeechPausedLonger(2.2, LONGER))
    assert again == JudgeTurn(first.pause, LONGER)  # the same pause, with the silence since
    assert m.handle(SpeechPausedLonger(2.3, LONGER)) == []  # asked once more, not at every chunk
    assert m.handle(TurnHeard(2.22, start.turn_id, "What is the capital of France?")) == []
    assert m.handle(TurnJudged(2.25, again.pause, 0.8)) == [EndUtterance()]
    (commit,) = of(m.handle(UtteranceEnded(2.26, SPEECH)), CommitTurn)
    assert commit.turn_id == start.turn_id  # the speculative turn started at the pause is the one kept


def test_a_doubt_that_comes_back_after_the_pause_went_on_is_asked_again_at_once():
    """The shared judge was busy: its first answer came after the pause had already gone on."""
    m = judging()
    m.handle(SpeechStarted(0.5))
    (first,) = of(m.handle(SpeechPaused(2.1, SPEECH)), JudgeTurn)
    assert m.handle(SpeechPausedLonger(2.2, LONGER)) == []  # no answer yet: nothing to ask again
    assert m.handle(TurnJudged(2.25, first.pause, 0.3)) == [JudgeTurn(first.pause, LONGER)]
    assert m.handle(TurnJudged(2.3, first.pause, 0.3)) == []  # twice at most


def test_a_pause_judged_finished_or_not_yet_judged_or_resumed_is_not_asked_again():
    m = judging()
    m.handle(SpeechStarted(0.5))
    m.handle(SpeechPaused(2.1, SPEECH))
    assert m.handle(SpeechPausedLonger(2.2, LONGER)) == []  # the first answer has not come back
    m.handle(SpeechResumed(2.3))
    (judge,) = of(m.handle(SpeechPaused(3.1, SPEECH)), JudgeTurn)
    assert m.handle(TurnJudged(3.15, judge.pause, 0.2)) == []
    m.handle(SpeechResumed(3.18))  # the user went on: the doubt was about a pause that is over
    (judge,) = of(m.handle(SpeechPaused(4.1, SPEECH)), JudgeTurn)
    assert m.handle(SpeechPausedLonger(4.2, LONGER)) == []


def test_a_judgement_that_arrives_after_speech_resumed_is_ignored():
    m = judging()
    m.handle(SpeechStarted(0.5))
    (first,) = of(m.handle(SpeechPaused(2.1, SPEECH)), JudgeTurn)
    m.handle(SpeechResumed(2.2))
    assert m.handle(TurnJudged(2.25, first.pause, 0.99)) == []  # "My name is Anna." ... "and I live in Rome"
    (second,) = of(m.handle(SpeechPaused(4.0, LONGER)), JudgeTurn)
    assert second.pause == first.pause + 1
    assert m.handle(TurnJudged(4.05, first.pause, 0.99)) == []  # an old pause's answer never ends a new one
    m.handle(TurnHeard(4.1, m.active_turn, "My name is Anna and I live in Rome."))
    assert m.handle(TurnJudged(4.15, second.pause, 0.99)) == [EndUtterance()]


def test_going_on_before_the_reply_is_heard_extends_the_turn_instead_of_a_second_one():
    m = judging()
    turn = spoken_turn(m)
    assert m.phase is Phase.THINKING
    assert sent(m.handle(SpeechStarted(2.6))) == ["vad"]  # nothing withdrawn on onset alone
    actions = m.handle(SpeechConfirmed(3.0))
    assert of(actions, StopTurn) == [StopTurn(turn, EXTENDED, audible=False, forget=True)]
    assert of(actions, CarrySpeech) == [CarrySpeech(SPEECH)] and "stop_tts" not in sent(actions)
    assert m.route(turn) is Route.DROP and m.phase is Phase.LISTENING
    (start,) = of(m.handle(UtteranceEnded(4.0, LONGER)), StartTurn)  # the listener's utterance carries SPEECH
    assert start.turn_id == turn + 1 and start.speech == LONGER


def ends_at_a_pause(m: TurnTaking, now: float, speech: Speech, words: str) -> list:
    """A pause in speech that is heard (speculatively) as `words` and judged finished: what the machine does."""
    (start,), (judge,) = (lambda a: (of(a, StartTurn), of(a, JudgeTurn)))(m.handle(SpeechPaused(now, speech)))
    return m.handle(TurnHeard(now + 0.1, start.turn_id, words)) + m.handle(TurnJudged(now + 0.15, judge.pause, 0.99))


def went_on_twice(m: TurnTaking) -> None:
    """A request ended at two pauses judged final, and the user went on after each (withdrawn: `extended`)."""
    m.handle(SpeechStarted(0.5))
    for n in range(2):  # (EARLY_ENDS_PER_REQUEST)
        t = 2.0 + 2 * n
        assert EndUtterance() in ends_at_a_pause(m, t, SPEECH, "I need eggs.")
        turn = of(m.handle(UtteranceEnded(t + 0.2, SPEECH)), CommitTurn)[0].turn_id
        m.handle(SpeechStarted(t + 0.5))
        assert of(m.handle(SpeechConfirmed(t + 0.9)), StopTurn) == [StopTurn(turn, EXTENDED, audible=False,
                                                                              forget=True)]


def test_after_going_on_twice_from_pauses_judged_final_only_the_long_silence_ends_the_request():
    """"I need eggs. (pause) And milk. (pause) And bread. (pause) And butter.": answered at every pause, the list
    was withdrawn and asked again each time; so was speech cut into words, at every gap."""
    m = judging(words_wait_s=0.3)
    went_on_twice(m)
    actions = m.handle(SpeechPaused(6.0, LONGER))
    assert of(actions, StartTurn) and not of(actions, JudgeTurn)  # no model answer can end it: none is asked
    (start,) = of(actions, StartTurn)
    assert m.handle(TurnHeard(6.1, start.turn_id, "I need eggs and milk and bread.")) == []  # no quicker end either
    assert m.phase is Phase.LISTENING
    turn = of(m.handle(UtteranceEnded(7.6, LONGER)), CommitTurn)[0].turn_id  # the long silence ended it
    m.handle(AudioSent(8.0, turn, 0.5))
    m.handle(ReplyComplete(8.6, turn))  # answered: the next request is judged afresh
    m.handle(SpeechStarted(9.0))
    assert EndUtterance() in ends_at_a_pause(m, 10.5, SPEECH, "Thanks.")


@pytest.mark.parametrize("ending", ["barge-in", "input committed", "recording toggled", "reset"])
def test_a_request_that_ends_otherwise_leaves_the_next_one_judged_afresh(ending):
    m = judging()
    went_on_twice(m)
    turn = of(m.handle(UtteranceEnded(6.2, LONGER)), CommitTurn)[0].turn_id
    if ending == "barge-in":
        m.handle(AudioSent(6.5, turn, 2.0))
        m.handle(SpeechStarted(7.0))
        assert of(m.handle(SpeechConfirmed(7.4)), StopTurn) == [StopTurn(turn, "barge-in", audible=True)]
        m.handle(UtteranceEnded(8.0, SPEECH))  # the interruption is a request of its own...
        m.handle(AudioSent(8.3, turn + 1, 0.2))
        m.handle(ReplyComplete(8.6, turn + 1))
    elif ending == "input committed":  # a client's push-to-talk commit: its request, and the speech after judged
        m.handle(InputCommitted(6.5, SPEECH, ""))
        m.handle(SpeechStarted(9.0))
        assert of(m.handle(SpeechPaused(10.5, SPEECH)), JudgeTurn)
        return
    elif ending == "recording toggled":
        m.handle(RecordingToggled(6.5, "recording stopped"))
    else:
        m.handle(Interrupted(6.5, "reset"))
    m.handle(SpeechStarted(9.0))
    assert EndUtterance() in ends_at_a_pause(m, 10.5, SPEECH, "Thanks.")  # ...judged like any first request


def test_a_request_already_long_is_not_extended_again_what_follows_is_a_turn_of_its_own():
    """Speech cut into words, each pause answered and withdrawn by the next word, grew one request without end."""
    m = judging()
    long_request = Speech(b"\0\0" * int(16000 * MAX_EXTENDED_S), started_at=0.5, ended_at=0.5 + MAX_EXTENDED_S)
    turn = spoken_turn(m, long_request, now=MAX_EXTENDED_S + 0.8)
    m.handle(SpeechStarted(MAX_EXTENDED_S + 1.0))
    actions = m.handle(SpeechConfirmed(MAX_EXTENDED_S + 1.4))
    assert of(actions, StopTurn) == [StopTurn(turn, "barge-in", audible=True)] and not of(actions, CarrySpeech)


def test_a_cough_after_the_turn_was_withdrawn_sends_the_request_as_it_was():
    m = judging()
    turn = spoken_turn(m)
    m.handle(SpeechStarted(2.6))
    m.handle(SpeechConfirmed(3.0))
    actions = m.handle(SpeechDropped(3.1))
    (start,) = of(actions, StartTurn)
    assert start.speech == SPEECH and start.turn_id == turn + 1 and of(actions, CommitTurn)
    assert CarrySpeech(None) in actions and m.phase is Phase.THINKING


def test_once_the_reply_is_heard_confirmed_speech_interrupts_instead_of_extending():
    m = judging()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    actions = m.handle(SpeechConfirmed(3.9))
    assert of(actions, StopTurn) == [StopTurn(turn, "barge-in", audible=True)] and not of(actions, CarrySpeech)


def test_a_typed_turn_is_interrupted_not_extended():
    m = judging()
    (start,) = of(m.handle(TextTyped(1.0, "hello")), StartTurn)
    m.handle(SpeechStarted(1.5))
    assert of(m.handle(SpeechConfirmed(1.9)), StopTurn) == [StopTurn(start.turn_id, "barge-in", audible=True)]


@pytest.mark.parametrize("sound", ["backchannel", "cough"])
def test_a_backchannel_or_a_cough_over_the_reply_ducks_it_and_changes_nothing_else(sound):
    m = judging()
    turn = speaking(m)
    assert sent(m.handle(SpeechStarted(3.5))) == ["vad", "duck"]
    if sound == "backchannel":  # "mm-hmm": kept by the VAD, never confirmed; it paused, so full volume again now
        assert sent(m.handle(SpeechPaused(3.9, SPEECH))) == ["unduck"]  # no speculative turn, no judgement
        end = UtteranceEnded(5.1, SPEECH)
    else:
        end = SpeechDropped(3.7)
    actions = m.handle(end)
    assert not of(actions, StopTurn) and not of(actions, StartTurn)
    assert "duck" not in sent(actions) and not m.turn.ducked
    assert m.phase is Phase.SPEAKING and m.route(turn) is Route.DELIVER


def test_speech_that_resumes_over_the_reply_ducks_it_again_and_a_reply_ending_under_it_unducks():
    m = judging()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    m.handle(SpeechPaused(3.9, SPEECH))
    assert sent(m.handle(SpeechResumed(4.0))) == ["duck"]
    done = m.handle(ReplyComplete(4.1, turn))  # its audio had played out already: the turn ends now
    assert sent(done)[0] == "unduck" and of(done, TurnDone)  # the next reply must not start quiet


def test_speech_right_after_the_first_reply_audio_extends_and_stops_those_few_words():
    """Committed at "Can you tell me," and the user goes on 100 ms after the reply's first audio went out (too soon
    to be an answer to it): the request is extended, and the few words of reply stopped."""
    m = judging()
    turn = spoken_turn(m)
    m.handle(AudioSent(2.5, turn, 0.2))
    m.handle(SpeechStarted(2.6))
    actions = m.handle(SpeechConfirmed(2.9))
    assert of(actions, StopTurn) == [StopTurn(turn, EXTENDED, audible=False, forget=True)]
    assert sent(actions)[0] == "stop_tts" and of(actions, CarrySpeech) == [CarrySpeech(SPEECH)]


def test_the_watchdog_says_what_was_missing():
    m = machine()
    turn = spoken_turn(m)
    (error,) = [a.event for a in m.handle(Tick(40.0, True)) if isinstance(a, Send) and a.event.EVENT == "error"]
    assert error.code == "turn_stalled" and "did not answer" in error.message
    turn = spoken_turn(m, now=41.0)
    m.handle(AudioSent(41.5, turn, 2.0))  # a reply was heard, then its end was lost
    (error,) = [a.event for a in m.handle(Tick(80.0, True)) if isinstance(a, Send) and a.event.EVENT == "error"]
    assert error.code == "turn_stalled" and "stopped before its end" in error.message


@pytest.mark.parametrize(("after_first_audio", "outcome"), [(0.2, EXTENDED), (0.6, "barge-in")])
def test_speech_soon_after_the_first_audio_still_extends_later_speech_interrupts(after_first_audio, outcome):
    m = judging()
    turn = spoken_turn(m)
    m.handle(AudioSent(2.5, turn, 2.0))
    m.handle(SpeechStarted(2.5 + after_first_audio))
    (cancel,) = of(m.handle(SpeechConfirmed(3.5)), StopTurn)
    assert cancel.reason == outcome


def voice_at(db: float, seconds: float, started_at: float) -> Speech:
    """Speech whose voice stands at `db` dBFS (a steady tone: what matters here is its level)."""
    t = np.arange(int(seconds * 16000)) / 16000
    pcm = np.round(np.sqrt(2) * np.sin(2 * np.pi * 220 * t) * 32767 * 10 ** (db / 20)).astype("<i2").tobytes()
    return Speech(pcm, started_at=started_at, ended_at=started_at + seconds)


REQUEST = voice_at(-26, 1.5, started_at=0.5)


def went_on_as_the_reply_began(m: TurnTaking) -> int:
    """A request whose reply began at 2.5 s, and speech from 2.7 s on (within the grace: it may go on with it)."""
    turn = spoken_turn(m, speech=REQUEST)
    m.handle(AudioSent(2.5, turn, 2.0))
    m.handle(SpeechStarted(2.7))
    return turn


@pytest.mark.parametrize(("under_db", "room_talks", "goes_on"), [(8, True, False), (2, True, True), (8, False, True)])
def test_among_people_talking_speech_goes_on_with_a_request_whose_reply_began_only_at_its_level(under_db, room_talks,
                                                                                                goes_on):
    """Other people's syllables, 10 dB under the user, were taken for the user going on: the reply just begun was
    withdrawn and the request sent again with them in it. The user going on speaks as they asked."""
    m = judging()
    turn = went_on_as_the_reply_began(m)
    heard = voice_at(-26 - under_db, 0.8, started_at=2.7)
    actions = m.handle(SpeechConfirmed(3.5, heard, loud=False, room_talks=room_talks))
    if goes_on:
        assert of(actions, StopTurn) == [StopTurn(turn, EXTENDED, audible=False, forget=True)]
        return
    assert of(actions, StopTurn) == [] and "unduck" in sent(actions)  # nor extended, nor interrupted
    assert m.route(turn) is Route.DELIVER
    ended = m.handle(UtteranceEnded(4.0, heard, room_talks=True))
    assert of(ended, StopTurn) == [] and of(ended, StartTurn) == [] and m.turn.turn_id == turn


def test_among_people_talking_speech_taken_for_the_rooms_as_the_reply_began_is_no_request_when_it_ends_after_it():
    m = judging()
    turn = went_on_as_the_reply_began(m)
    heard = voice_at(-34, 0.8, started_at=2.7)
    m.handle(SpeechConfirmed(3.5, heard, loud=False, room_talks=True))
    m.handle(ReplyComplete(3.6, turn))
    m.handle(PlaybackDone(4.5, turn))
    ended = m.handle(UtteranceEnded(5.0, voice_at(-34, 2.0, started_at=2.7), room_talks=True))
    assert of(ended, StartTurn) == [] and m.turn is None


@pytest.mark.parametrize(("under_db", "joins"), [(8, False), (2, True)])
def test_among_people_talking_a_short_continuation_after_the_reply_began_joins_only_at_the_requests_level(
        under_db, joins):
    m = judging()
    turn = went_on_as_the_reply_began(m)
    actions = m.handle(UtteranceEnded(3.2, voice_at(-26 - under_db, 0.4, started_at=2.7), room_talks=True))
    assert bool(of(actions, StartTurn)) is joins and bool(of(actions, StopTurn)) is joins
    assert (m.turn.turn_id == turn) is not joins


def test_among_people_talking_quieter_speech_before_the_reply_was_heard_still_goes_on_with_the_request():
    """Nothing of the reply heard yet: a request's softer last words ("...of Japan?") go on with it, as ever."""
    m = judging()
    turn = spoken_turn(m, speech=REQUEST)
    m.handle(SpeechStarted(2.4))
    actions = m.handle(SpeechConfirmed(2.9, voice_at(-34, 0.5, started_at=2.4), room_talks=True))
    assert of(actions, StopTurn) == [StopTurn(turn, EXTENDED, audible=False, forget=True)]


@pytest.mark.parametrize(("under_db", "room_talks", "a_turn"), [(8, True, False), (2, True, True), (8, False, True)])
def test_among_people_talking_speech_begun_over_the_reply_and_ended_after_it_is_a_request_only_at_its_level(
        under_db, room_talks, a_turn):
    """Other people's talk, heard over the reply's end and ended after it, was asked as a request."""
    m = judging()
    turn = spoken_turn(m, speech=REQUEST)
    m.handle(AudioSent(2.5, turn, 1.5))
    m.handle(SpeechStarted(3.5))  # (after the grace: over the reply)
    m.handle(ReplyComplete(3.6, turn))
    assert of(m.handle(PlaybackDone(4.0, turn)), TurnDone) == [TurnDone(turn, "done")]
    (judge,) = of(m.handle(SpeechPaused(4.3, voice_at(-26 - under_db, 0.8, started_at=3.5))), JudgeTurn)
    assert m.speculative  # (a speculative turn on its pause, as on any request's)
    m.handle(TurnJudged(4.35, judge.pause, 0.9))
    actions = m.handle(UtteranceEnded(4.4, voice_at(-26 - under_db, 0.9, started_at=3.5), room_talks=room_talks))
    assert bool(of(actions, CommitTurn)) is a_turn
    if not a_turn:
        assert [(a.reason, a.audible) for a in of(actions, StopTurn)] == [(DISCARDED, False)] and m.turn is None


def test_among_people_talking_speech_confirmed_after_the_reply_ended_is_a_request_at_any_level():
    """Voiced long enough to be more than a "mm-hmm": the user's (the gate's bars have judged it already)."""
    m = judging()
    turn = spoken_turn(m, speech=REQUEST)
    m.handle(AudioSent(2.5, turn, 1.5))
    m.handle(SpeechStarted(3.5))
    m.handle(ReplyComplete(3.6, turn))
    m.handle(PlaybackDone(4.0, turn))
    quiet = voice_at(-34, 1.5, started_at=3.5)
    m.handle(SpeechConfirmed(4.3, quiet, loud=False, room_talks=True))
    assert of(m.handle(UtteranceEnded(5.0, quiet, room_talks=True)), CommitTurn)


def test_among_people_talking_speech_taken_for_theirs_still_has_its_words_checked_for_a_stop_at_its_pause():
    """Taken for other people's as the reply began, it is speech over the reply: "Stop." in it still stops it."""
    m = commanding()
    turn = went_on_as_the_reply_began(m)
    quiet = voice_at(-34, 0.8, started_at=2.7)
    m.handle(SpeechConfirmed(3.5, quiet, loud=False, room_talks=True))
    (hear,) = of(m.handle(SpeechPaused(3.7, quiet, kept=True)), HearInterjection)
    assert of(m.handle(InterjectionHeard(4.0, turn, hear.pause, "Stop.")), StopTurn)[0].reason == "barge-in"


def test_among_people_talking_speech_taken_for_theirs_that_the_user_goes_on_in_goes_on_with_the_request():
    """Their syllables opened it, the user's own words came in it before its end: it is the request going on."""
    m = judging()
    turn = went_on_as_the_reply_began(m)
    m.handle(SpeechConfirmed(3.5, voice_at(-34, 0.8, started_at=2.7), loud=False, room_talks=True))
    assert m.route(turn) is Route.DELIVER  # (the reply plays on meanwhile)
    whole = Speech(voice_at(-34, 0.8, 2.7).pcm + voice_at(-26, 1.0, 3.5).pcm, started_at=2.7, ended_at=4.5)
    actions = m.handle(UtteranceEnded(4.6, whole, room_talks=True))
    assert of(actions, StopTurn) == [StopTurn(turn, EXTENDED, audible=False, forget=True)]
    (start,) = of(actions, StartTurn)
    assert start.speech == joined(REQUEST, whole)


def test_among_people_talking_speech_begun_as_a_short_reply_began_and_ended_after_it_is_held_to_its_level():
    """Begun within the grace, the reply over before it was confirmed or ended: still judged against the request."""
    for under_db, a_turn in ((8, False), (2, True)):
        m = judging()
        turn = went_on_as_the_reply_began(m)
        m.handle(ReplyComplete(2.8, turn))
        m.handle(PlaybackDone(3.0, turn))
        ended = m.handle(UtteranceEnded(3.4, voice_at(-26 - under_db, 0.6, started_at=2.7), room_talks=True))
        assert bool(of(ended, CommitTurn)) is a_turn, under_db


def test_among_people_talking_a_stop_then_a_short_request_under_the_requests_level_is_a_turn():
    """"Stop, why?": the words stopped the reply as the user's; what they ask is a turn, confirmed or not."""
    m = commanding()
    turn = spoken_turn(m, speech=REQUEST)
    m.handle(AudioSent(2.5, turn, 3.0))
    m.handle(SpeechStarted(3.5))
    quiet = voice_at(-34, 0.4, started_at=3.5)
    (hear,) = of(m.handle(SpeechPaused(3.9, quiet, kept=False)), HearInterjection)
    assert of(m.handle(InterjectionHeard(4.2, turn, hear.pause, "Stop, why?")), StopTurn)[0].reason == "barge-in"
    (start,) = of(m.handle(UtteranceEnded(4.5, quiet, room_talks=True)), StartTurn)
    assert start.stopped_reply


FIRST = Speech(b"\1\0" * 1600, started_at=0.5, ended_at=2.0, samples=(8000, 40000, 34000))
THEN = Speech(b"\2\0" * 800, started_at=2.6, ended_at=3.1, samples=(41600, 52000, 50000))


def test_a_short_continuation_before_the_reply_joins_the_request_even_unconfirmed():
    """"What is the capital of Canada?" ... "Keep it short." (under the barge-in confirmation): one request."""
    m = judging()
    turn = spoken_turn(m, speech=FIRST)
    m.handle(SpeechStarted(2.6))
    (judge,) = of(m.handle(SpeechPaused(3.2, THEN)), JudgeTurn)  # asked whether the continuation is finished
    assert m.handle(TurnJudged(3.25, judge.pause, 0.9)) == [EndUtterance()]
    actions = m.handle(UtteranceEnded(3.3, THEN))
    assert of(actions, StopTurn) == [StopTurn(turn, EXTENDED, audible=False, forget=True)]
    (start,) = of(actions, StartTurn)
    assert start.speech == joined(FIRST, THEN) and start.turn_id == turn + 1 and of(actions, CommitTurn)
    assert start.speech.pcm.startswith(FIRST.pcm) and start.speech.pcm.endswith(THEN.pcm)
    assert start.speech.samples == (8000, 52000, 50000)
    assert len(start.speech.pcm) == len(FIRST.pcm) + 2 * 1600 + len(THEN.pcm)  # the 0.1 s gap between them


def test_text_typed_during_a_backchannel_is_a_request_of_its_own():
    m = judging()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    assert sent(m.handle(TextTyped(3.6, "and Germany?"))) == ["text_queued"]
    actions = m.handle(UtteranceEnded(4.0, SPEECH))  # the speech was a "mm-hmm": the text must not be stranded
    (start,) = of(actions, StartTurn)
    assert start.text == "and Germany?" and start.speech is None
    assert of(actions, StopTurn) == [StopTurn(turn, "new turn", audible=True)]


def test_a_reset_forgets_a_withdrawn_request():
    m = judging()
    spoken_turn(m)
    m.handle(SpeechStarted(2.6))
    m.handle(SpeechConfirmed(3.0))
    assert m.speech.carrying is not None
    actions = m.handle(Interrupted(3.2, "reset"))
    assert CarrySpeech(None) in actions and m.speech.carrying is None


def test_the_reply_is_held_while_the_user_may_be_going_on_and_released_if_it_was_a_cough():
    m = judging()
    turn = spoken_turn(m)
    assert m.route(turn) is Route.DELIVER
    m.handle(SpeechStarted(2.5))  # before any reply audio: perhaps the rest of the request
    assert m.route(turn) is Route.HOLD  # its first words must not play over the user
    actions = m.handle(SpeechDropped(2.7))
    assert ReleaseHeld() in actions and m.route(turn) is Route.DELIVER


def test_a_held_reply_is_withdrawn_unheard_when_the_request_goes_on():
    m = judging()
    turn = spoken_turn(m)
    m.handle(SpeechStarted(2.5))
    assert m.route(turn) is Route.HOLD
    actions = m.handle(SpeechConfirmed(3.0))
    assert "stop_tts" not in sent(actions) and of(actions, StopTurn)[0].reason == EXTENDED
    assert m.route(turn) is Route.DROP


def test_a_reply_already_heard_is_not_held_by_speech_over_it():
    m = judging()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    assert m.route(turn) is Route.DELIVER  # ducked, not held: the user is answering it, or interrupting


# --- one-word commands over the reply: heard by ASR at the first pause ----------------------------------------
STOP = ("stop", "wait", "hold on", "no", "never mind")


def commanding() -> TurnTaking:
    return TurnTaking(idle_timeout_s=60, now=0.0, rules=TurnRules(judge=True, extend=True, extend_grace_s=0.3,
                                                                  stop_phrases=STOP))


@pytest.mark.parametrize("text", ["Stop.", "Stop!", "Wait, wait.", "No.", "Hold on please.", "Oh, never mind.",
                                  "Wait a second.", "Stop it please.", "No, stop."])
def test_a_few_words_that_ask_to_stop_are_a_command(text):
    assert is_stop_command(text, STOP)


@pytest.mark.parametrize("text", ["Mm-hmm.", "Yeah.", "Uh-huh.", "Okay.", "Right.", "", "Nope, I know.",
                                  "Holding on to that thought is not easy.", "Stopwatch.",
                                  "I do not want you to stop talking about it."])
def test_backchannels_other_words_and_sentences_are_not(text):
    assert not is_stop_command(text, STOP)


@pytest.mark.parametrize(("text", "only"), [("Stop.", True), ("Oh, stop it please.", True), ("Wait a second.", True),
                                            ("Hold on please.", True), ("Stop, do cats bark?", False),
                                            ("Wait, what's that?", False), ("No, stop. Why?", False),
                                            ("Hold on, hold on.", True), ("Stop, that\u2019s it.", True)])
def test_a_stop_command_asks_for_nothing_more_only_with_nothing_but_fillers_beside_it(text, only):
    """Over the reply any of these stops it; the speech is answered unless it was only the command."""
    assert is_stop_command(text, STOP) and only_asks_to_stop(text, STOP) is only


def test_short_speech_over_the_reply_is_heard_at_its_pause_and_stop_interrupts():
    m = commanding()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    actions = m.handle(SpeechPaused(3.9, SPEECH))
    (hear,) = of(actions, HearInterjection)
    assert hear.turn_id == turn and hear.speech == SPEECH and "unduck" not in sent(actions)  # ducked till heard
    stopped = m.handle(InterjectionHeard(4.2, turn, hear.pause, "Stop."))
    assert sent(stopped)[:2] == ["stop_tts", "turn_cancelled"] and of(stopped, StopTurn)[0].reason == "barge-in"
    assert m.phase is Phase.LISTENING and m.route(turn) is Route.DROP
    ended = m.handle(UtteranceEnded(5.1, SPEECH))  # "Stop." asked for nothing more: no turn of its own
    assert sent(ended) == ["vad"] and not of(ended, StartTurn) and m.active_turn is None


def test_a_stop_said_in_one_breath_with_a_request_stops_the_reply_and_is_a_turn():
    m = commanding()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    (hear,) = of(m.handle(SpeechPaused(3.9, SPEECH)), HearInterjection)
    stopped = m.handle(InterjectionHeard(4.2, turn, hear.pause, "Stop, do cats bark?"))
    assert of(stopped, StopTurn)[0].reason == "barge-in"
    (start,) = of(m.handle(UtteranceEnded(5.1, SPEECH)), StartTurn)  # (the words go to the LLM worker to answer)
    assert start.speech == SPEECH and start.stopped_reply


def test_a_stop_that_goes_on_into_a_request_is_a_turn():
    m = commanding()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    (hear,) = of(m.handle(SpeechPaused(3.9, SPEECH)), HearInterjection)
    m.handle(InterjectionHeard(4.2, turn, hear.pause, "Stop."))
    m.handle(SpeechResumed(4.3))  # "Stop. What about Spain?" (or "No, stop.": the LLM worker tells them apart)
    (start,) = of(m.handle(UtteranceEnded(5.5, LONGER)), StartTurn)
    assert start.speech == LONGER and m.phase is Phase.THINKING and start.stopped_reply
    m.handle(TurnUnanswered(5.9, start.turn_id, "stop command"))
    m.handle(SpeechStarted(7.0))
    (later,) = of(m.handle(UtteranceEnded(8.0, SPEECH)), StartTurn)
    assert not later.stopped_reply  # the next request is an ordinary one


def test_a_stop_heard_after_the_speech_went_on_stops_the_reply_and_the_rest_is_a_turn():
    """"Wait, tell me about dogs instead.": "Wait" is heard at its pause while the rest is being said."""
    m = commanding()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    (hear,) = of(m.handle(SpeechPaused(3.9, SPEECH)), HearInterjection)
    m.handle(SpeechResumed(4.0))
    assert of(m.handle(InterjectionHeard(4.2, turn, hear.pause, "Wait.")), StopTurn)
    m.handle(SpeechConfirmed(4.5))
    (start,) = of(m.handle(UtteranceEnded(5.5, LONGER)), StartTurn)
    assert start.speech == LONGER and start.stopped_reply  # "No, stop." too: the LLM worker reads its words


def test_a_backchannel_heard_at_the_pause_unducks_and_the_reply_goes_on():
    m = commanding()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    (hear,) = of(m.handle(SpeechPaused(3.9, SPEECH)), HearInterjection)
    assert sent(m.handle(InterjectionHeard(4.2, turn, hear.pause, "Mm-hmm."))) == ["unduck"]
    assert m.phase is Phase.SPEAKING and m.route(turn) is Route.DELIVER


def test_words_heard_too_late_change_nothing():
    """The speech went on to a later pause, or the reply ended meanwhile: only the latest check of the live turn
    counts."""
    m = commanding()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    (first,) = of(m.handle(SpeechPaused(3.9, SPEECH)), HearInterjection)
    m.handle(SpeechResumed(4.0))
    (second,) = of(m.handle(SpeechPaused(4.4, LONGER)), HearInterjection)
    assert second.pause > first.pause
    assert m.handle(InterjectionHeard(4.5, turn, first.pause, "Stop.")) == []
    m.handle(ReplyComplete(4.6, turn))  # played out: the turn is over
    assert not of(m.handle(InterjectionHeard(4.7, turn, second.pause, "Stop.")), StopTurn)


def test_confirmed_speech_and_speech_before_the_reply_are_not_sent_for_a_check():
    m = commanding()
    speaking(m)
    m.handle(SpeechStarted(3.5))
    m.handle(SpeechConfirmed(4.2))  # long speech over the reply: it interrupted already
    assert not of(m.handle(SpeechPaused(4.5, SPEECH)), HearInterjection)
    m = commanding()
    spoken_turn(m)  # thinking, nothing heard yet: speech now goes on with the request (judged, not checked)
    m.handle(SpeechStarted(2.5))
    actions = m.handle(SpeechPaused(2.9, SPEECH))
    assert of(actions, JudgeTurn) and not of(actions, HearInterjection)


def test_a_word_too_short_to_keep_is_checked_over_the_reply_and_then_dropped_its_stop_still_stops():
    """"Wait," 190 ms voiced in a talking room: its pause over the reply sends its words for a check; the speech is
    dropped (too short to keep) before they come, and "Wait." still stops the reply."""
    m = commanding()
    turn = speaking(m)
    m.handle(SpeechStarted(3.5))
    (hear,) = of(m.handle(SpeechPaused(3.9, SPEECH, kept=False)), HearInterjection)
    m.handle(SpeechDropped(5.4))
    stopped = m.handle(InterjectionHeard(5.5, turn, hear.pause, "Wait."))
    assert of(stopped, StopTurn)[0].reason == "barge-in" and m.phase is Phase.LISTENING


def test_a_word_too_short_to_keep_neither_goes_to_the_model_nor_starts_a_turn():
    """Before any of the reply was heard a pause asks the end-of-turn model, whose end would drop such a word ("No,
    | I meant Spain." lost "No,"); with nothing committed it would start a speculative turn on a burst."""
    m = commanding()
    spoken_turn(m)
    m.handle(SpeechStarted(2.5))
    assert m.handle(SpeechPaused(2.9, SPEECH, kept=False)) == []
    m = machine()
    m.handle(SpeechStarted(0.5))
    assert m.handle(SpeechPaused(0.9, SPEECH, kept=False)) == []


def test_speech_that_interrupted_a_reply_is_answered_only_if_it_is_more_than_a_command():
    """"Wait, stop." is long enough to interrupt by its duration alone: its turn carries the stop phrases, and the
    LLM worker answers nothing if the words are only a command."""
    m = commanding()
    speaking(m)
    m.handle(SpeechStarted(3.5))
    assert of(m.handle(SpeechConfirmed(4.2)), StopTurn)
    (start,) = of(m.handle(UtteranceEnded(5.5, LONGER)), StartTurn)
    assert start.stopped_reply


def stopped_then_going_on(m: TurnTaking) -> int:
    """"Wait, stop." interrupts the reply and ends at its pause as a turn of its own: the turn it made."""
    speaking(m)
    m.handle(SpeechStarted(3.5))
    m.handle(SpeechConfirmed(4.2))
    (start,) = of(m.handle(UtteranceEnded(5.0, SPEECH)), StartTurn)
    assert start.stopped_reply
    m.handle(SpeechStarted(5.3))  # ... "What is two plus two?", before any reply to "Wait, stop." is heard
    return start.turn_id


@pytest.mark.parametrize("went_on", ["confirmed", "short", "cough"])
def test_a_request_that_goes_on_from_a_stop_command_is_read_after_the_command(went_on):
    """The user stopped the reply, paused, and went on with their question: the request it becomes stopped the reply
    too (its words are read after the command, as if said in one breath), however the going on is heard."""
    m = commanding()
    stopped = stopped_then_going_on(m)
    if went_on == "confirmed":  # the request is withdrawn and carried into the speech going on
        assert of(m.handle(SpeechConfirmed(5.7)), StopTurn)[0].reason == EXTENDED
        (start,) = of(m.handle(UtteranceEnded(6.5, LONGER)), StartTurn)
    elif went_on == "short":  # too short to confirm: joined to the request as it ends
        (start,) = of(m.handle(UtteranceEnded(5.6, SPEECH)), StartTurn)
    else:  # carried, then dropped as a cough: the request goes as it was
        m.handle(SpeechConfirmed(5.7))
        m.handle(SpeechStarted(5.9))
        (start,) = of(m.handle(SpeechDropped(6.1)), StartTurn)
    assert start.turn_id > stopped and start.stopped_reply
    m.handle(TurnUnanswered(7.0, start.turn_id, "no speech recognised"))
    m.handle(SpeechStarted(8.0))
    m.handle(SpeechConfirmed(8.4))
    (later,) = of(m.handle(UtteranceEnded(9.0, SPEECH)), StartTurn)
    assert not later.stopped_reply  # the next request is an ordinary one


def test_typed_text_waiting_for_the_users_speech_is_capped():
    """A client that starts speaking and then floods text_input must not grow the waiting text without bound."""
    m = TurnTaking(idle_timeout_s=60, now=0.0, rules=TurnRules(max_text_chars=100))
    m.handle(SpeechStarted(0.5))
    assert sent(m.handle(TextTyped(0.55, "c" * 100))) == ["text_queued"]  # one text of the full size is fine
    m.pending_text = ""
    assert sent(m.handle(TextTyped(0.6, "a" * 60))) == ["text_queued"]
    (error,) = m.handle(TextTyped(0.7, "b" * 60))
    assert isinstance(error, Send) and isinstance(error.event, ErrorNotice) and error.event.code == "text_too_long"
    assert m.pending_text == "a" * 60


def test_speech_that_keeps_pausing_is_speculated_on_less_and_less():
    """A client pausing every 0.3 s used to start an ASR run and a prefill at every pause, starving the others:
    after speculative turns that the speech went on from, the next waits 0.5, 1, 2 s...; a new utterance starts
    afresh."""
    m = TurnTaking(idle_timeout_s=60, now=0.0)
    m.handle(SpeechStarted(0.1))
    started = []
    t = 0.5
    while t < 6.0:
        speech = Speech(b"\0\0" * 1600, started_at=0.1, ended_at=t - 0.1)
        started += [t for _ in of(m.handle(SpeechPaused(t, speech)), StartTurn)]
        m.handle(SpeechResumed(t + 0.15))
        t += 0.3
    assert started[:2] == [0.5, pytest.approx(1.1)]  # the first, then one 0.5 s later
    gaps = [b - a for a, b in zip(started, started[1:], strict=False)]
    assert all(later >= earlier for earlier, later in zip(gaps, gaps[1:], strict=False)) and len(started) <= 5
    m.handle(UtteranceEnded(6.2, SPEECH))
    m.handle(Interrupted(6.3, "reset"))  # (its turn ended)
    m.handle(SpeechStarted(8.0))  # the next utterance: speculated on at its first pause
    assert of(m.handle(SpeechPaused(9.0, Speech(b"\0\0" * 1600, started_at=8.0, ended_at=8.9))), StartTurn)


def test_long_speech_is_not_speculated_on():
    m = TurnTaking(idle_timeout_s=60, now=0.0)
    m.handle(SpeechStarted(0.1))
    long = Speech(b"\0\0" * 1600, started_at=0.1, ended_at=12.0)
    assert not of(m.handle(SpeechPaused(12.2, long)), StartTurn)


def test_a_turn_that_was_the_replys_own_echo_is_cancelled_and_forgotten():
    """A speakerphone's echo transcribed as a question: the turn goes, and the workers keep nothing of it."""
    m = machine()
    turn = speaking(m)
    actions = m.handle(Interrupted(4.0, ECHOED))
    assert of(actions, StopTurn) == [StopTurn(turn, ECHOED, audible=True, forget=True)]
    assert [a.event for a in of(actions, Send) if isinstance(a.event, StopSpeaking)]  # its own words stop


def test_the_echos_own_turn_stops_no_audio_the_reply_it_echoed_may_still_be_ending():
    """The reply's last words heard back after its turn ended make a turn of their own, dropped as the echo once
    their words are in: a stop_tts then cut the tail of the reply the client was still playing."""
    m = machine()
    m.handle(PlaybackDone(5.0, speaking(m)))
    echo = spoken_turn(m, now=5.6)
    actions = m.handle(Interrupted(6.0, ECHOED))
    assert of(actions, StopTurn) == [StopTurn(echo, ECHOED, audible=True, forget=True)]
    assert not [a for a in of(actions, Send) if isinstance(a.event, StopSpeaking)]


@pytest.mark.parametrize(("heard", "echo"), [
    ("The capital of France is Paris.", True),
    ("capital of frans is paris", True),  # misheard in part
    ("It is lovely in spring", True),  # the end of the reply
    ("What is the capital of France?", False),  # the reply's words in a question's order
    ("Paris is the capital of France.", False),
    ("Paris?", False),  # one word
    ("What about Germany?", False),
])
def test_a_transcript_is_the_replys_echo_when_it_says_the_replys_words_in_their_order(heard, echo):
    assert echoes(heard, ("The capital of France is Paris. It is lovely in spring.",)) is echo


@pytest.mark.parametrize(("heard", "over_echo", "echo"), [
    ("The capital of France is still there.", True, True),  # its opening as it ran, the cut-off tail misheard
    ("The capital of France is. It's okay.", True, True),
    ("Capital of France is still there.", True, False),  # not as the reply opened
    ("The capital of France is still there.", False, False),  # speech not over the echo: may be a correction
    ("The capital of France? Are you sure about that?", True, False),  # the opening run is under half of it
    ("The capital of Spain, please.", True, False),  # three words running
])
def test_speech_over_the_echo_that_opens_as_the_reply_did_is_its_echo(heard, over_echo, echo):
    assert echoes(heard, ("The capital of France is Paris. It is lovely in spring.",), over_echo) is echo


@pytest.mark.parametrize(("heard", "reply", "echo"), [
    ("Water is flat.", "Water is wet.", True),  # a reply shorter than the opening run: all but its last word
    ("Is water wet?", "Water is wet.", False),
    ("Water is good for you?", "Water is wet.", False),  # the opening run is under half of it
    ("Seven days, and how many hours?", "Seven days.", False),
    ("Water is what?", "Water is wet.", False),  # a follow-up question reuses a statement's opening
    ("Paris is the biggest city too?", "Paris is the capital.", False),
    ("Good morning to you too.", "Good morning! How are you today?", False),  # two words of a longer reply
])
def test_over_the_echo_a_short_replys_opening_is_all_its_words_but_the_last(heard, reply, echo):
    assert echoes(heard, (reply,), over_echo=True) is echo


@pytest.mark.parametrize(("heard", "reply", "echo"), [
    ("Air 12, once in a year.", "There are 12 months in a year.", True),  # its start taken by the canceller
    ("I want to you later.", "Bye! Talk to you later.", True),
    ("And how many days in a year?", "There are 12 months in a year.", False),  # the closing run under half of it
    ("See you later.", "Bye! Talk to you later.", False),  # two words running
    ("How many days in a year?", "There are 12 months in a year.", False),  # a follow-up question reuses its end
    ("What time in the morning?", "The store opens at 9 in the morning.", False),
    ("Is it cheaper in the spring?", "I'd recommend visiting in the spring.", False),
    ("Do you want to take it?", "Do you want to hear a joke about cats?", True),  # (a question's echo is too)
])
def test_over_the_echo_speech_that_ends_as_the_reply_did_is_its_echo(heard, reply, echo):
    assert echoes(heard, (reply,), over_echo=True) is echo
    assert not echoes(heard, (reply,), over_echo=False)  # (elsewhere: the user's own words)


@pytest.mark.parametrize(("heard", "reply", "alike", "by_words"), [
    ("Yes, there is room.", "Yes, the Earth is round.", True, False),  # the whole echo misheard
    ("Sorry, I didn't expect", "Sorry, I didn't catch that. Could you say it again?", True, True),
    ("Wait, stop. What", "Yes, the Earth is round.", False, False),
    ("Great stop.", "A rainbow is a great sight.", False, False),  # a stop phrase the reply lacks: the user's
    ("Eric Loh.", "A rainbow is a great sight.", False, False),
])
def test_speech_quieter_than_the_user_that_sounds_like_the_reply_is_its_echo(heard, reply, alike, by_words):
    """Speech that held the reply, never at the user's own level: Whisper may hear all of an echo wrong, but alike
    letter by letter; without `alike` (the user's own voice) only the words count ("See you later." after "Bye!
    Talk to you later." is the user's)."""
    assert echoes(heard, (reply,), over_echo=True, phrases=STOP, alike=True) is alike
    assert echoes(heard, (reply,), over_echo=True, phrases=STOP) is by_words
    assert not echoes("See you later.", ("Bye! Talk to you later.",), over_echo=True, phrases=STOP)


def test_a_stop_phrase_the_reply_lacks_makes_speech_the_users_even_in_the_replys_words():
    reply = "Water your house plant every two to three days."
    assert echoes("Water your house plant every", (reply,), over_echo=True, phrases=STOP)
    assert not echoes("Wait, water your house plant every", (reply,), over_echo=True, phrases=STOP)
    assert echoes("Stop and water your house plant", ("Stop and water your house plant weekly.",), phrases=STOP)


def test_a_quick_answer_that_reuses_the_replys_words_is_not_its_echo():
    assert not echoes("Set a timer for five, please.", ("Should I set a timer for ten minutes?",), over_echo=True)


# --- over a speaker's echo: speech long enough to interrupt holds the reply until its words are heard ------------
def over_a_speaker() -> TurnTaking:
    return TurnTaking(idle_timeout_s=60, now=0.0, rules=TurnRules(judge=True, extend=True, stop_phrases=STOP,
                                                                  hold_for_words_s=1.2))


def held_for_words(m: TurnTaking) -> tuple[int, HearInterjection]:
    """A reply playing, and speech over it confirmed: the turn and the check of its words."""
    turn = speaking(m)
    assert sent(m.handle(SpeechStarted(3.5))) == ["vad", "duck"]
    actions = m.handle(SpeechConfirmed(4.2, SPEECH, loud=False))
    (hear,) = of(actions, HearInterjection)
    assert hear.turn_id == turn and hear.speech == SPEECH
    assert of(actions, EndPauseAfter) == [EndPauseAfter(hear.pause, 1.2)]
    assert not of(actions, StopTurn) and "stop_tts" not in sent(actions)  # held, not stopped
    assert m.route(turn) is Route.HOLD and m.phase is Phase.SPEAKING
    return turn, hear


def test_speech_over_a_speakers_echo_that_is_the_replys_own_echo_lets_the_reply_go_on_and_makes_no_turn():
    """The canceller let some of the reply's echo through, long enough to pass for an interruption: its words are
    the reply's, so the reply goes on where it was held, and the speech is nobody's turn."""
    m = over_a_speaker()
    turn, hear = held_for_words(m)
    went_on = m.handle(InterjectionHeard(4.5, turn, hear.pause, "your house plant every", echo=True))
    assert ReleaseHeld() in went_on and "unduck" in sent(went_on) and not of(went_on, StopTurn)
    assert m.route(turn) is Route.DELIVER
    # ...and ended where it is: the user who speaks next is heard afresh (and may interrupt)
    assert of(went_on, EndUtterance) == [EndUtterance(at_pause=False)]
    ended = m.handle(UtteranceEnded(4.6, SPEECH))
    assert not of(ended, StartTurn) and m.active_turn == turn and m.phase is Phase.SPEAKING


@pytest.mark.parametrize("how", ["words", "too late", "nothing heard"])
def test_speech_over_a_speakers_echo_in_the_users_own_words_or_not_heard_in_time_interrupts(how):
    m = over_a_speaker()
    turn, hear = held_for_words(m)
    if how == "words":
        stopped = m.handle(InterjectionHeard(4.5, turn, hear.pause, "Wait, stop. What", echo=False))
    elif how == "nothing heard":  # (or ASR failed: the user must not wait on it to stop the reply)
        stopped = m.handle(InterjectionHeard(4.5, turn, hear.pause, "", echo=False))
    else:  # (ASR busy or gone)
        assert m.handle(PauseWaited(5.4, hear.pause - 1)) == []
        stopped = m.handle(PauseWaited(5.4, hear.pause))
    assert sent(stopped)[:2] == ["stop_tts", "turn_cancelled"] and of(stopped, StopTurn)[0].reason == "barge-in"
    assert m.route(turn) is Route.DROP
    assert m.handle(InterjectionHeard(5.5, turn, hear.pause, "late words", echo=True)) == []  # decided already
    (start,) = of(m.handle(UtteranceEnded(6.0, LONGER)), StartTurn)
    assert start.stopped_reply and start.speech == LONGER


@pytest.mark.parametrize("echo", [True, False])
def test_speech_that_ends_before_its_words_are_heard_waits_for_them(echo):
    """Held, the reply's echo stops coming back, and the echo's "speech" ends before ASR has heard it: its words
    still decide between nothing and an interruption with a turn."""
    m = over_a_speaker()
    turn, hear = held_for_words(m)
    ended = m.handle(UtteranceEnded(4.4, SPEECH))
    assert sent(ended) == ["vad"] and not of(ended, StartTurn) and m.route(turn) is Route.HOLD
    decided = m.handle(InterjectionHeard(4.6, turn, hear.pause, "the planet Mars" if echo else "Who are you?", echo))
    if echo:
        assert ReleaseHeld() in decided and not of(decided, StartTurn) and m.route(turn) is Route.DELIVER
    else:
        assert of(decided, StopTurn)[0].reason == "barge-in"
        (start,) = of(decided, StartTurn)
        assert start.speech == SPEECH and start.stopped_reply and m.phase is Phase.THINKING


def test_a_reply_played_out_while_held_ends_once_its_echo_is_heard():
    """Held in its last moments: its playback's end comes while the words are heard, and the turn ends with them."""
    m = over_a_speaker()
    turn, hear = held_for_words(m)
    assert m.handle(ReplyComplete(4.3, turn)) == []  # (held: nothing more went out)
    assert m.handle(PlaybackDone(4.4, turn)) == []
    done = m.handle(InterjectionHeard(4.6, turn, hear.pause, "your house plant", echo=True))
    assert of(done, TurnDone) == [TurnDone(turn, "done")] and m.phase is Phase.LISTENING


def test_speech_while_an_ended_ones_words_are_heard_gets_no_check_of_its_own():
    """One check at a time: quiet speech confirmed while the last one's words are still awaited stops the reply."""
    m = over_a_speaker()
    turn, hear = held_for_words(m)
    m.handle(UtteranceEnded(4.4, SPEECH))
    m.handle(SpeechStarted(4.6))
    stopped = m.handle(SpeechConfirmed(5.2, SPEECH, loud=False))
    assert of(stopped, StopTurn)[0].reason == "barge-in" and not of(stopped, HearInterjection)


def test_a_check_left_waiting_by_a_turn_that_ended_otherwise_holds_no_later_reply_back():
    """Speech ended while its words were heard, and its turn then ended another way (a reset): the next reply's
    quiet speech is held for its own words as any would be."""
    m = over_a_speaker()
    turn, hear = held_for_words(m)
    m.handle(UtteranceEnded(4.4, SPEECH))
    m.handle(Interrupted(4.5, "reset"))
    later, check = held_for_words(m)
    assert later != turn and check.pause != hear.pause


def test_speech_begun_while_a_request_was_heard_goes_on_with_it():
    """The user's words held the reply and ended; they went on speaking before ASR said they were theirs: what
    follows goes on with the request they made, not an interruption of it."""
    m = over_a_speaker()
    turn, hear = held_for_words(m)
    m.handle(UtteranceEnded(4.4, SPEECH))
    m.handle(SpeechStarted(4.5))
    (start,) = of(m.handle(InterjectionHeard(4.6, turn, hear.pause, "What is the time", echo=False)), StartTurn)
    went_on = m.handle(SpeechConfirmed(5.0, SPEECH, loud=True))
    assert of(went_on, StopTurn) == [StopTurn(start.turn_id, EXTENDED, audible=False, forget=True)]


def test_a_check_outlived_by_its_reply_holds_no_later_turn():
    m = over_a_speaker()
    turn, hear = held_for_words(m)
    m.handle(Interrupted(4.3, "reset"))  # the turn ended otherwise meanwhile
    m.handle(UtteranceEnded(4.4, SPEECH))
    nxt = speaking(m)
    assert nxt != turn and m.route(nxt) is Route.DELIVER
    assert m.handle(InterjectionHeard(4.6, turn, hear.pause, "", echo=True)) == []


@pytest.mark.parametrize("speaker", [True, False])
def test_speech_at_the_users_own_level_or_without_a_speakers_echo_stops_the_reply_at_once(speaker):
    """Over a speaker the user's own voice is louder than the reply's echo: their interruption waits for nothing.
    Without a speaker's echo, no speech waits for its words."""
    m = over_a_speaker() if speaker else commanding()
    speaking(m)
    m.handle(SpeechStarted(3.5))
    stopped = m.handle(SpeechConfirmed(4.2, SPEECH, loud=speaker))
    assert of(stopped, StopTurn)[0].reason == "barge-in" and not of(stopped, HearInterjection)
