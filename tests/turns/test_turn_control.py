"""The turn controller on a session's real mailbox thread, with a recording client and workers (the machine's
actions are what is checked; no model is loaded: the tests post the listener's events themselves, and no worker
runs).

The ordering cases are the ones a re-entrant design got wrong: a speculative turn's held outputs released while
its commit's actions were still being carried out put "speaking" before "thinking", or "listening" before
"thinking", on the wire; the page then showed "thinking..." for good.
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest

from vita import messages
from vita.client_events import ClientEvent
from vita.config import Config
from vita.hearing.silero import SileroVad
from vita.hearing.vad import VadSegmenter
from vita.ops.metrics import FrontMetrics
from vita.ops.turn_log import TurnLogger
from vita.turns.ears import Ears
from vita.turns.listener import SpeechListener
from vita.turns.sessions import Session, SessionRegistry
from vita.turns.turn_control import TurnController
from vita.turns.turn_events import (
    Speech,
    SpeechConfirmed,
    SpeechDropped,
    SpeechPaused,
    SpeechStarted,
    Tick,
    UtteranceEnded,
)
from vita.web.socketio.wire import socketio_event

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

PCM = np.zeros(2400, np.int16).tobytes()  # 50 ms of reply audio at 24 kHz


class Wire:
    """What the controller sends: to the client (emit) and to the workers (put)."""

    def __init__(self, put_ok: bool = True):
        self.sent: list[tuple[str, object]] = []
        self.puts: list[tuple[str, object]] = []
        self.put_ok = put_ok
        self.changed = threading.Condition()

    def emit(self, event, payload=None, to=None):
        """What the controller tells a client, as a Socket.IO client reads it (the disconnects too)."""
        if isinstance(event, ClientEvent):
            event, payload = socketio_event(event)
        with self.changed:
            self.sent.append((event, payload))
            self.changed.notify_all()

    def put(self, queue_name, message):
        with self.changed:
            self.puts.append((queue_name, message))
            self.changed.notify_all()
        return self.put_ok

    def wait_for(self, predicate, timeout: float = 5.0) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def states(self) -> list[str]:
        return [p["state"] for e, p in self.sent if e == "state"]


def controller(wire: Wire, ready: bool = True, line: SessionRegistry | None = None, **limits) -> TurnController:
    config = Config()
    for key, value in limits.items():
        setattr(config.limits, key, value)
    config.server.timeout_when_waiting = 0.5
    return TurnController(config, deaf_ears(config), wire.emit, wire.put, lambda sid: wire.emit("__disconnect__", sid),
                          lambda: ready, FrontMetrics(lambda: 1, dict, lambda: 0), TurnLogger(None, 1),
                          line=line)


class SilentProbe(SileroVad):
    """A VAD that hears no speech (a fake for this unit test of the adapter: speech events are posted directly)."""

    def __init__(self):
        self.reset()

    def probability(self, chunk) -> float:
        return 0.0


def deaf_ears(config: Config) -> Ears:
    return Ears(lambda: SpeechListener(VadSegmenter.from_config(config.vad, SilentProbe(), config.turn)), None)


class PageChannel:
    """A Socket.IO client's door as the turn machine asks it (a fake for this unit test of the adapter: what the
    session is told goes through the controller's `tell`, here the Wire)."""

    door = "socketio"

    def tell(self, event):
        raise AssertionError("the controller tells a session through the front's tell")

    def close(self):
        pass

    def hears_echo(self, turn):
        return turn.speaker_echo_page

    def track(self):
        return None


def session(turns: TurnController) -> Session:
    s = Session("s1", channel=PageChannel())
    turns.attach(s)
    return s


@contextlib.contextmanager
def live(wire: Wire, ready: bool = True):
    """A controller and one attached session; both ended on the way out (the session's thread, the model's)."""
    turns = controller(wire, ready=ready)
    s = session(turns)
    try:
        yield turns, s
    finally:
        turns.close()  # first: an end that a full queue refuses is then not retried (the test is over)
        turns.detach(s)


def spoken(turns: TurnController, s: Session) -> None:
    """The user says something and stops: a committed spoken turn."""
    turns.post(s, SpeechStarted(time.monotonic()))
    turns.post(s, UtteranceEnded(time.monotonic(), speech()))


def speech() -> Speech:
    now = time.monotonic()
    return Speech(np.zeros(16000, np.int16).tobytes(), now - 1.0, now - 0.1)


def speculative_turn(turns: TurnController, s: Session, outputs: list) -> None:
    """The user speaks, pauses (a speculative turn starts), its outputs arrive (held), then speech ends."""
    now, heard = time.monotonic(), speech()
    turns.post(s, SpeechStarted(now))
    turns.post(s, SpeechPaused(now, heard))
    for output in outputs:
        s.actor.post(output)
    turns.post(s, UtteranceEnded(now, heard))


def test_held_audio_of_a_committed_speculative_turn_goes_out_after_thinking():
    wire = Wire()
    with live(wire) as (turns, s):
        speculative_turn(turns, s, [messages.TtsChunk("s1", 1, 0, PCM)])
        assert wire.wait_for(lambda: any(e == "audio" for e, _ in wire.sent))
        assert wire.states() == ["thinking", "speaking"]
        events = [e for e, _ in wire.sent]
        assert events.index("turn") < events.index("audio")  # the client hears of the turn before its audio
        assert not s.handling


def test_a_held_reply_is_counted_once_among_what_the_assistant_said():
    """Held outputs come through again when released: the reply's words (its echo's reference) are taken once."""
    wire = Wire()
    with live(wire) as (turns, s):
        speculative_turn(turns, s, [messages.ReplyText("s1", 1, "Paris. "),
                                    messages.ReplyText("s1", 1, "", done=True, text="Paris."),
                                    messages.TtsChunk("s1", 1, 0, PCM)])
        assert wire.wait_for(lambda: any(e == "audio" for e, _ in wire.sent))
        assert s.actor.call_and_wait(lambda: None, 5)
        assert list(s.said) == ["Paris."] and s.replying == (1, "Paris. ")


def test_a_speculative_turn_that_heard_nothing_goes_thinking_then_listening():
    wire = Wire()
    with live(wire) as (turns, s):
        speculative_turn(turns, s, [messages.TurnEnded("s1", 1, "llm", reason="no speech")])
        assert wire.wait_for(lambda: len(wire.states()) >= 2)
        assert wire.states() == ["thinking", "listening"]
        assert s.turns.active_turn is None


def test_a_request_the_workers_cannot_take_ends_the_turn_in_order():
    wire = Wire(put_ok=False)  # the requests queue is full: the turn goes unanswered, with an error
    with live(wire) as (turns, s):
        spoken(turns, s)
        assert wire.wait_for(lambda: wire.states()[-1:] == ["listening"])
        assert wire.states() == ["thinking", "listening"]
        assert [p["code"] for e, p in wire.sent if e == "error"] == ["server_busy"]


def test_a_lost_turn_end_is_cancelled_by_the_watchdog_and_the_session_listens_again():
    wire = Wire()
    with live(wire) as (turns, s):
        spoken(turns, s)
        s.actor.post(messages.TtsChunk("s1", 1, 0, PCM))  # some audio, then the end never comes
        assert wire.wait_for(lambda: "speaking" in wire.states())
        stall = s.turns.stall_s
        turns.post(s, Tick(time.monotonic() + stall + 1.0, True))  # the clock, moved past the stall limit
        assert wire.wait_for(lambda: wire.states()[-1:] == ["listening"])
        codes = [p["code"] for e, p in wire.sent if e == "error"]
        assert codes == ["turn_stalled"]
        cancels = [m for q, m in wire.puts if isinstance(m, messages.CancelTurn)]
        assert {q for q, m in wire.puts if isinstance(m, messages.CancelTurn)} == {"requests", "tts"}
        assert all(c.turn_id == 1 and c.reason == "stalled" for c in cancels)


def test_a_workers_news_of_the_turn_moves_the_watchdogs_clock():
    wire = Wire()
    with live(wire) as (turns, s):
        spoken(turns, s)
        assert wire.wait_for(lambda: "thinking" in wire.states())
        before = time.monotonic()  # after the commit
        s.actor.post(messages.Transcript("s1", 1, "What is the capital of France?"))  # a slow worker, at work
        assert wire.wait_for(lambda: any(e == "transcript" for e, _ in wire.sent))
        progress = s.turns.turn.progress_at
        assert progress >= before  # the clock counts from the news, not from the commit
        stall = s.turns.stall_s
        turns.post(s, Tick(progress + stall - 0.5, True))  # within the limit of the news: the turn goes on...
        s.actor.post(messages.Transcript("s1", 1, "What is the capital of France?"))  # (delivered: still its turn)
        assert wire.wait_for(lambda: sum(e == "transcript" for e, _ in wire.sent) == 2)
        turns.post(s, Tick(progress + stall + 0.5, True))  # ...and past it, with the worker silent: stalled
        assert wire.wait_for(lambda: wire.states()[-1:] == ["listening"])
        assert [p["code"] for e, p in wire.sent if e == "error"] == ["turn_stalled"]
        assert wire.states() == ["thinking", "listening"]


def test_the_llm_workers_word_that_it_is_still_at_work_keeps_a_slow_turn_from_stalling_and_tells_nothing():
    """A tool call is generated whole before anything is sent; on a busy machine that took longer than the limit."""
    wire = Wire()
    with live(wire) as (turns, s):
        spoken(turns, s)
        assert wire.wait_for(lambda: "thinking" in wire.states())
        committed = s.turns.turn.committed_at
        told = len(wire.sent)
        s.actor.post(messages.TurnWorking("s1", 7))  # (another turn's word moves nothing)
        assert s.actor.call_and_wait(lambda: None, 5) and s.turns.turn.progress_at == committed
        deadline = time.monotonic() + 5.0
        while s.turns.turn.progress_at <= committed + 0.02 and time.monotonic() < deadline:
            s.actor.post(messages.TurnWorking("s1", 1))  # (again and again, as the worker sends it)
            time.sleep(0.005)
        assert s.turns.turn.progress_at > committed + 0.02
        turns.post(s, Tick(committed + s.turns.stall_s + 0.01, True))  # past the limit counted from the commit
        s.actor.post(messages.Transcript("s1", 1, "What is the capital of France?"))  # (all before it handled)
        assert wire.wait_for(lambda: any(e == "transcript" for e, _ in wire.sent)), wire.sent[told:]
        assert [e for e, _ in wire.sent[told:]] == ["transcript"]  # no error, no state: still thinking


def test_ending_a_session_cancels_its_turn_then_tells_the_workers_then_ends_its_thread():
    wire = Wire()
    with live(wire) as (turns, s):
        spoken(turns, s)
    assert not s.actor.thread.is_alive()  # live() ended the session, right after the turn
    kinds = [(q, type(m).__name__) for q, m in wire.puts]
    assert kinds == [("requests", "TurnRequest"), ("requests", "CancelTurn"), ("tts", "CancelTurn"),
                     ("requests", "EndSession"), ("tts", "EndSession")]


def test_a_history_reset_cancels_the_turn_then_clears_the_history_then_tells_the_client():
    wire = Wire()
    told = threading.Event()
    with live(wire) as (turns, s):
        spoken(turns, s)
        turns.reset_history(s, then=lambda: wire.put("client", "history_cleared") and told.set())
        assert told.wait(5)
        kinds = [(q, type(m).__name__) for q, m in wire.puts]
        assert kinds == [("requests", "TurnRequest"), ("requests", "CancelTurn"), ("tts", "CancelTurn"),
                         ("requests", "ResetHistory"), ("client", "str")]
        turns.edit_history(s, 1, "Once upon")
        assert wire.puts[-1] == ("requests", messages.EditHistory("s1", 1, "Once upon"))


def test_a_turn_while_a_worker_restarts_is_told_not_ready_at_once_not_left_waiting():
    wire = Wire()
    with live(wire, ready=False) as (turns, s):
        speculative_turn(turns, s, [])
        assert wire.wait_for(lambda: wire.states()[-1:] == ["listening"])
        assert [p["code"] for e, p in wire.sent if e == "error"] == ["not_ready"]  # once: not for the speculation
        assert not [m for _, m in wire.puts if isinstance(m, messages.TurnRequest)]


def test_reply_audio_waits_while_the_user_may_be_going_on_and_plays_once_it_was_only_a_cough():
    wire = Wire()
    with live(wire) as (turns, s):
        turns.post(s, SpeechStarted(time.monotonic()))
        turns.post(s, UtteranceEnded(time.monotonic(), speech()))
        turns.post(s, SpeechStarted(time.monotonic()))  # before any reply audio: perhaps more of the request
        s.actor.post(messages.TtsChunk("s1", 1, 0, PCM))
        assert s.actor.call_and_wait(lambda: None, 5)  # everything above has been handled
        assert not any(e == "audio" for e, _ in wire.sent)  # held: it must not play over the user
        turns.post(s, SpeechDropped(time.monotonic()))  # a cough after all
        assert wire.wait_for(lambda: any(e == "audio" for e, _ in wire.sent))
        assert wire.states() == ["thinking", "speaking"]


def test_a_replys_text_goes_out_with_its_first_audio_not_before():
    wire = Wire()
    with live(wire) as (turns, s):
        spoken(turns, s)
        s.actor.post(messages.ReplyText("s1", 1, "Paris."))
        s.actor.post(messages.ReplyText("s1", 1, "", done=True, text="Paris."))
        assert s.actor.call_and_wait(lambda: None, 5)
        assert not any(e in ("reply_delta", "response_text") for e, _ in wire.sent)  # nothing heard yet
        s.actor.post(messages.TtsChunk("s1", 1, 0, PCM))
        assert wire.wait_for(lambda: any(e == "response_text" for e, _ in wire.sent))
        events = [e for e, _ in wire.sent]
        assert events.index("state") < events.index("reply_delta") < events.index("response_text")
        assert wire.states() == ["thinking", "speaking"]


def test_a_reply_withdrawn_before_it_was_heard_leaves_no_text():
    """ "Tell me about the moon." ... "In one sentence.": the first half's reply was ready, unheard, when the user
    went on; it is withdrawn, and the page never sees its text."""
    wire = Wire()
    with live(wire) as (turns, s):
        spoken(turns, s)
        s.actor.post(messages.ReplyText("s1", 1, "", done=True, text="The moon is Earth's only satellite."))
        turns.post(s, SpeechStarted(time.monotonic()))
        turns.post(s, SpeechConfirmed(time.monotonic()))  # the request goes on
        assert wire.wait_for(lambda: any(e == "turn_cancelled" for e, _ in wire.sent))
        s.actor.post(messages.TtsChunk("s1", 1, 0, PCM))  # late audio of the withdrawn reply
        assert s.actor.call_and_wait(lambda: None, 5)
        assert [p["reason"] for e, p in wire.sent if e == "turn_cancelled"] == ["extended"]
        assert not any(e in ("reply_delta", "response_text", "audio") for e, _ in wire.sent)


def test_speech_whose_audio_stops_arriving_ends_and_the_session_listens_again():
    """The client stopped sending audio mid-speech: after AUDIO_GONE_S the speech is over (here too short to be a
    turn), instead of "speaking" for good (typed text would wait for it forever)."""
    from vita.turns.turn_control import AUDIO_GONE_S

    wire = Wire()
    with live(wire) as (turns, s):
        turns.post(s, SpeechStarted(time.monotonic()))
        assert s.actor.call_and_wait(lambda: None, 5) and s.turns.user_speaking
        s.audio_at = time.monotonic() - AUDIO_GONE_S  # its last audio came that long ago
        assert wire.wait_for(lambda: any(e == "vad" and p.get("speaking") is False for e, p in wire.sent), 3)
        assert not s.turns.user_speaking


def test_a_sessions_end_is_retried_while_a_workers_queue_is_full():
    """EndSession dropped once used to leave the session's history and voice state in the workers for good."""
    class FullAtFirst(Wire):
        def __init__(self):
            super().__init__()
            self.refused = 0

        def put(self, queue_name, message):
            if isinstance(message, messages.EndSession) and self.refused < 2:
                self.refused += 1
                return False  # the queue stayed full for its timeout
            return super().put(queue_name, message)

    wire = FullAtFirst()
    turns = controller(wire)
    s = session(turns)
    try:
        turns.detach(s)
        assert wire.wait_for(lambda: len([m for _, m in wire.puts if isinstance(m, messages.EndSession)]) == 2, 5)
        assert wire.refused == 2
        assert sorted(q for q, m in wire.puts if isinstance(m, messages.EndSession)) == ["requests", "tts"]
    finally:
        turns.close()


def test_camera_frames_go_to_the_vision_stage_only_while_the_user_speaks():
    """A camera left on costs the vision stage nothing while the user is silent; while they speak, its newest
    picture goes about once a second, so that the question's picture is analysed before the question ends."""
    wire = Wire()
    with live(wire) as (turns, s):
        for i in range(4):  # silent: kept for the turn, not analysed
            turns.camera_frame(s, messages.Picture(b"silent %d" % i))
        turns.post(s, SpeechStarted(time.monotonic()))
        assert wire.wait_for(lambda: s.turns.user_speaking, 5)  # (handled on the session's thread)
        for i in range(3):  # three pictures within a second: the first goes
            turns.camera_frame(s, messages.Picture(b"speaking %d" % i))
        assert wire.wait_for(lambda: any(isinstance(m, messages.CameraFrame) for _, m in wire.puts))
        s.frame_sent_at -= 1.0  # a second later
        turns.camera_frame(s, messages.Picture(b"a second later"))
        assert wire.wait_for(lambda: sum(isinstance(m, messages.CameraFrame) for _, m in wire.puts) == 2)
        sent = [m.picture.image for _, m in wire.puts if isinstance(m, messages.CameraFrame)]
        assert sent == [b"speaking 0", b"a second later"]
        assert all(m.session_id == "s1" for _, m in wire.puts if isinstance(m, messages.CameraFrame))
        assert len(s.frames) == 8  # every frame is kept for the turn itself


def test_an_idle_session_gives_its_seat_up_soon_while_others_wait_for_one():
    for waiting in (False, True):  # timeout_when_waiting 0.5 s (--timeout stays 600 s); ticks each second
        wire = Wire()
        line = SessionRegistry(max_users=1, max_waiting=2)
        turns = controller(wire, line=line)
        s = line.open("s1")
        turns.attach(s)
        if waiting:
            line.wait("w1")
        try:
            closed = wire.wait_for(lambda w=wire: any(e == "__disconnect__" for e, _ in w.sent), 2.5)
            assert closed == waiting, wire.sent
            assert (("out_time", None) in wire.sent) == waiting
        finally:
            turns.close()
            turns.detach(s)


def test_one_client_waiting_takes_one_idle_seat_even_when_several_are_idle():
    wire = Wire()
    line = SessionRegistry(max_users=3, max_waiting=2)
    turns = controller(wire, line=line)
    seated = [line.open(sid) for sid in ("s1", "s2", "s3")]
    for s in seated:
        turns.attach(s)
    line.wait("w1")
    try:
        # Each session's clock ticks each second; all three are past timeout_when_waiting (0.5 s) together.
        def closed() -> set[str]:  # (this test's disconnect leaves the session ticking: it may time out again)
            return {sid for e, sid in wire.sent if e == "__disconnect__"}

        assert wire.wait_for(lambda: len(closed()) == 1, 2.5), wire.sent
        assert not wire.wait_for(lambda: len(closed()) > 1, 2.5), wire.sent
    finally:
        turns.close()
        for s in seated:
            turns.detach(s)


@pytest.mark.parametrize(("speaker_echo", "echo_cancel", "cancels"), [(True, True, True), (True, False, False),
                                                                      (False, True, False)])
def test_a_session_guarded_against_its_speakers_echo_cancels_it_with_what_its_client_played(speaker_echo,
                                                                                           echo_cancel, cancels):
    """The reply's audio reaches the session's echo canceller as the client is sent it (at 16 kHz); an
    interruption stops it, and what would have played after that is no echo to take out."""
    wire = Wire()
    turns = controller(wire)
    turns.config.turn.speaker_echo_page, turns.config.turn.echo_cancel = speaker_echo, echo_cancel
    s = session(turns)
    try:
        assert (s.listener.canceller is not None) is cancels
        if not cancels:
            return
        spoken(turns, s)
        s.actor.post(messages.TtsChunk("s1", 1, 0, np.full(48000, 1000, np.int16).tobytes()))  # 2 s
        assert wire.wait_for(lambda: any(e == "audio" for e, _ in wire.sent))
        assert s.actor.call_and_wait(lambda: None, 5)
        playing = s.listener.canceller.playing
        assert 0 < playing.samples.size <= 32000 and abs(np.median(playing.samples) - 1000) < 20
        turns.post(s, SpeechStarted(time.monotonic()))
        turns.post(s, SpeechConfirmed(time.monotonic()))  # the user interrupts: the reply stops
        assert wire.wait_for(lambda: any(e == "turn_cancelled" for e, _ in wire.sent))
        assert s.actor.call_and_wait(lambda: None, 5)
        assert playing.end <= round(time.monotonic() * 16000)  # nothing queued after the stop
    finally:
        turns.close()
        turns.detach(s)


@pytest.mark.parametrize(("speaker_echo", "reason"), [(False, "extended"), (True, "barge-in")])
def test_speech_just_after_the_replys_first_audio_goes_on_with_the_request_unless_the_speaker_may_echo(
        speaker_echo, reason):
    """Within turn.extend_grace_ms of the reply's first audio, speech is the user going on with the request; from a
    client whose speaker's echo comes back it may be that echo (which withdrew the reply and asked again with its
    own first words), so there it is an interruption."""
    wire = Wire()
    turns = controller(wire)
    turns.config.turn.speaker_echo_page = speaker_echo
    s = session(turns)
    try:
        spoken(turns, s)
        s.actor.post(messages.TtsChunk("s1", 1, 0, PCM))
        assert wire.wait_for(lambda: any(e == "audio" for e, _ in wire.sent))
        turns.post(s, SpeechStarted(time.monotonic()))
        turns.post(s, SpeechConfirmed(time.monotonic()))
        assert wire.wait_for(lambda: any(e == "turn_cancelled" for e, _ in wire.sent))
        assert [p["reason"] for e, p in wire.sent if e == "turn_cancelled"] == [reason]
    finally:
        turns.close()
        turns.detach(s)


@contextlib.contextmanager
def speakerphone(wire: Wire):
    """A controller and one session whose client does not cancel its speaker's echo (the echo guard on, the
    canceller off: the tests post the listener's events themselves); both ended on the way out."""
    turns = controller(wire)
    turns.config.turn.speaker_echo_page, turns.config.turn.echo_cancel = True, False
    s = session(turns)
    try:
        yield turns, s
    finally:
        turns.close()
        turns.detach(s)


@pytest.mark.parametrize("over_echo", [True, False])
def test_speech_over_the_replys_echo_that_whisper_made_nothing_of_is_dropped_not_asked_again(over_echo):
    """A speakerphone: what the canceller leaves of the reply's echo, heard as "Thank you so much.", made the
    assistant say "Sorry, I didn't catch that" to nobody. Speech that began where the echo could be, not
    understood, is dropped; elsewhere the user is asked to say it again."""

    wire = Wire()
    with speakerphone(wire) as (turns, s):
        if over_echo:  # the reply was playing at the client as the speech began
            s.listener.segmenter.gate.echo.play(np.full(24000, 3000, np.int16).tobytes(), 24000,
                                                time.monotonic() - 1.2)
        spoken(turns, s)
        s.actor.post(messages.ReplyText("s1", 1, "Sorry, I didn't "))  # (judged on its first sentence, whole...)
        s.actor.post(messages.TtsChunk("s1", 1, 0, PCM))  # (...even once its first words are playing)
        s.actor.post(messages.ReplyText("s1", 1, "catch that. "))
        assert s.actor.call_and_wait(lambda: None, 5)
        cancelled = [p["reason"] for e, p in wire.sent if e == "turn_cancelled"]
        assert cancelled == (["echo"] if over_echo else [])
        told = [e for e, _ in wire.sent]
        # (dropped, nothing of it was heard and nothing else is stopped: the reply it echoed may still be ending)
        assert ("audio" in told, "stop_tts" in told) == ((False, False) if over_echo else (True, False))


@contextlib.contextmanager
def answering_speech_over_the_echo(wire: Wire):
    """A speakerphone session whose request began over the reply's echo, its answer's first audio in before its
    first sentence is whole: (controller, session)."""
    with speakerphone(wire) as (turns, s):
        s.listener.segmenter.gate.echo.play(np.full(24000, 3000, np.int16).tobytes(), 24000, time.monotonic() - 1.2)
        spoken(turns, s)
        s.actor.post(messages.TtsChunk("s1", 1, 0, PCM))  # (the voice before the words)
        s.actor.post(messages.ReplyText("s1", 1, "The capital "))
        assert s.actor.call_and_wait(lambda: None, 5)
        yield turns, s


def test_the_answer_to_speech_over_the_replys_echo_plays_once_its_first_sentence_is_judged():
    """Its audio arriving before its words is held, not lost: the user asked something after all."""
    wire = Wire()
    with answering_speech_over_the_echo(wire) as (_turns, s):
        assert not [e for e, _ in wire.sent if e == "audio"]  # held while the first sentence is unfinished
        s.actor.post(messages.ReplyText("s1", 1, "of France is Paris. "))
        s.actor.post(messages.TtsChunk("s1", 1, 1, PCM))
        assert wire.wait_for(lambda: sum(e == "audio" for e, _ in wire.sent) == 2)
        assert not [e for e, _ in wire.sent if e in ("turn_cancelled", "stop_tts")]


def test_a_reply_held_for_judging_is_let_go_when_its_turn_is_cancelled():
    wire = Wire()
    with answering_speech_over_the_echo(wire) as (turns, s):
        assert len(s.held) == 1
        turns.post(s, SpeechStarted(time.monotonic()))  # the user speaks again: a new request
        turns.post(s, UtteranceEnded(time.monotonic(), speech()))
        assert wire.wait_for(lambda: any(e == "turn_cancelled" for e, _ in wire.sent))
        assert s.actor.call_and_wait(lambda: None, 5)
        assert s.held == [] and 1 not in s.over_echo_reply
        assert not [e for e, _ in wire.sent if e == "audio"]


def test_an_interruption_over_the_replys_echo_that_whisper_made_nothing_of_is_asked_again():
    """Speech that stopped the reply is the user's own, echo or not: misheard, they are asked to say it again."""
    from vita.words import ASK_AGAIN

    wire = Wire()
    with speakerphone(wire) as (turns, s):
        spoken(turns, s)
        s.actor.post(messages.TtsChunk("s1", 1, 0, np.full(48000, 3000, np.int16).tobytes()))  # 2 s playing
        assert wire.wait_for(lambda: any(e == "audio" for e, _ in wire.sent))
        playing = time.monotonic()  # (the reply plays at the client from about now: its echo may come back)
        turns.post(s, SpeechStarted(time.monotonic()))
        turns.post(s, SpeechConfirmed(time.monotonic()))  # over the reply: it stops
        assert wire.wait_for(lambda: any(e == "turn_cancelled" for e, _ in wire.sent))
        over = Speech(np.zeros(16000, np.int16).tobytes(), playing, playing + 0.3)
        assert s.listener.segmenter.gate.echo.reference(playing + 0.032) is not None  # ...where the echo could be
        turns.post(s, UtteranceEnded(time.monotonic(), over))
        assert s.actor.call_and_wait(lambda: None, 5)
        s.actor.post(messages.ReplyText("s1", 2, ASK_AGAIN + " "))
        assert s.actor.call_and_wait(lambda: None, 5)
        assert [p["reason"] for e, p in wire.sent if e == "turn_cancelled"] == ["barge-in"]


@contextlib.contextmanager
def held_for_its_words(wire: Wire):
    """A speakerphone session whose reply is playing, and speech over it long enough to interrupt: the reply is held
    while ASR hears the speech. (controller, session, the check put to the LLM worker)."""
    with speakerphone(wire) as (turns, s):
        spoken(turns, s)
        s.actor.post(messages.ReplyText("s1", 1, "Water your house plant every two to three days, "))
        s.actor.post(messages.TtsChunk("s1", 1, 0, np.full(2400, 3000, np.int16).tobytes()))  # (0.1 s: sent at once)
        assert wire.wait_for(lambda: any(e == "audio" for e, _ in wire.sent))
        turns.post(s, SpeechStarted(time.monotonic()))
        turns.post(s, SpeechConfirmed(time.monotonic(), speech(), loud=False))  # (quieter than the user's voice)

        def checks() -> list:
            return [m for q, m in wire.puts if isinstance(m, messages.InterjectionCheck)]

        assert wire.wait_for(lambda: checks())
        (check,) = checks()
        s.actor.post(messages.TtsChunk("s1", 1, 1, PCM))  # more of the reply: held, not sent
        assert s.actor.call_and_wait(lambda: None, 5)
        told = [e for e, _ in wire.sent]
        assert told.count("audio") == 1 and "stop_tts" not in told and "turn_cancelled" not in told
        yield turns, s, check


def test_the_replys_echo_taken_for_an_interruption_holds_the_reply_which_goes_on_once_its_words_are_heard():
    """A speakerphone whose echo the canceller let through for long enough to interrupt: ASR hears the reply's own
    words in it (the reply being generated, not yet whole), and the reply goes on; the speech makes no turn."""
    wire = Wire()
    with held_for_its_words(wire) as (turns, s, check):
        assert check.turn_id == 1 and check.audio == speech().pcm
        s.actor.post(messages.InterjectionText("s1", 1, check.pause, "your house plant every two"))
        assert wire.wait_for(lambda: sum(e == "audio" for e, _ in wire.sent) == 2)  # the held audio goes on
        turns.post(s, UtteranceEnded(time.monotonic(), speech()))
        assert s.actor.call_and_wait(lambda: None, 5)
        assert not [e for e, _ in wire.sent if e in ("stop_tts", "turn_cancelled")]
        assert not [m for q, m in wire.puts if isinstance(m, messages.TurnRequest) and m.turn_id != 1]


def test_the_users_words_over_the_replys_echo_stop_it_and_are_answered_after_the_command():
    wire = Wire()
    with held_for_its_words(wire) as (turns, s, check):
        s.actor.post(messages.InterjectionText("s1", 1, check.pause, "Wait, stop. How"))
        assert wire.wait_for(lambda: any(e == "turn_cancelled" for e, _ in wire.sent))
        assert [p["reason"] for e, p in wire.sent if e == "turn_cancelled"] == ["barge-in"]
        turns.post(s, UtteranceEnded(time.monotonic(), speech()))
        assert wire.wait_for(lambda: any(isinstance(m, messages.TurnRequest) and m.turn_id == 2 for q, m in wire.puts))
        (request,) = [m for q, m in wire.puts if isinstance(m, messages.TurnRequest) and m.turn_id == 2]
        assert request.unless_command  # (its words are read after "Wait, stop.")
        assert sum(e == "audio" for e, _ in wire.sent) == 1  # the held audio was never sent


@pytest.mark.parametrize("voiced", [True, False])
def test_a_reply_cut_short_is_known_as_the_echo_of_what_was_sent_of_it(voiced):
    """A speakerphone: a reply stopped mid-way still comes back from the speaker, and Whisper heard "To wash your
    hands, use soap and water." as the next question. What the worker had sent of a cut reply counts as said, once
    its audio went to the client (a speculation withdrawn unheard said nothing)."""
    wire = Wire()
    with speakerphone(wire) as (turns, s):
        spoken(turns, s)
        if voiced:
            s.actor.post(messages.TtsChunk("s1", 1, 0, np.full(48000, 3000, np.int16).tobytes()))
            assert wire.wait_for(lambda: any(e == "audio" for e, _ in wire.sent))
        turns.post(s, SpeechStarted(time.monotonic()))
        turns.post(s, SpeechConfirmed(time.monotonic()))  # over the reply (or its thinking): it stops
        assert wire.wait_for(lambda: any(e == "turn_cancelled" for e, _ in wire.sent))
        s.actor.post(messages.TurnEnded("s1", 1, "llm", "cancelled",
                                        spoken="To wash your hands, use soap and water for twenty seconds."))
        turns.post(s, UtteranceEnded(time.monotonic(), speech()))
        assert s.actor.call_and_wait(lambda: None, 5)
        s.actor.post(messages.Transcript("s1", 2, "To wash your hands, use soap and water."))
        assert s.actor.call_and_wait(lambda: None, 5)
        cancelled = [p["reason"] for e, p in wire.sent if e == "turn_cancelled"]
        assert cancelled == (["barge-in", "echo"] if voiced else ["extended"])  # (unheard: the request went on)
