"""The LLM worker's own logic against a scripted TextEngine: reply budget, piece cutting, cancel, discarded
speculative turns, history, timings. No model is loaded; the real engine is in tests/workers/llm/test_llm_worker.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import queue
import threading
import time

import pytest

from tests.harness.client import wait_until
from tests.harness.injection_signs import SIGNS
from vita.config import Config
from vita.messages import (
    CancelTurn,
    ClientTool,
    EditHistory,
    ReplyText,
    SessionError,
    ToolCallRequested,
    ToolOutput,
    ToolUsed,
    TtsPiece,
    TurnEnded,
    TurnRequest,
    TurnTimings,
)
from vita.words import APOLOGY, ASK_AGAIN, FILLER, asks_again
from workers.common import StatusReporter
from workers.llm.camera_questions import PICTURE_OPEN
from workers.llm.engines.asr import Transcription
from workers.llm.engines.generation import Delta, EnginePrompt, SamplingSettings
from workers.llm.prompting import PromptBuilder
from workers.llm.turn_run import SENSE_CHECK
from workers.llm.worker import MAILBOX_BOUND, LlmWorker, turns_at_work
from workers.tools.builtin import builtin_tools
from workers.tools.forced_calls import FORCED_CALL_TOKENS
from workers.tools.registry import Tool, ToolBox
from workers.vision.quoting import neutral

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


class ScriptedEngine:
    """A TextEngine that 'generates' the given words, one token each, a few milliseconds apart."""

    description = "scripted engine (unit tests)"
    reads_words = False

    def __init__(self, words: list[str], step_s: float = 0.002):
        self.words, self.step_s = words, step_s
        self.aborted: list[str] = []
        self.prompts: list[EnginePrompt] = []

    async def start(self, report) -> None:
        return None

    async def stream(self, prompt: EnginePrompt, sampling: SamplingSettings, request_id: str):
        self.prompts.append(prompt)
        for i, word in enumerate(self.words[: sampling.max_tokens]):
            await asyncio.sleep(self.step_s)
            yield Delta(("" if i == 0 else " ") + word, 1, 20 if i == 0 else None)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def aclose(self) -> None:
        return None

    def close(self) -> None:
        return None


def make_worker(words: list[str], **llm) -> tuple[LlmWorker, ScriptedEngine]:
    config = Config()
    for key, value in llm.items():
        setattr(config.llm, key, value)
    outbox: queue.Queue = queue.Queue()
    worker = LlmWorker(config, queue.Queue(), queue.Queue(), outbox,
                       StatusReporter("llm", outbox, logging.getLogger("test.llm-logic")))
    worker.kit.engine = engine = ScriptedEngine(words)
    worker.kit.prompts = PromptBuilder(None, "chat", config.llm.persona)  # no tokenizer: messages only
    return worker, engine


def drained(q: queue.Queue) -> list:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


def run_turn(worker: LlmWorker, request: TurnRequest, cancel: CancelTurn | None = None,
             cancel_after_pieces: int = 1) -> None:
    async def scenario() -> None:
        worker._handle(request)  # as the inbox does: starts the turn's task and its done-callback
        _, task = worker.sessions.turn_of(request.session_id)
        if cancel is not None:
            def pieces() -> int:
                return sum(isinstance(m, TtsPiece) and bool(m.text) for m in list(worker.out.tts.queue))

            while pieces() < cancel_after_pieces:
                await asyncio.sleep(0.001)
            worker._handle(cancel)
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)  # the task's done-callbacks

    asyncio.run(scenario())
    worker.publisher.flush()  # the outbox is written by the worker's publisher thread


def spoken_text(pieces: list) -> str:
    return " ".join(p.text for p in pieces if isinstance(p, TtsPiece) and p.text)


def test_a_turn_is_said_to_be_at_work_for_a_bounded_time_and_forgotten_once_it_ends():
    """The front's stall watchdog still ends a turn stuck in a live worker: after `longest`, no more word of it."""
    seen, working = turns_at_work({("a", 1)}, {}, now=10.0, longest=60.0)
    assert seen == {("a", 1): 10.0} and working == [("a", 1)]
    seen, working = turns_at_work({("a", 1), ("b", 3)}, seen, now=69.0, longest=60.0)
    assert seen == {("a", 1): 10.0, ("b", 3): 69.0} and working == [("a", 1), ("b", 3)]
    seen, working = turns_at_work({("a", 1), ("b", 3)}, seen, now=70.5, longest=60.0)
    assert working == [("b", 3)]  # (a: at work for over a minute, its word stops)
    seen, working = turns_at_work({("b", 3)}, seen, now=72.0, longest=60.0)
    assert seen == {("b", 3): 69.0} and working == [("b", 3)]  # (a ended: forgotten)


def test_a_run_on_reply_stops_at_the_word_budget_and_the_generation_is_aborted():
    words = ("The sky is blue today. " + "It has no clouds and the sun shines on every single hill. " * 6).split()
    worker, engine = make_worker(words, max_reply_words=12, first_piece_words=4, max_tokens=64)
    run_turn(worker, TurnRequest("s", 1, text="How is the weather?"))
    pieces = drained(worker.out.tts)
    said = [p.text for p in pieces if isinstance(p, TtsPiece) and p.text]
    assert said[0] == "The sky is blue" and " ".join(said) == "The sky is blue today."
    assert pieces[-1].last and engine.aborted == ["s:1"]
    (exchange,) = worker.sessions.history("s")
    assert exchange.assistant == "The sky is blue today." and not exchange.interrupted


def test_a_reply_cut_by_the_token_limit_ends_on_a_whole_word():
    worker, _ = make_worker(["Paris", "is", "the", "capital", "of", "Fra"], max_tokens=6, first_piece_words=0)
    run_turn(worker, TurnRequest("s", 1, text="Capital of France?"))
    assert spoken_text(drained(worker.out.tts)) == "Paris is the capital of."


def test_a_clients_token_cap_cuts_the_reply_there_and_never_raises_the_servers():
    words = ["Paris", "is", "the", "capital", "of", "France", "and", "its", "largest", "city."]
    worker, engine = make_worker(words, max_tokens=6, first_piece_words=0)
    run_turn(worker, TurnRequest("s", 1, text="Capital of France?", max_tokens=4))
    # Cut by the client's cap, as by the server's: the last word may be a part of one, and is left out.
    assert spoken_text(drained(worker.out.tts)) == "Paris is the."
    run_turn(worker, TurnRequest("s", 2, text="Capital of France?", max_tokens=400))
    assert spoken_text(drained(worker.out.tts)) == "Paris is the capital of."  # the server's 6 still hold


def test_timings_and_the_reply_text_are_reported():
    worker, _ = make_worker(["Hello", "there,", "friend."])
    run_turn(worker, TurnRequest("s", 1, text="Hi"))
    outputs = drained(worker.outbox)
    (timings,) = [m for m in outputs if isinstance(m, TurnTimings)]
    for key in ("first_token_s", "first_piece_s", "generate_s", "tokens", "prompt_tokens", "context_turns"):
        assert key in timings.timings, key
    assert "".join(m.delta for m in outputs if isinstance(m, ReplyText)) == "Hello there, friend."
    (done,) = [m for m in outputs if isinstance(m, ReplyText) and m.done]
    assert done.text == spoken_text(drained(worker.out.tts)) == "Hello there, friend."  # the page shows what was said
    assert [m.reason for m in outputs if isinstance(m, TurnEnded)] == ["done"]


def test_a_cancelled_turn_keeps_what_was_said_marked_interrupted():
    worker, _ = make_worker(("Well, " + "this is a long answer that goes on. " * 5).split(), first_piece_words=0)
    worker.kit.engine.step_s = 0.01
    run_turn(worker, TurnRequest("s", 1, text="Tell me"), CancelTurn("s", 1, "barge-in"))
    said = spoken_text(drained(worker.out.tts))
    (exchange,) = worker.sessions.history("s")
    assert exchange.interrupted and exchange.assistant == said and said.startswith("Well,")
    assert [m.reason for m in drained(worker.outbox) if isinstance(m, TurnEnded)] == ["cancelled"]


def test_a_discarded_speculative_turn_leaves_no_history_even_if_it_spoke():
    worker, _ = make_worker(("Well, " + "this is a long answer that goes on. " * 5).split(), first_piece_words=0)
    worker.kit.engine.step_s = 0.01
    run_turn(worker, TurnRequest("s", 1, text="Tell me", speculative=True),
             CancelTurn("s", 1, "speech resumed", forget=True))
    assert spoken_text(drained(worker.out.tts)).startswith("Well,")  # held by the front, never played
    assert list(worker.sessions.history("s")) == [] and not worker.sessions.get("s").forgotten


def test_a_speculative_turn_discarded_after_it_finished_is_taken_back_from_history():
    worker, _ = make_worker(["Yes."])
    run_turn(worker, TurnRequest("s", 1, text="Ready?", speculative=True))
    run_turn(worker, TurnRequest("s", 2, text="Ready now?"))
    assert [ex.turn_id for ex in worker.sessions.history("s")] == [1, 2]
    worker._handle(CancelTurn("s", 1, "speech resumed", forget=True))
    assert [ex.turn_id for ex in worker.sessions.history("s")] == [2]


def test_nothing_said_before_a_cancel_leaves_no_history():
    worker, engine = make_worker(["word"] * 40, first_piece_words=0)
    engine.step_s = 0.01

    async def scenario() -> None:
        worker._handle(TurnRequest("s", 1, text="Hi"))
        _, task = worker.sessions.turn_of("s")
        await asyncio.sleep(0.03)  # a few tokens in, no piece yet (no boundary)
        worker._handle(CancelTurn("s", 1, "barge-in"))
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    assert not spoken_text(drained(worker.out.tts)) and list(worker.sessions.history("s")) == []


def test_a_stuck_voice_fails_only_this_turn_with_a_readable_error():
    worker, _ = make_worker(["Paris", "is", "the", "capital."], first_piece_words=0)
    worker.out.tts = queue.Queue(maxsize=1)
    worker.out.tts.put("a piece the stuck voice never took")
    worker.out.put_timeout_s = 0.01
    run_turn(worker, TurnRequest("s", 1, text="Capital of France?"))
    outputs = drained(worker.outbox)
    assert [m.code for m in outputs if isinstance(m, SessionError)] == ["tts_busy"]
    assert [m.reason for m in outputs if isinstance(m, TurnEnded)] == ["tts_busy"]
    assert list(worker.sessions.history("s")) == []  # nothing said, nothing kept
    assert not worker.sessions.any_turn()  # no task left


def test_the_inbox_hand_over_waits_while_the_event_loop_is_behind():
    """Messages wait in the bounded Manager queue, not in an unbounded one inside the worker."""
    worker, _ = make_worker(["hi"])
    loop = asyncio.new_event_loop()
    mailbox: asyncio.Queue = asyncio.Queue(MAILBOX_BOUND)  # nothing takes from it: a loop that is behind
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()
    for turn in range(MAILBOX_BOUND * 2):
        worker.inbox.put(CancelTurn("s", turn))
    reader = threading.Thread(target=worker._read_inbox, args=(loop, mailbox), daemon=True)
    reader.start()
    try:
        assert wait_until(lambda: mailbox.qsize() == MAILBOX_BOUND)
        assert wait_until(lambda: worker.inbox.qsize() == MAILBOX_BOUND - 1)  # one more waits in the reader
        assert reader.is_alive()
    finally:
        worker.stop.set()
        reader.join(3)
        loop.call_soon_threadsafe(loop.stop)
        running.join(3)
    assert not reader.is_alive()


def test_a_stuck_voice_queue_never_stops_the_event_loop():
    """The put waits in a thread: other sessions' work on the loop goes on meanwhile (it used to block it)."""
    worker, _ = make_worker(["Paris", "is", "the", "capital."], first_piece_words=0)
    worker.out.tts = queue.Queue(maxsize=1)
    worker.out.tts.put("a piece the stuck voice never took")
    worker.out.put_timeout_s = 1.0

    async def scenario() -> float:
        worker._handle(TurnRequest("s", 1, text="Capital of France?"))
        _, task = worker.sessions.turn_of("s")
        await wait_for_async(lambda: worker.out.tts.full() and not task.done())
        started = loop_time()
        await asyncio.sleep(0.05)  # another session's work on the same loop
        waited = loop_time() - started
        await asyncio.gather(task, return_exceptions=True)
        return waited

    waited = asyncio.run(scenario())
    worker.publisher.flush()
    assert waited < 0.5, waited
    assert [m.code for m in drained(worker.outbox) if isinstance(m, SessionError)] == ["tts_busy"]


async def wait_for_async(predicate, timeout: float = 5.0) -> None:
    deadline = loop_time() + timeout
    while not predicate():
        assert loop_time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def loop_time() -> float:
    return asyncio.get_running_loop().time()


def test_the_publisher_never_blocks_and_counts_what_it_drops():
    from workers.common import PUBLISH_BOUND, Publisher

    stuck: queue.Queue = queue.Queue(maxsize=1)
    stuck.put("full")  # nobody reads it: every put times out
    publisher = Publisher(stuck, logging.getLogger("test.publisher"), "test-publish", put_timeout=0.05)
    started = threading.Event()
    threading.Thread(target=lambda: (started.set(), [publisher.publish(i) for i in range(PUBLISH_BOUND + 50)]),
                     daemon=True).start()
    assert started.wait(1)
    assert wait_until(lambda: publisher.dropped >= 49, 2)  # the hand-over filled while the first put waited
    publisher.put_timeout = 0.001
    publisher.flush()
    assert publisher.dropped == PUBLISH_BOUND + 50 and stuck.qsize() == 1  # each one timed out, none blocked


def test_a_session_over_its_share_lets_another_sessions_turn_finish_first():
    """Speech cut into words keeps one session's turns always in flight; under contention its next turn waits
    for the other session's turn in flight, which then runs alone."""
    worker, engine = make_worker(("Paris is the capital of France. " * 4).split(), first_piece_words=0)
    engine.step_s = 0.01
    for ago in range(9):  # a turn a second
        worker.ledger.started("busy", time.monotonic() - ago)
    order: list[str] = []
    stream = engine.stream

    def recorded_stream(prompt, sampling, request_id):
        order.append(f"start {request_id}")
        return stream(prompt, sampling, request_id)

    engine.stream = recorded_stream

    async def scenario() -> None:
        worker._handle(TurnRequest("calm", 1, text="Capital of France?"))
        calm = worker.sessions.turn_of("calm")[1]
        calm.add_done_callback(lambda _t: order.append("calm done"))
        await asyncio.sleep(0.005)
        worker._handle(TurnRequest("busy", 2, text="Go."))
        busy = worker.sessions.turn_of("busy")[1]
        await asyncio.gather(calm, busy, return_exceptions=True)

    asyncio.run(scenario())
    worker.publisher.flush()
    assert order == ["start calm:1", "calm done", "start busy:2"]
    (timings,) = [m for m in drained(worker.outbox) if isinstance(m, TurnTimings) and m.session_id == "busy"]
    assert timings.timings["fair_wait_s"] > 0.05  # it waited for calm's whole reply
    assert len(engine.prompts) == 2


def test_a_session_over_its_share_does_not_wait_when_nobody_else_has_a_turn():
    worker, _ = make_worker(["Fine."])
    for ago in range(9):
        worker.ledger.started("busy", time.monotonic() - ago)
    run_turn(worker, TurnRequest("busy", 2, text="Go."))
    (timings,) = [m for m in drained(worker.outbox) if isinstance(m, TurnTimings)]
    assert "fair_wait_s" not in timings.timings


# --- tools in a turn ---------------------------------------------------------------------------------------------
class RoundsEngine(ScriptedEngine):
    """A TextEngine whose each request 'generates' the next of `rounds` (a tool call, then the answer)."""

    def __init__(self, rounds: list[list[str]], step_s: float = 0.002):
        super().__init__([], step_s)
        self.rounds = list(rounds)

    async def stream(self, prompt: EnginePrompt, sampling: SamplingSettings, request_id: str):
        self.prompts.append(prompt)
        words = self.rounds.pop(0) if self.rounds else []
        for i, word in enumerate(words):
            await asyncio.sleep(self.step_s)
            yield Delta(("" if i == 0 else " ") + word, 1, 20 if i == 0 else None)


def tool_worker(rounds: list[list[str]], *tools: Tool, **settings) -> tuple[LlmWorker, RoundsEngine]:
    """The built-ins, and `tools` as an operator's (shown to the model, as MCP tools are)."""
    worker, _ = make_worker([])
    tools = tuple(dataclasses.replace(t, source="mcp:test") for t in tools)
    for key, value in settings.items():
        setattr(worker.config.tools, key, value)
    worker.kit.engine = engine = RoundsEngine(rounds)
    worker.kit.toolbox = ToolBox([*builtin_tools(), *tools])
    return worker, engine


CALL = ['<tool_call>\n{"name":', '"lookup",', '"arguments":', '{"item":', '"widgets"}}\n</tool_call>']


def test_a_reply_that_is_a_tool_call_is_not_spoken_and_its_result_is():
    worker, engine = tool_worker([CALL, ["There", "are", "9", "widgets."]],
                                 Tool("lookup", "stock", {"type": "object"}, lambda item: f"42 {item}"))
    run_turn(worker, TurnRequest("s", 1, text="How many widgets are there?"))
    assert spoken_text(drained(worker.out.tts)) == "42 widgets."  # never the call's JSON, nor the model's own words
    assert len(engine.prompts) == 1
    outputs = drained(worker.outbox)
    (used,) = [m for m in outputs if isinstance(m, ToolUsed)]
    assert (used.name, json.loads(used.arguments), used.result, used.ok) == ("lookup", {"item": "widgets"},
                                                                          "42 widgets", True)
    assert "<tool_call>" not in "".join(m.delta for m in outputs if isinstance(m, ReplyText))
    (exchange,) = worker.sessions.history("s")  # kept, so that a follow-up ("and gadgets?") has it
    assert [m["role"] for m in exchange.tool_messages] == ["assistant", "tool"]
    (timings,) = [m for m in outputs if isinstance(m, TurnTimings)]
    assert timings.timings["tool_calls"] == 1


def test_a_plain_arithmetic_question_is_calculated_and_said_without_asking_the_model():
    worker, engine = tool_worker([["It", "is", "9823."]])
    run_turn(worker, TurnRequest("s", 1, text="What is 347 times 29?"))
    assert engine.prompts == []  # no generation: the model's own 9823 never comes up
    assert spoken_text(drained(worker.out.tts)) == "347 times 29 is 10063."
    (exchange,) = worker.sessions.history("s")
    assert exchange.assistant == "347 times 29 is 10063." and exchange.tool_messages == ()  # the answer says it


def test_a_slow_tool_gets_a_filler_line_first_and_a_failing_one_an_error_the_model_reads():
    def slow(item: str) -> str:
        time.sleep(0.3)
        return "aisle 4"

    worker, engine = tool_worker([CALL, ["Aisle", "4."]], Tool("lookup", "", {"type": "object"}, slow),
                                 filler_after_ms=50)
    run_turn(worker, TurnRequest("s", 1, text="Where are the widgets?"))
    assert [p.text for p in drained(worker.out.tts) if isinstance(p, TtsPiece) and p.text] == [FILLER, "aisle 4."]

    worker, engine = tool_worker([CALL, []], Tool("lookup", "", {"type": "object"}, lambda item: 1 / 0))
    run_turn(worker, TurnRequest("s", 1, text="Where are the widgets?"))
    assert engine.prompts[1].messages[-1]["content"].startswith("Error: lookup failed")
    assert spoken_text(drained(worker.out.tts)) == APOLOGY  # the model said nothing after the error


def test_a_barge_in_during_a_tool_call_ends_the_turn_at_once():
    started, released = threading.Event(), threading.Event()

    def hangs(item: str) -> str:
        started.set()
        released.wait(10)
        return "too late"

    worker, _ = tool_worker([CALL, ["Never", "said."]], Tool("lookup", "", {"type": "object"}, hangs,
                                                             timeout_s=10), filler_after_ms=0)

    async def scenario() -> float:
        worker._handle(TurnRequest("s", 1, text="Where are the widgets?"))
        _, task = worker.sessions.turn_of("s")
        while not started.is_set():
            await asyncio.sleep(0.005)
        cancelled_at = time.monotonic()
        worker._handle(CancelTurn("s", 1, "barge-in"))
        await asyncio.gather(task, return_exceptions=True)
        took = time.monotonic() - cancelled_at
        released.set()  # the tool's thread, which nothing interrupts, may end now (asyncio.run waits for it)
        return took

    assert asyncio.run(scenario()) < 0.5
    worker.publisher.flush()
    assert [m.reason for m in drained(worker.outbox) if isinstance(m, TurnEnded)] == ["cancelled"]
    assert spoken_text(drained(worker.out.tts)) == ""


def test_a_model_that_says_nothing_gets_an_apology_not_silence():
    worker, _ = make_worker([])
    run_turn(worker, TurnRequest("s", 1, text="Multiply 125 by 48."))
    assert spoken_text(drained(worker.out.tts)) == APOLOGY


# --- a Realtime client's own tools, instructions and edits ------------------------------------------------------
ORDER = ClientTool("order_status", "Look up an order.", json.dumps({"type": "object",
                                                                    "properties": {"id": {"type": "string"}}}))
ORDER_CALL = ['<tool_call>\n{"name":', '"order_status",', '"arguments":', '{"id":', '"4512"}}\n</tool_call>']


def test_a_call_of_the_clients_tool_goes_to_the_client_and_its_result_continues_the_question():
    worker, engine = tool_worker([ORDER_CALL, ["It", "arrives", "on", "Friday."]])
    run_turn(worker, TurnRequest("s", 1, text="Where is order 4512?", client_tools=(ORDER,)))
    assert spoken_text(drained(worker.out.tts)) == ""  # nothing said: the client runs it
    outputs = drained(worker.outbox)
    (asked,) = [m for m in outputs if isinstance(m, ToolCallRequested)]
    assert (asked.name, json.loads(asked.arguments)) == ("order_status", {"id": "4512"})
    assert [m.reason for m in outputs if isinstance(m, TurnEnded)] == ["tool_call"]
    assert not [m for m in outputs if isinstance(m, ToolUsed)]  # nothing ran here
    assert not list(worker.sessions.history("s"))  # the exchange is written when the question is answered
    engine.rounds.insert(0, ["Hmm."])
    run_turn(worker, TurnRequest("s", 2, text="Hmm", speculative=True))  # a pause meanwhile: the call still waits
    worker.sessions.history("s").drop_turn(2)
    assert worker.sessions.get("s").awaited is not None
    drained(worker.out.tts)
    run_turn(worker, TurnRequest("s", 3, client_tools=(ORDER,),
                                 tool_outputs=(ToolOutput(asked.call_id, '{"arrives": "Friday"}'),)))
    assert spoken_text(drained(worker.out.tts)) == "It arrives on Friday."
    continued = engine.prompts[-1].messages
    assert continued[-3]["content"] == "Where is order 4512?"  # the same question, then the call and its result
    assert continued[-2]["tool_calls"][0]["id"] == asked.call_id
    assert continued[-1] == {"role": "tool", "name": "order_status", "tool_call_id": asked.call_id,
                             "content": '{"arrives": "Friday"}'}
    (exchange,) = worker.sessions.history("s")
    assert (exchange.user, exchange.assistant, exchange.turn_id) == ("Where is order 4512?",
                                                                    "It arrives on Friday.", 3)
    assert [m["role"] for m in exchange.tool_messages] == ["assistant", "tool"]


def test_a_sessions_instructions_replace_the_persona_and_a_text_only_client_gets_no_voice():
    worker, engine = make_worker(["Paris."])
    run_turn(worker, TurnRequest("s", 1, text="Capital of France?", instructions="Answer like a pirate.",
                                 output_audio=False))
    assert engine.prompts[0].messages[0] == {"role": "system", "content": "Answer like a pirate."}
    pieces = drained(worker.out.tts)
    assert [p.text for p in pieces] == [""] and pieces[0].last  # only the turn's silent end
    done = [m for m in drained(worker.outbox) if isinstance(m, ReplyText) and m.done]
    assert done[0].text == "Paris."


def test_history_edits_cut_a_reply_to_what_was_heard_or_drop_it_even_while_its_turn_unwinds():
    words = ("Once upon a time there was a brave little dog " + "who lived by the sea and loved to swim").split()
    worker, _ = make_worker(words, max_reply_words=40, first_piece_words=3, max_tokens=64)
    run_turn(worker, TurnRequest("s", 1, text="Tell me a story."))
    worker._handle(EditHistory("s", 1, "Once upon"))
    (exchange,) = worker.sessions.history("s")
    assert exchange.assistant == "Once upon" and exchange.interrupted

    worker.kit.engine.step_s = 0.02

    async def barge_in_then_truncate() -> None:
        worker._handle(TurnRequest("s", 2, text="Another one."))
        _, task = worker.sessions.turn_of("s")
        while not any(isinstance(m, TtsPiece) and m.text and m.turn_id == 2 for m in list(worker.out.tts.queue)):
            await asyncio.sleep(0.001)
        worker._handle(CancelTurn("s", 2))
        worker._handle(EditHistory("s", 2, "Once"))  # at once, before the cancelled turn wrote its exchange
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)

    asyncio.run(barge_in_then_truncate())
    assert [(ex.turn_id, ex.assistant) for ex in worker.sessions.history("s")] == [(1, "Once upon"), (2, "Once")]
    worker._handle(EditHistory("s", 1, None))
    assert [ex.turn_id for ex in worker.sessions.history("s")] == [2]


# --- asking again ------------------------------------------------------------------------------------------------
class Heard:
    """A transcriber that hears what it is told to (the worker's decision is the logic under test)."""

    def __init__(self, text: str, logprob: float):
        self.result, self.calls = Transcription(text, logprob), 0

    def hear(self, pcm: bytes, rate: int, redecode: bool = True, token_scores: bool = False) -> Transcription:
        self.calls += 1
        return self.result


class HeardTogether:
    """A transcriber that hears only once `parties` utterances are being heard at the same moment."""

    def __init__(self, parties: int):
        self.barrier = threading.Barrier(parties, timeout=10)

    def hear(self, pcm: bytes, rate: int, redecode: bool = True, token_scores: bool = False) -> Transcription:
        self.barrier.wait()  # broken (and the turn's ASR fails) if the runs queue one after another
        return Transcription("What is the capital of France?", -0.1)


def test_turns_of_two_sessions_that_end_together_are_heard_side_by_side():
    """asr.workers: the worker hears that many utterances at once (turns that end together do not queue for
    one Whisper)."""
    worker, engine = make_worker(["Paris."])
    assert worker.config.asr.workers == 2
    worker.kit.asr = HeardTogether(2)

    async def together() -> None:
        worker._handle(TurnRequest("a", 1, audio=bytes(32000)))
        worker._handle(TurnRequest("b", 1, audio=bytes(32000)))
        tasks = [task for _, _, task in worker.sessions.turns()]
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0)

    asyncio.run(together())
    worker.publisher.flush()
    assert not worker.kit.asr.barrier.broken
    spoken = [m for m in drained(worker.out.tts) if isinstance(m, TtsPiece) and m.text]
    assert sorted(m.session_id for m in spoken) == ["a", "b"]


@pytest.mark.parametrize("first, second, asked, second_asked", [
    (("We try to move the salon trunk.", -0.7), ("Which animal has a long trunk?", -0.5), True, True),
    (("Which animal has a long trunk?", -0.7), ("Which animal has a long trunk.", -0.4), False, True),
    (("Which animal has a long trunk?", -0.3), ("Something else entirely here.", -0.4), False, False),
    (("Mumble mumble.", -1.2), ("Mumble.", -1.0), True, False),  # under ask_again_below: no second opinion needed
])
def test_an_unsure_transcript_that_a_second_model_hears_otherwise_is_asked_again(first, second, asked, second_asked):
    worker, engine = make_worker(["An", "answer."])
    worker.kit.asr, worker.kit.second_asr = Heard(*first), Heard(*second)
    run_turn(worker, TurnRequest("s", 1, audio=bytes(32000)))
    said = spoken_text(drained(worker.out.tts))
    assert (said == ASK_AGAIN) is asked and (said == "An answer.") is not asked
    assert worker.kit.second_asr.calls == int(second_asked)
    (timings,) = [m for m in drained(worker.outbox) if isinstance(m, TurnTimings)]
    assert ("asr_disagreement" in timings.timings) is second_asked


def test_a_transcript_whisper_looped_on_is_asked_again_and_the_turn_log_says_why():
    """Sure of every token of its loop, Whisper would pass every other rule: the loop itself says it did not hear."""
    worker, engine = make_worker(["Eric", "Lowle?"])
    worker.kit.asr, worker.kit.second_asr = Heard("", -0.05), None
    worker.kit.asr.result = Transcription.decoded("Eric Lowle once been a year. " * 9 + "Eric Lo", -0.05)
    run_turn(worker, TurnRequest("s", 1, audio=bytes(32000)))
    assert spoken_text(drained(worker.out.tts)) == ASK_AGAIN
    (timings,) = [m for m in drained(worker.outbox) if isinstance(m, TurnTimings)]
    assert timings.timings.get("asr_looped") == 1.0 and timings.timings.get("asked_again") == 1.0


@pytest.mark.parametrize("logprob, replies, rendered, noted, asked", [
    (-0.55, ["Sorry,", "I", "didn't", "catch", "that."], True, True, True),  # unsure, and the words made no sense
    (-0.55, ["Paris", "is", "the", "capital."], True, True, False),  # unsure, but the question made sense
    (-0.2, ["Sorry,", "I", "didn't", "catch", "that."], True, False, False),  # sure of the words: no note
    # A prompt the note could not go into (a remote chat model, a transcript prompt): the reply is not read as one.
    (-0.55, ["Sorry,", "I", "didn't", "catch", "that."], False, True, False),
])
def test_words_whisper_was_unsure_of_are_checked_for_sense_by_the_model(logprob, replies, rendered, noted, asked):
    worker, engine = make_worker(replies)
    worker.kit.asr, worker.kit.second_asr = Heard("We chose to rise between Europe.", logprob), None
    notes, text_prompt = [], worker.kit.text_prompt

    def noting(*args, **kwargs):
        note = args[6] if len(args) > 6 else kwargs.get("note", "")
        notes.append(note)
        prompt = text_prompt(*args, **kwargs)  # (no tokenizer here: as if rendered, the note and the question)
        return dataclasses.replace(prompt, text=f"{note}\n{args[1]}") if rendered else prompt

    worker.kit.text_prompt = noting
    run_turn(worker, TurnRequest("s", 1, audio=bytes(32000)))
    assert notes == [SENSE_CHECK if noted else ""]  # where the note goes: tests/workers/llm/test_prompting.py
    (timings,) = [m for m in drained(worker.outbox) if isinstance(m, TurnTimings)]
    assert ("asked_again" in timings.timings) is asked
    assert len(worker.sessions.history("s")) == (0 if asked else 1)  # nonsense stays out of the history


class WordTokenizer:
    """A chat template and a tokenizer of words: where the words are in a rendered prompt, without a model."""

    chat_template = "words"

    def apply_chat_template(self, messages, tools=None, tokenize=False, add_generation_prompt=True) -> str:
        return "".join(f"<{m['role']}> {m['content']} <end> " for m in messages) + "<assistant>"

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": text.split()}


class ReadingEngine(ScriptedEngine):
    """A ScriptedEngine that reads the prompt's words as vLLM does (Delta.words_logprob on the first delta)."""

    reads_words = True

    def __init__(self, words: list[str], read: float | None):
        super().__init__(words)
        self.read, self.judged = read, []

    async def stream(self, prompt: EnginePrompt, sampling: SamplingSettings, request_id: str):
        self.prompts.append(prompt)
        self.judged.append(sampling.judge_words)
        for i, word in enumerate(self.words[: sampling.max_tokens]):
            await asyncio.sleep(self.step_s)
            yield Delta(("" if i == 0 else " ") + word, 1, 20 if i == 0 else None,
                        words_logprob=self.read if i == 0 and sampling.judge_words else None)


@pytest.mark.parametrize("logprob, read, judged, asked", [
    (-0.35, -6.0, True, True),  # a little unsure, and nonsense to the model: asked again
    (-0.35, -2.0, True, False),  # a little unsure, but a likely question: answered
    (-0.1, -6.0, False, False),  # sure of the words: not read
    (-0.35, None, True, False),  # the engine could not read them (cached): answered, as Whisper alone says
])
def test_words_whisper_was_unsure_of_are_read_by_the_model_before_any_reply_goes_out(logprob, read, judged, asked):
    worker, _ = make_worker([])
    worker.kit.engine = engine = ReadingEngine(["Paris", "is", "lovely."], read)
    worker.kit.asr, worker.kit.second_asr = Heard("Is my murder flying insect?", logprob), None
    worker.kit.prompts = PromptBuilder(WordTokenizer(), "chat", worker.config.llm.persona)
    run_turn(worker, TurnRequest("s", 1, audio=bytes(32000)))
    assert engine.judged == [judged]
    assert engine.prompts[0].words_from_end == ((5, 2) if judged else None)  # 5 words, then "<end> <assistant>"
    said = spoken_text(drained(worker.out.tts))
    assert said == (ASK_AGAIN if asked else "Paris is lovely.")
    outputs = drained(worker.outbox)
    deltas = [m.delta for m in outputs if isinstance(m, ReplyText) and not m.done]
    assert ("".join(deltas).strip() == ASK_AGAIN) is asked  # asked again: not a word of the reply reached the page
    (timings,) = [m for m in outputs if isinstance(m, TurnTimings)]
    assert ("asked_again" in timings.timings) is asked
    assert ("words_logprob" in timings.timings) is (read is not None and judged)
    assert ("words_unread" in timings.timings) is (read is None and judged)
    assert timings.timings["prompt_tokens"] == 20  # the first delta's own timings, asked again or not
    assert len(worker.sessions.history("s")) == (0 if asked else 1)
    assert engine.prompts[0].text is not None and SENSE_CHECK not in engine.prompts[0].text  # read, not noted
    if asked:
        assert engine.aborted  # the reply's request was stopped


def test_without_the_reading_the_words_get_the_sense_note_even_on_an_engine_that_reads():
    worker, _ = make_worker([])
    worker.config.asr.reading_below = None  # reading off
    worker.kit.engine = engine = ReadingEngine(["Sorry,", "I", "didn't", "catch", "that."], -6.0)
    worker.kit.asr, worker.kit.second_asr = Heard("Is my murder flying insect?", -0.55), None
    worker.kit.prompts = PromptBuilder(WordTokenizer(), "chat", worker.config.llm.persona)
    run_turn(worker, TurnRequest("s", 1, audio=bytes(32000)))
    assert engine.judged == [False] and engine.prompts[0].words_from_end is None
    assert SENSE_CHECK in engine.prompts[0].text
    (timings,) = [m for m in drained(worker.outbox) if isinstance(m, TurnTimings)]
    assert timings.timings["asked_again"] == 1 and "words_logprob" not in timings.timings


@pytest.mark.parametrize("reply, asked", [
    ("Sorry, I didn't catch that.", True), ("I didn’t catch that, could you repeat?", True),
    ("Sorry, I couldn't understand you.", True), ("I did not hear you clearly.", True),
    ("I'm sorry, I didn't quite catch that.", True), ("Hmm, I couldn't make out what you said.", True),
    ("Sorry to hear that. I didn't catch a cold.", False), ("Paris.", False), ("I caught that fish.", False),
    ("I didn't hear about that news yet.", False), ("I couldn't understand why the sky is blue either.", False),
    ("Paris is the capital. I didn't catch that at first, but it is a lovely city with museums and food.", False),
])
def test_a_reply_that_says_it_did_not_catch_the_words(reply, asked):
    assert asks_again(reply) is asked


def test_a_model_written_call_runs_only_tools_it_was_shown():
    """A session that offers one tool must not let the model's text run a built-in it was never shown (the
    calculator, with arguments nobody checked): only tools offered this turn, planned for it, or in its history."""
    hidden = ['<tool_call>{"name": "calculate", "arguments": {"expression": "2 + 2"}}</tool_call>']
    worker, engine = tool_worker([hidden, ["Sorry."]],
                                 Tool("lookup", "where an item is in the shop", {"type": "object"}, lambda item: "x"))
    run_turn(worker, TurnRequest("s", 1, text="Where is the item lookup for widgets?"))
    (used,) = [m for m in drained(worker.outbox) if isinstance(m, ToolUsed)]
    assert (used.name, used.outcome, used.ok) == ("calculate", "unknown_tool", False)
    assert "lookup" in used.result  # the error names what it may call
    # The refused call is in the history now: that gives it no right to run the next time either.
    engine.rounds = [hidden, ["Sorry."]]
    run_turn(worker, TurnRequest("s", 2, text="Where is the item lookup for gadgets?"))
    (again,) = [m for m in drained(worker.outbox) if isinstance(m, ToolUsed)]
    assert (again.name, again.outcome) == ("calculate", "unknown_tool")


def test_a_long_tool_answer_is_said_within_the_reply_limit_in_pieces():
    words = " ".join(f"item{i}." for i in range(200))
    worker, engine = tool_worker([CALL], Tool("lookup", "", {"type": "object"}, lambda item: words))
    run_turn(worker, TurnRequest("s", 1, text="How many widgets are there?"))
    pieces = [p.text for p in drained(worker.out.tts) if isinstance(p, TtsPiece) and p.text]
    assert len(pieces) > 1
    assert sum(len(p.split()) for p in pieces) <= worker.config.llm.max_reply_words


def test_a_sum_the_calculator_refuses_is_said_so_without_asking_the_model():
    worker, engine = tool_worker([["It", "is", "infinity."]])
    run_turn(worker, TurnRequest("s", 1, text="What is 5 divided by 0?"))
    assert engine.prompts == []  # no generation for it
    assert spoken_text(drained(worker.out.tts)) == "Sorry, I can't work that out: division by zero."


class HermesTokenizer(WordTokenizer):
    """WordTokenizer with a template that writes tool calls in <tool_call> tags, as Qwen's does."""

    chat_template = "words, calls in <tool_call> tags"


class SamplingRounds(RoundsEngine):
    def __init__(self, rounds: list[list[str]]):
        super().__init__(rounds)
        self.samplings: list[SamplingSettings] = []

    async def stream(self, prompt: EnginePrompt, sampling: SamplingSettings, request_id: str):
        self.samplings.append(sampling)
        async for delta in super().stream(prompt, sampling, request_id):
            yield delta


def test_a_required_call_is_written_from_the_calls_opening_under_a_grammar_of_the_clients_functions():
    import jsonschema

    worker, _ = tool_worker([])
    worker.kit.prompts = PromptBuilder(HermesTokenizer(), "chat", worker.config.llm.persona)
    # What the model writes after the opening the prompt ends with: the call's JSON, under the grammar.
    worker.kit.engine = engine = SamplingRounds([['{"name":', '"order_status",', '"arguments":', '{"id":', '"9"}}']])
    # "What time is it?" would have the time tool called for the model: a required call comes first.
    run_turn(worker, TurnRequest("s", 1, text="What time is it?", client_tools=(ORDER,), must_call=("order_status",)))
    assert engine.prompts[0].text.endswith("<assistant><tool_call>\n")
    assert engine.samplings[0].max_tokens == FORCED_CALL_TOKENS  # a call's JSON, not a spoken reply's length
    schema = json.loads(engine.samplings[0].json_schema)
    jsonschema.validate({"name": "order_status", "arguments": {"id": "9"}}, schema)
    for wrong in ({"name": "get_time", "arguments": {}}, {"name": "order_status", "arguments": {"id": 9}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)
    outputs = drained(worker.outbox)
    (asked,) = [m for m in outputs if isinstance(m, ToolCallRequested)]
    assert (asked.name, json.loads(asked.arguments)) == ("order_status", {"id": "9"})
    assert not [m for m in outputs if isinstance(m, ToolUsed)]  # the time tool was not called for it
    assert spoken_text(drained(worker.out.tts)) == ""

    # Nothing required: the model decides, free of any grammar, and the time is told.
    worker.kit.engine = engine = SamplingRounds([])
    run_turn(worker, TurnRequest("t", 1, text="What time is it?", client_tools=(ORDER,)))
    assert engine.samplings == [] and [m for m in drained(worker.outbox) if isinstance(m, ToolUsed)]


def test_a_call_written_where_no_tool_may_be_called_is_never_spoken():
    """tool_choice "none" after the client's result: the model, shown its own call, may write it again."""
    worker, engine = tool_worker([ORDER_CALL, ['{"name":', '"order_status",', '"arguments":', '{"id":', '"4512"}}']])
    run_turn(worker, TurnRequest("s", 1, text="Where is order 4512?", client_tools=(ORDER,)))
    (asked,) = [m for m in drained(worker.outbox) if isinstance(m, ToolCallRequested)]
    run_turn(worker, TurnRequest("s", 2, tools=(), tool_outputs=(ToolOutput(asked.call_id, '{"arrives": "Friday"}'),)))
    assert spoken_text(drained(worker.out.tts)) == APOLOGY
    assert "order_status" not in "".join(m.delta for m in drained(worker.outbox) if isinstance(m, ReplyText))


def test_a_required_call_cut_short_fails_the_turn_instead_of_answering_in_words():
    worker, _ = tool_worker([])
    worker.kit.prompts = PromptBuilder(HermesTokenizer(), "chat", worker.config.llm.persona)
    worker.kit.engine = engine = SamplingRounds([['{"name":', '"order_status",', '"arguments":', '{"id":'],
                                                 ["It", "is", "on", "its", "way."]])
    run_turn(worker, TurnRequest("s", 1, text="Where is order 4512?", client_tools=(ORDER,),
                                 must_call=("order_status",), max_tokens=4))
    assert engine.samplings[0].max_tokens == 4  # the client's own cap holds
    outputs = drained(worker.outbox)
    (error,) = [m for m in outputs if isinstance(m, SessionError)]
    assert error.code == "llm_failed" and "order_status could not be read" in error.message
    assert [m.reason for m in outputs if isinstance(m, TurnEnded)] == ["error"]
    assert len(engine.prompts) == 1 and spoken_text(drained(worker.out.tts)) == ""  # no unforced second round


# --- the camera in a turn: its picture answers, its words are data and order nothing ------------------------------
class FakeStage:
    """The vision stage with its analysis given: every picture shows `scene` (the stage itself:
    tests/workers/vision/test_vision_stage.py)."""

    def __init__(self, scene):
        self.scene = scene

    def seen(self, session_id, frame, urgent=False):
        from concurrent.futures import Future
        from types import SimpleNamespace

        done: Future = Future()
        done.set_result(SimpleNamespace(scene=self.scene, thumbnail=b""))
        return done

    def latest(self, session_id):
        return None

    def forget(self, session_id) -> None:
        return None

    def close(self) -> None:
        return None


class ToolsTokenizer(WordTokenizer):
    """WordTokenizer whose template writes the tools it is given into the system prompt, as Qwen's does: so tools
    can be offered beside the question (PromptBuilder.tools_beside)."""

    chat_template = "words, tools in the system prompt"

    def apply_chat_template(self, messages, tools=None, tokenize=False, add_generation_prompt=True) -> str:
        section = " # Tools " + " ".join(t["function"]["name"] for t in tools) if tools else ""
        return "".join(f"<{m['role']}> {m['content']}{section if i == 0 and m['role'] == 'system' else ''} <end> "
                       for i, m in enumerate(messages)) + "<assistant>"


LOOKUP = Tool("lookup", "where an item is in the shop", {"type": "object"}, lambda item: "aisle 4")


def camera_worker(rounds: list[list[str]], rows: tuple[str, ...] = (), objects: tuple[str, ...] = ()
                  ) -> tuple[LlmWorker, RoundsEngine]:
    """A worker with the built-ins and an operator's tool, whose camera shows a sign of `rows` and `objects`."""
    from workers.vision.objects import ObjectGuess, ObjectReading
    from workers.vision.ocr import TextLine, TextReading
    from workers.vision.scene import Scene

    worker, engine = tool_worker(rounds, LOOKUP)
    worker.kit.prompts = PromptBuilder(ToolsTokenizer(), "chat", worker.config.llm.persona)
    lines = tuple(TextLine(r, 0.99, (0, 40 * i, 100, 40 * i + 30), i) for i, r in enumerate(rows))
    guesses = tuple(ObjectGuess(967, o, o, "cup", 0.8, 0.8) for o in objects)
    worker.looking.stage = FakeStage(Scene((640, 480), text=TextReading(lines, 0.1),
                                           objects=ObjectReading(guesses, guesses, 0.05)))
    return worker, engine


def roles(prompt: EnginePrompt) -> list[tuple[str, str]]:
    import re

    return re.findall(r"<(system|user|assistant|tool)> (.*?) <end>", prompt.text, re.S)


@pytest.mark.parametrize("sign", SIGNS, ids=[s.name for s in SIGNS])
def test_a_signs_orders_reach_the_model_only_as_quoted_data_and_no_tool_or_function_is_called(sign):
    """The model, obeying a sign, writes a call of the client's function: nothing is handed to the client and no
    tool runs; the sign's words are in the user's message only, and no tool is offered beside the question."""
    worker, engine = camera_worker([ORDER_CALL, ["It", "is", "a", "sign."]], rows=sign.rows)
    run_turn(worker, TurnRequest("s", 1, text="What is this sign about?", frames=(b"picture",),
                                 client_tools=(ORDER,)))
    outputs = drained(worker.outbox)
    assert not [m for m in outputs if isinstance(m, ToolCallRequested)]
    assert not [m for m in outputs if isinstance(m, ToolUsed) and m.ok]
    assert spoken_text(drained(worker.out.tts)) == "It is a sign."
    said = roles(engine.prompts[0])
    assert [role for role, _ in said] == ["system", "user"]  # no system message beside the question: no tools
    assert said[0][1].endswith("# Tools order_status")  # the client's functions in the prefix, as every turn
    assert neutral(sign.rows[-1]) in said[1][1] and neutral(sign.rows[-1]) not in said[0][1]


def test_in_a_picture_turn_a_tool_the_users_own_words_ask_for_may_still_be_called():
    worker, engine = camera_worker([CALL, []], rows=("WIDGETS", "SALE"))
    run_turn(worker, TurnRequest("s", 1, text="Where is the item on this sign in the shop?", frames=(b"picture",)))
    (used,) = [m for m in drained(worker.outbox) if isinstance(m, ToolUsed)]
    assert (used.name, used.ok) == ("lookup", True)
    assert "# Tools lookup" in roles(engine.prompts[0])[1][1]  # offered beside it, by the user's words


def test_a_date_on_the_label_is_read_not_the_clocks_and_what_time_it_is_stays_the_clocks():
    worker, engine = camera_worker([], rows=("BEST BEFORE", "12 MARCH 2027"))
    run_turn(worker, TurnRequest("s", 1, text="What date is on the label?", frames=(b"picture",)))
    assert spoken_text(drained(worker.out.tts)) == 'It says "12 MARCH 2027".'
    assert not [m for m in drained(worker.outbox) if isinstance(m, ToolUsed)] and engine.prompts == []
    run_turn(worker, TurnRequest("s", 2, text="What time is it?", frames=(b"picture",)))
    assert [m.name for m in drained(worker.outbox) if isinstance(m, ToolUsed)] == ["get_current_time"]


def test_what_is_in_the_cup_is_what_the_classifier_saw():
    worker, engine = camera_worker([["The", "cup", "is", "empty."]], objects=("a cup of coffee (espresso)",))
    run_turn(worker, TurnRequest("s", 1, text="What is in the cup?", frames=(b"picture",)))
    assert spoken_text(drained(worker.out.tts)) == "It looks like coffee (espresso)."


def test_a_price_is_read_for_how_much_does_it_cost_only_when_the_picture_shows_one():
    worker, engine = camera_worker([], rows=("COFFEE", "$4.50"))
    run_turn(worker, TurnRequest("s", 1, text="How much does it cost?", frames=(b"picture",)))
    assert spoken_text(drained(worker.out.tts)) == 'It says "$4.50".'
    worker, engine = camera_worker([["About", "forty", "thousand."]], rows=("EXIT",))
    run_turn(worker, TurnRequest("s", 1, text="How much does it cost?", frames=(b"picture",)))
    assert "camera" not in engine.prompts[0].text  # a picture without a price: the words are about something else


def test_a_follow_up_to_a_camera_question_looks_at_the_picture_again():
    worker, engine = camera_worker([["The", "latte", "is", "4.50."], ["The", "mocha", "is", "5.20."]],
                                   rows=("LATTE 4.50", "MOCHA 5.20"))
    run_turn(worker, TurnRequest("s", 1, text="How much is the latte on this menu?", frames=(b"picture",)))
    run_turn(worker, TurnRequest("s", 2, text="And what about the other one?", frames=(b"picture",)))
    said = roles(engine.prompts[1])
    assert [role for role, _ in said] == ["system", "user", "assistant", "user"]
    assert PICTURE_OPEN in said[1][1] and PICTURE_OPEN in said[3][1]  # the history's picture, and the new one
    assert '"MOCHA 5.20"' in said[3][1]
    run_turn(worker, TurnRequest("s", 3, text="Who wrote Hamlet?", frames=(b"picture",)))
    assert PICTURE_OPEN not in roles(engine.prompts[-1])[-1][1]  # not a follow-up: no picture


def test_a_signs_orders_kept_in_the_history_call_nothing_on_a_later_plain_turn():
    """The sign's words stay in the history with the question they answered, in front of the model on the next
    turn too: that turn also calls only what the user's own words ask for, never the client's function."""
    sign = SIGNS[0]
    worker, engine = camera_worker([["It", "is", "a", "sign."], ORDER_CALL, ["Nothing", "else."]], rows=sign.rows)
    run_turn(worker, TurnRequest("s", 1, text="What is this sign about?", frames=(b"picture",),
                                 client_tools=(ORDER,)))
    drained(worker.outbox)
    run_turn(worker, TurnRequest("s", 2, text="Okay, and anything else?", client_tools=(ORDER,)))
    outputs = drained(worker.outbox)
    assert PICTURE_OPEN in engine.prompts[1].text  # (the history's picture is in front of the model)
    assert not [m for m in outputs if isinstance(m, ToolCallRequested)]
    assert not [m for m in outputs if isinstance(m, ToolUsed) and m.ok]


def test_what_is_remembered_of_the_user_stays_in_the_prompt_after_a_tools_result():
    """The note of what the user told in other sessions goes into every round's prompt, the one after a tool's
    result too (it was dropped there: "what's the weather where I live?" lost where they live)."""
    worker, engine = tool_worker([CALL, []], Tool("lookup", "", {"type": "object"}, lambda item: 1 / 0))
    worker.remembering.recall = lambda req, question: ("", "The user said earlier: I live in Lyon.")
    notes, text_prompt = [], worker.kit.text_prompt

    def noting(*args, **kwargs):
        notes.append(args[6] if len(args) > 6 else kwargs.get("note", ""))
        return text_prompt(*args, **kwargs)

    worker.kit.text_prompt = noting
    run_turn(worker, TurnRequest("s", 1, text="Where are the widgets?"))
    assert len(engine.prompts) == 2 and len(notes) == 2
    assert all("I live in Lyon." in note for note in notes), notes
