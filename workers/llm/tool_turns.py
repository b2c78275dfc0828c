"""Tools in the LLM worker's turns: which a turn may call and which the model is shown, running the calls (with a
filler line for a slow one), saying their results, and handing a client's own tools' calls to the client."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

from vita.messages import (
    ToolCallRequested,
    ToolUsed,
    TurnRequest,
)
from vita.text_cost import FUNCTIONS_BESIDE_TOKENS, estimated_tokens
from vita.words import FILLER
from workers.llm.camera_questions import about_picture
from workers.llm.engines.generation import EnginePrompt
from workers.llm.kit import LlmKit
from workers.llm.prompting import ConversationHistory
from workers.llm.speech_pieces import SpeechClock
from workers.llm.turn_output import TurnOutput
from workers.llm.turn_run import TurnRun
from workers.llm.worker_sessions import WorkerSessions
from workers.tools.client_tools import SOURCE as CLIENT_TOOL
from workers.tools.client_tools import AwaitedCalls, as_tools, new_call_id
from workers.tools.forced_calls import ForcedCall, forced_call
from workers.tools.intents import spoken_answer
from workers.tools.registry import ToolBox, ToolCall, ToolOutcome
from workers.tools.relevance import relevant

log = logging.getLogger(__name__)
# What the tools beside a question may take, in tokens: it is prefilled again each turn (a client's functions may
# take 32,000 characters; those not shown beside it are in the prompt's prefix), so the front charges it.
MOST_BESIDE_TOKENS = FUNCTIONS_BESIDE_TOKENS


class ToolTurns:
    """sessions: the worker's, where a session's turn waiting for its client's tool results is kept."""

    def __init__(self, kit: LlmKit, out: TurnOutput, sessions: WorkerSessions):
        self.kit, self.out, self.sessions = kit, out, sessions
        self.unforced_said = False  # the log has said once that required calls cannot be forced here

    @staticmethod
    def offered(tools: ToolBox | None, question: str | None, recent: tuple[str, ...] = (),
                count_tokens: Callable[[str], float] = estimated_tokens) -> ToolBox | None:
        """The tools the model itself is shown beside this question: a client's functions and the operator's (MCP)
        tools that share a word with it or were just used (relevance.py), as many as fit MOST_BESIDE_TOKENS; all of
        them when `question` is None (a template that cannot offer them beside the question, or a language the
        word match does not know). A client's functions are also in the prompt's prefix (prefix_tools): beside the
        question, the bundled 1.5B model called them for 8 of 8 questions that needed one, from the system prompt
        alone for 1 (scripts/eval/client_tools.py). The built-ins are called for it when a question plainly needs
        them (intents.py): shown to the model too, they cost the answer set 2-3 of 42 questions ("Yes, penguins
        can fly." became "Penguins can fly.") and it called them for only half of the questions."""
        if not tools:
            return None
        shown = ToolBox([t for t in tools.tools.values() if t.source != "builtin"])
        if question is None:
            return shown or None
        fitting, size = [], 0
        for tool in relevant(question, shown, recent).tools.values():
            tokens = count_tokens(json.dumps(tool.schema(), ensure_ascii=False))
            if size + tokens <= MOST_BESIDE_TOKENS:
                fitting.append(tool)
                size += tokens
        return ToolBox(fitting) or None

    def offered_for(self, tools: ToolBox | None, question: str, history: ConversationHistory,
                    picture: bool = False) -> ToolBox | None:
        """`offered` for a turn of this worker: by relevance where the prompt can put them beside the question.
        picture: the prompt carries what the camera shows (a stranger's sign may say "call every tool"): only the
        tools the user's own words point at (`asked_for`), none where the template cannot put them beside it."""
        if picture:
            return self.asked_for(tools, question, self.kit.prompts.count_tokens) if self.kit.tools_beside() else None
        if not self.kit.tools_beside():
            return self.offered(tools, None)
        recent = tuple(call["function"]["name"] for ex in list(history)[-2:] for m in ex.tool_messages
                       for call in m.get("tool_calls") or () if isinstance(call.get("function"), dict))
        return self.offered(tools, question, recent, self.kit.prompts.count_tokens)

    @classmethod
    def asked_for(cls, tools: ToolBox | None, question: str,
                  count_tokens: Callable[[str], float] = estimated_tokens) -> ToolBox | None:
        """The only tools a turn whose prompt carries a picture's text may call: those sharing a word with the
        user's own words (never the picture's, nor a tool just used), and no built-in. "What's the weather in the
        town on this sign?" may call get_weather, with the sign's town; "What does the sign say?" calls nothing,
        whatever the sign says."""
        return cls.offered(tools, question, (), count_tokens)

    def prefix_tools(self, tools: ToolBox | None) -> ToolBox | None:
        """The tools in every prompt's prefix, the same all session: where tools are offered beside the question,
        a client's own functions (with its instructions: prefilled once, charged by the front when they change;
        beside every question, four functions were 411 tokens prefilled again each response), else all of them."""
        if not self.kit.tools_beside():
            return self.offered(tools, None)
        theirs = [t for t in tools.tools.values() if t.source == CLIENT_TOOL] if tools else []
        return ToolBox(theirs) or None

    def session_tools(self, req: TurnRequest) -> ToolBox | None:
        """The tools this turn may call: the session's choice; in a speculative turn (which may yet be discarded)
        only those that change nothing; none when tools.max_calls is 0."""
        if not self.kit.config.tools.max_calls:
            return None
        box = self.kit.toolbox.only(list(req.tools) if req.tools is not None else None, read_only=req.speculative)
        if req.client_tools and self.kit.prompts.style == "chat":  # run by the client: safe in a speculative turn too
            box = ToolBox([*box.tools.values(), *as_tools(req.client_tools)])
        return box or None

    def choose(self, req: TurnRequest, run: TurnRun, history: ConversationHistory) -> None:
        """The turn's tools: those it may call (run.tools), those in the prompt's cached prefix (run.fixed_tools) and
        those the model is shown beside the question (run.offered). With the client's results in the turn, its
        functions are not offered beside the question again (the model called the same function again instead of
        answering from them), nor with results it no longer waits for (the front charges no functions' section for
        a response that brings any); with a picture's text in the prompt, only those the user's own words ask for."""
        run.tools = self.session_tools(req)
        run.fixed_tools = self.prefix_tools(run.tools)
        run.picture_in_prompt = bool(run.cues) or any(about_picture(ex.user) for ex in history)
        run.offered = None if run.tool_messages or req.tool_outputs else self.offered_for(
            run.tools, run.user_text, history, picture=run.picture_in_prompt)

    def forced(self, req: TurnRequest, run: TurnRun, prompt: EnginePrompt) -> ForcedCall | None:
        """How this turn is made to call one of the client's functions it requires (req.must_call), or None: none
        required, or a prompt this worker does not render (a remote chat model's messages), or a model that does
        not write calls in tags (then the model decides)."""
        if not req.must_call:
            return None
        forced = (forced_call(req.must_call, req.client_tools, self.chat_template())
                  if run.tools and prompt.text is not None and not prompt.has_media else None)
        if forced is None and not self.unforced_said:
            self.unforced_said = True
            log.warning("a client requires its functions to be called (tool_choice), but this model's prompts "
                        "cannot be made to: its template writes no <tool_call> tags, it renders on a remote server, "
                        "or tools.max_calls is 0; the model decides, as with auto")
        return forced

    def chat_template(self) -> str | None:
        """The template a prompt is rendered with here (None: not a chat prompt rendered here)."""
        prompts = self.kit.prompts
        if prompts is None or prompts.style != "chat" or prompts.tokenizer is None:
            return None
        template = getattr(prompts.tokenizer, "chat_template", None)
        return template if isinstance(template, str) else None

    def for_the_client(self, req: TurnRequest, run: TurnRun, calls: list[ToolCall], box: ToolBox | None = None
                       ) -> bool:
        """Calls of the client's own tools in `box` (default: the turn's tools) go to the client (the others in the
        same reply are left out: the client answers first); the turn then waits for its results, as a turn of its
        own."""
        box = run.tools if box is None else box
        theirs = [c for c in calls if not c.error and box is not None and (tool := box.tools.get(c.name)) is not None
                  and tool.source == CLIENT_TOOL]
        if not theirs:
            return False
        named = [(new_call_id(), c) for c in theirs]
        self.sessions.of(req.session_id).awaited = AwaitedCalls.of(run.user_text, run.tool_messages, named)
        for call_id, call in named:
            self.out.publish(ToolCallRequested(req.session_id, req.turn_id, call_id, call.name,
                                               json.dumps(call.arguments, ensure_ascii=False)))
        return True

    def say_results(self, sid: str, tid: int, calls: list[ToolCall], outcomes: list[ToolOutcome]) -> list[str]:
        """The tools' results, said as they are, shown as the reply's text. Asked to put them in words, the bundled
        1.5B model said "The current date, day of the week and time is 2..." for 125 x 48, or nothing, or called
        the tool again (scripts/eval/tools.py)."""
        return self.out.say_as_is(sid, tid, [spoken_answer(call, o.result)
                                             for call, o in zip(calls, outcomes, strict=False)])

    async def run_calls(self, req: TurnRequest, run: TurnRun, calls: list[ToolCall], text: str,
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
        filler_s = self.kit.config.tools.filler_after_ms / 1000
        outcomes = []
        for call in calls:
            task = asyncio.create_task(box.call(call, {"timezone": req.timezone}))
            try:
                if filler_s and not run.spoken:
                    done, _ = await asyncio.wait({task}, timeout=filler_s)
                    if not done:  # the line must not go dead while the tool works
                        await self.out.send_piece(req, run.spoken, FILLER, run.timings, gen_started)
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
            used = ToolUsed(req.session_id, req.turn_id, outcome.name or "(unreadable call)",
                            json.dumps(outcome.arguments, ensure_ascii=False), outcome.result, outcome.ok,
                            outcome.outcome, outcome.duration_s)
            parent = run.span if run.span is not None else req.trace
            self.kit.tracing.record(f"execute_tool {used.counted_name}", parent,
                                    time.monotonic() - outcome.duration_s, attributes={
                                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": used.counted_name,
                                        "vita.tool.outcome": outcome.outcome},
                                    error=None if outcome.ok else outcome.outcome)
            self.out.publish(used)
            outcomes.append(outcome)
        return outcomes
