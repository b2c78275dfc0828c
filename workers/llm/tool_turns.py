"""Tools in the LLM worker's turns: which a turn may call and which the model is shown, running the calls (with a
filler line for a slow one), saying their results, and handing a client's own tools' calls to the client."""

from __future__ import annotations

import asyncio
import json
import time

from vita.messages import (
    ReplyText,
    ToolCallRequested,
    ToolUsed,
    TurnRequest,
)
from workers.llm.prompting import ConversationHistory
from workers.llm.speech_pieces import ReplyShaper, SpeechClock
from workers.llm.turn_run import TurnRun
from workers.tools.client_tools import SOURCE as CLIENT_TOOL
from workers.tools.client_tools import AwaitedCalls, as_tools, new_call_id
from workers.tools.in_turn import FILLER
from workers.tools.intents import spoken_answer
from workers.tools.registry import ToolBox, ToolCall, ToolOutcome
from workers.tools.relevance import relevant


class ToolTurns:
    """A part of LlmWorker (workers/llm/worker.py): its methods run on the worker itself."""

    @staticmethod
    def _offered(tools: ToolBox | None, question: str | None, recent: tuple[str, ...] = ()) -> ToolBox | None:
        """The tools the model itself is shown for this question: a client's own, and the operator's (MCP) that
        share a word with it or were just used (relevance.py); all of the operator's when `question` is None
        (a template that cannot offer them beside the question, or a language the word match does not know).
        The built-ins are called for it when a question plainly needs them (intents.py): shown to the model
        too, they cost the answer set 2-3 of 42 questions ("Yes, penguins can fly." became "Penguins can fly.")
        and it called them for only half of the questions."""
        if not tools:
            return None
        theirs = [t for t in tools.tools.values() if t.source == CLIENT_TOOL]
        operators = ToolBox([t for t in tools.tools.values() if t.source not in ("builtin", CLIENT_TOOL)])
        if question is not None:
            operators = relevant(question, operators, recent)
        offered = ToolBox([*theirs, *operators.tools.values()])
        return offered or None

    def _offered_for(self, tools: ToolBox | None, question: str, history: ConversationHistory) -> ToolBox | None:
        """`_offered` for a turn of this worker: by relevance where the prompt can put them beside the question."""
        if not self._tools_beside():
            return self._offered(tools, None)
        recent = tuple(call["function"]["name"] for ex in list(history)[-2:] for m in ex.tool_messages
                       for call in m.get("tool_calls") or () if isinstance(call.get("function"), dict))
        return self._offered(tools, question, recent)

    def _tools_beside(self) -> bool:
        """Offered beside the question (each turn only the tools it may need), or in the prompt's usual place
        (all of them, every turn, so that the cached prefix stays the same)."""
        language = self.config.asr.language
        return (self.prompts is not None and self.prompts.tools_beside
                and (language is None or language.startswith("en")))

    def _session_tools(self, req: TurnRequest) -> ToolBox | None:
        """The tools this turn may call: the session's choice; in a speculative turn (which may yet be discarded)
        only those that change nothing; none when tools.max_calls is 0."""
        if not self.config.tools.max_calls:
            return None
        box = self.toolbox.only(list(req.tools) if req.tools is not None else None, read_only=req.speculative)
        if req.client_tools and self.prompts.style == "chat":  # run by the client: safe in a speculative turn too
            box = ToolBox([*box.tools.values(), *as_tools(req.client_tools)])
        return box or None

    def _for_the_client(self, req: TurnRequest, run: TurnRun, calls: list[ToolCall]) -> bool:
        """Calls of the client's own tools go to the client (the others in the same reply are left out: the
        client answers first); the turn then waits for its results, as a turn of its own."""
        theirs = [c for c in calls if not c.error and (tool := run.tools.tools.get(c.name)) is not None
                  and tool.source == CLIENT_TOOL]
        if not theirs:
            return False
        named = [(new_call_id(), c) for c in theirs]
        self.awaited[req.session_id] = AwaitedCalls.of(run.user_text, run.tool_messages, named)
        for call_id, call in named:
            self._publish(ToolCallRequested(req.session_id, req.turn_id, call_id, call.name,
                                            json.dumps(call.arguments, ensure_ascii=False)))
        return True

    def _say_results(self, sid: str, tid: int, calls: list[ToolCall], outcomes: list[ToolOutcome]) -> list[str]:
        """The tools' results, said as they are, shown as the reply's text. Asked to put them in words, the bundled
        1.5B model said "The current date, day of the week and time is 2..." for 125 x 48, or nothing, or called
        the tool again (scripts/eval/tools.py)."""
        return self._say_as_is(sid, tid, [spoken_answer(call, o.result)
                                          for call, o in zip(calls, outcomes, strict=False)])

    def _say_as_is(self, sid: str, tid: int, answers: list[str]) -> list[str]:
        """Answers said as they are, shown as the reply's text: the pieces to speak."""
        # Said within the reply's word limit and in speakable pieces, as a generated reply is: an operator's tool
        # may answer at length.
        shaper = ReplyShaper(self.config.llm.max_reply_words)
        pieces = [piece for answer in answers for piece in shaper.feed(answer + " ")]
        pieces += shaper.finish(cut_by_token_limit=False)
        for piece in pieces:
            self._publish(ReplyText(sid, tid, piece + " "))
        return pieces

    async def _run_calls(self, req: TurnRequest, run: TurnRun, calls: list[ToolCall], text: str,
                         clock: SpeechClock, gen_started: float, box: ToolBox | None = None) -> list[ToolOutcome]:
        """Run tool calls (the model's, written as `text`, or planned for it) from `box` (default: the turn's
        tools), each result shown on the page and added to the turn's context; a call still running after
        tools.filler_after_ms gets "Let me check." said first. Returns their outcomes, in order."""
        box = run.tools if box is None else box
        readable = [c for c in calls if not c.error]
        run.tool_messages.append({"role": "assistant", "content": "" if readable else text.strip(),
                                  "tool_calls": [{"type": "function", "function": {"name": c.name,
                                                                                   "arguments": c.arguments}}
                                                 for c in readable]})
        filler_s = self.config.tools.filler_after_ms / 1000
        outcomes = []
        for call in calls:
            task = asyncio.create_task(box.call(call, {"timezone": req.timezone}))
            try:
                if filler_s and not run.spoken:
                    done, _ = await asyncio.wait({task}, timeout=filler_s)
                    if not done:  # the line must not go dead while the tool works
                        await self._send_piece(req, run.spoken, FILLER, run.timings, gen_started)
                        clock.handed(FILLER, time.monotonic())
                outcome = await task
            finally:
                task.cancel()
            run.tool_messages.append(outcome.as_message())
            timings = run.timings
            timings["tool_calls"] = timings.get("tool_calls", 0.0) + 1
            timings["tool_s"] = timings.get("tool_s", 0.0) + outcome.duration_s
            timings["tool_result_chars"] = timings.get("tool_result_chars", 0.0) + len(outcome.result)
            if not outcome.ok:
                timings["tool_errors"] = timings.get("tool_errors", 0.0) + 1
            self._publish(ToolUsed(req.session_id, req.turn_id, outcome.name or "(unreadable call)",
                                   json.dumps(outcome.arguments, ensure_ascii=False), outcome.result, outcome.ok,
                                   outcome.outcome, outcome.duration_s))
            outcomes.append(outcome)
        return outcomes
