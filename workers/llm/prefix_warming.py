"""Prefilling the next prompt's prefix while the user listens (vLLM's prefix cache), so the next turn prefills only
its question; and warming the engine up before the first."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

from vita.capacity import seats_for
from vita.messages import ClientTool, MeasuredSpeed
from workers.llm.engines.generation import SamplingSettings
from workers.llm.engines.local_engine import EngineFailed, LocalVllmEngine
from workers.llm.kit import LlmKit
from workers.llm.prompting import NEVER_WRITTEN, ConversationHistory
from workers.llm.tool_turns import ToolTurns
from workers.llm.turn_run import WARM_DELAY_S
from workers.tools.forced_calls import forced_call
from workers.tools.registry import ToolBox

# Questions of different lengths, as several users' first turns would bring (their answers are not kept). Each
# opens with a marker no user says: the prefix cache keeps blocks of 32 tokens, and a block that held the persona
# and a real question's first words would be found by a user's first question, whose words would then go unread.
WARM_UP_QUESTIONS = ("[warm-up] What is the capital of France?", "[warm-up] How many legs does a spider have?",
                     "[warm-up] Could you tell me what the weather is usually like in spring where you are?",
                     "[warm-up] Why?")
WARM_UP_TOKENS = 8  # decoded together: the batch shapes of the first turns' decode (each question 2 more than the
# one before, so the batch passes through every size down to one, as real replies that end apart do, unless a
# question's answer ends early)
# The speed measured (--max_users auto): a question whose answer runs on, with its own marker (see above).
MEASURED_QUESTION = "[warm-up] Tell me about the sea."
MEASURED_TOKENS = 16
# Typed text is priced by the engine's prefill speed, measured on a paste of about 200 tokens.
MIN_PREFILL_MEASURED = 32  # prefilled tokens below which a measured prefill speed says little
PASTED_TEXT = "[warm-up] Please sort this list: " + ", ".join(f"item {n} of the list" for n in range(40)) + "."
MIN_MEASURED_TOKENS = 4  # a decoding speed from fewer is noise: the seats then stay as they are


class PrefixWarming:
    """turns_running(): whether any session has a turn in flight (the worker's): a warm-up waits while one runs."""

    def __init__(self, kit: LlmKit, tools: ToolTurns, log: logging.Logger, turns_running: Callable[[], bool]):
        self.kit, self.tools, self.log, self.turns_running = kit, tools, log, turns_running
        self.warming: dict[str, asyncio.Task] = {}  # session -> its next prompt's prefix being prefilled

    async def warm_up(self) -> MeasuredSpeed | None:
        """Before /ready: the persona (and the tools, where they go into it) into the prefix cache, then what the
        first turns will ask of the engine that one request does not: several sessions' questions prefilled and
        decoded in one batch, their words read as they are prefilled (prompt log-probabilities). A CPU pays for a
        shape the first time its kernels see it; paid here, not by the first users (who would wait seconds).
        Returns the engine's speed, measured on the way (None: it could not be)."""
        kit = self.kit
        started = time.monotonic()
        tools = self.tools.prefix_tools(kit.toolbox)
        async for _ in kit.engine.stream(kit.text_prompt(ConversationHistory(0), "Hello!", fixed=tools),
                                         kit.sampling(), "warmup"):
            pass
        self.say_what_sessions_share(tools)
        speed = await self.measure_speed(tools)
        if speed is None:
            self.log.warning("the engine's speed could not be measured (it counted too few tokens): "
                             "--max_users auto keeps its seats as they are")
        if not isinstance(kit.engine, LocalVllmEngine) or kit.mode.omni:
            return speed  # (a remote server warms itself; an omni prompt carries media this cannot make up)
        seats = kit.config.server.max_users  # auto: what the front will make of the speed just measured
        if seats is None:
            seats = seats_for(speed)[0] if speed is not None else len(WARM_UP_QUESTIONS)
        sessions = max(2, min(seats, len(WARM_UP_QUESTIONS)))
        reads = kit.engine.reads_words and kit.misheard_rule.reads

        async def one(question: str, read: bool, tokens: int, request_id: str) -> None:
            prompt = kit.text_prompt(ConversationHistory(0), question, read_words=read, fixed=tools)
            settings = SamplingSettings(tokens, 0.0, judge_words=read, banned=NEVER_WRITTEN)  # (as a reply's)
            async for _ in kit.engine.stream(prompt, settings, request_id):
                pass

        # A turn's words are read only when Whisper was unsure of them: some of the batch reads, some not. The first
        # reading compiles vLLM's kernel for it: 9-11 s on a fresh machine (Zen 1), paid here, not by a user.
        results = await asyncio.gather(*(one(WARM_UP_QUESTIONS[i], reads and i % 2 == 0, WARM_UP_TOKENS + 2 * i,
                                             f"warmup-{i}") for i in range(sessions)), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if any(isinstance(r, EngineFailed | asyncio.CancelledError) for r in failed):
            raise failed[0]  # the engine itself stopped: the worker's failure, as on any turn
        if failed:  # only an optimisation: the first turns then pay for these shapes themselves
            self.log.warning("warm-up of several questions at once failed: %r", failed[0])
        self.log.info("warmed up in %.1f s: two prompts, then %d at once", time.monotonic() - started, sessions)
        if kit.config.tools.max_calls:
            await self.warm_grammar()
        return speed

    async def warm_grammar(self) -> None:
        """vLLM starts its JSON grammar backend with the first constrained request, on the engine's thread: a
        client's first required tool call (forced_calls.py) held every session for a second. Started here; only an
        optimisation, so a failure is logged, and the engine's own failure is the worker's."""
        probe = ClientTool("probe")
        forced = forced_call((probe.name,), (probe,), self.tools.chat_template())
        if forced is None:
            return
        started = time.monotonic()
        prompt = self.kit.text_prompt(ConversationHistory(0), WARM_UP_QUESTIONS[0])
        prompt = dataclasses.replace(prompt, text=f"{prompt.text}{forced.opening}")
        try:
            async for _ in self.kit.engine.stream(prompt, SamplingSettings(2, 0.0, json_schema=forced.schema),
                                                  "warmup-grammar"):
                pass
        except (EngineFailed, asyncio.CancelledError):
            raise
        except Exception as exc:
            self.log.warning("the engine's grammar could not be warmed up (a client's first required tool call "
                             "will start it): %r", exc)
            return
        self.log.info("the engine's JSON grammar started in %.1f s (for required tool calls)",
                      time.monotonic() - started)

    def say_what_sessions_share(self, tools: ToolBox | None) -> None:
        """The log says how much of a first prompt the prefix cache shares between sessions: only whole blocks are
        kept, so a persona a few tokens short of one has every session's first turn prefill it (first token 0.72
        against 0.40 s, spoken, with the 0.5B model on a Zen 1 EPYC). Only a log: nothing here may stop the start."""
        kit = self.kit
        if (not isinstance(kit.engine, LocalVllmEngine) or kit.mode.omni or kit.prompts is None
                or not kit.config.llm.prefix_caching):
            return
        try:
            fixed = kit.prompts.fixed_prefix_tokens(tools.schemas() if tools else None)
        except Exception as exc:
            self.log.debug("the persona's shared prefix could not be measured: %r", exc)
            return
        if fixed is None:
            return
        block = kit.config.llm.block_size
        if fixed >= block:
            self.log.info("first prompts with the configured persona open with the same %d tokens: %d cache block(s) "
                          "of %d shared between sessions", fixed, fixed // block, block)
        else:
            self.log.warning("the persona's prompt is %d tokens, under one %d-token cache block: every session's first "
                             "turn prefills it again (a persona %d tokens longer would be shared)",
                             fixed, block, block - fixed)

    async def measure_speed(self, tools: ToolBox | None) -> MeasuredSpeed | None:
        """A question as a turn brings it, on the engine now warm: its first token and its decoding speed, with the
        ASR time measured in setup (--max_users auto sizes the seats by them)."""
        started = time.monotonic()
        first_at, first_tokens, tokens = None, 0, 0
        kit = self.kit
        async for delta in kit.engine.stream(kit.text_prompt(ConversationHistory(0), MEASURED_QUESTION, fixed=tools),
                                             SamplingSettings(MEASURED_TOKENS, 0.0), "warmup-measured"):
            if first_at is None:
                first_at, first_tokens = time.monotonic(), delta.tokens
            tokens += delta.tokens
        if first_at is None:
            return None
        decoded = tokens - max(first_tokens, 1)  # (a remote engine counts every token at the end, the first too)
        decoded_s = time.monotonic() - first_at
        if decoded < MIN_MEASURED_TOKENS or decoded_s <= 0:
            return None
        return MeasuredSpeed(round(kit.asr_s, 3), round(first_at - started, 3), round(decoded / decoded_s, 2),
                             await self.measure_prefill(tools))

    async def measure_prefill(self, tools: ToolBox | None) -> float:
        """Prompt tokens a second the engine prefills, on a long typed message (what typed text is priced by);
        0 when it cannot say."""
        started, first_at, computed = time.monotonic(), None, 0
        kit = self.kit
        async for delta in kit.engine.stream(kit.text_prompt(ConversationHistory(0), PASTED_TEXT, fixed=tools),
                                             SamplingSettings(1, 0.0), "warmup-prefill"):
            if first_at is None:
                first_at = time.monotonic()
                computed = (delta.prompt_tokens or 0) - (delta.cached_tokens or 0)  # what the engine prefilled
        if first_at is None or computed < MIN_PREFILL_MEASURED or first_at <= started:
            return 0.0
        return round(computed / (first_at - started), 1)

    def warm(self, session_id: str, turn_id: int, history: ConversationHistory, tools: ToolBox | None = None,
             persona: str | None = None, salt: str | None = None) -> None:
        """Prefill the next turn's prompt up to its question while the user listens (a one-token request that
        fills the prefix cache): the previous reply, and after a history trim the whole history, is then no
        longer prefilled on the critical path."""
        kit = self.kit
        llm = kit.config.llm
        if not (llm.warm_prefix and llm.prefix_caching and isinstance(kit.engine, LocalVllmEngine)) or kit.mode.omni:
            return  # (a remote server's cache is its own business: no extra request per reply)
        prompt = kit.text_prompt(history, "", persona=persona, fixed=self.tools.prefix_tools(tools), salt=salt)

        async def warm() -> None:
            await asyncio.sleep(WARM_DELAY_S)
            if self.turns_running():  # another session's turn is generating: it goes first
                return
            async for _ in kit.engine.stream(prompt, SamplingSettings(1, 0.0), f"{session_id}:{turn_id}:warm"):
                pass

        task = asyncio.create_task(warm())
        self.warming[session_id] = task
        task.add_done_callback(lambda t, s=session_id: self._warmed(s, t))

    def _warmed(self, session_id: str, task: asyncio.Task) -> None:
        if self.warming.get(session_id) is task:
            del self.warming[session_id]
        if not task.cancelled() and task.exception() is not None:  # only an optimisation: never a turn's error
            self.log.warning("prefix warm-up failed: %s", task.exception())

    def stop(self, session_id: str | None = None) -> None:
        """Cancel the warm-up of one session, or of all (its engine request is aborted)."""
        for sid in [session_id] if session_id is not None else list(self.warming):
            task = self.warming.pop(sid, None)
            if task is not None:
                task.cancel()
