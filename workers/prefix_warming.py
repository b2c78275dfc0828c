"""Prefilling the next prompt's prefix while the user listens (vLLM's prefix cache), so the next turn prefills only
its question; and warming the engine up before the first."""

from __future__ import annotations

import asyncio

from workers.generation import SamplingSettings
from workers.local_engine import LocalVllmEngine
from workers.prompting import ConversationHistory
from workers.tools.registry import ToolBox
from workers.turn_run import WARM_DELAY_S


class PrefixWarming:
    """A part of LlmWorker (workers/llm_worker.py): its methods run on the worker itself."""

    async def _warm_up(self) -> None:
        # The persona (and the tools, where they go into it) then in the prefix cache before the first turn.
        async for _ in self.engine.stream(self._text_prompt(ConversationHistory(0), "Hello!",
                                                            tools=self._prefix_tools(self.toolbox)),
                                          self._sampling(), "warmup"):
            pass

    def _prefix_tools(self, tools: ToolBox | None) -> ToolBox | None:
        """The tools that are part of every prompt's prefix: none where they are offered beside the question
        (workers/tools/relevance.py), else all of the operator's."""
        return None if self._tools_beside() else self._offered(tools, None)

    def _warm(self, session_id: str, turn_id: int, history: ConversationHistory, tools: ToolBox | None = None,
              persona: str | None = None) -> None:
        """Prefill the next turn's prompt up to its question while the user listens (a one-token request that
        fills the prefix cache): the previous reply, and after a history trim the whole history, is then no
        longer prefilled on the critical path."""
        llm = self.config.llm
        if not (llm.warm_prefix and llm.prefix_caching and isinstance(self.engine, LocalVllmEngine)) or self.mode.omni:
            return  # (a remote server's cache is its own business: no extra request per reply)
        prompt = self._text_prompt(history, "", tools=self._prefix_tools(tools), persona=persona)

        async def warm() -> None:
            await asyncio.sleep(WARM_DELAY_S)
            if self.running:  # another session's turn is generating: it goes first
                return
            async for _ in self.engine.stream(prompt, SamplingSettings(1, 0.0), f"{session_id}:{turn_id}:warm"):
                pass

        task = asyncio.create_task(warm())
        self.warming[session_id] = task
        task.add_done_callback(lambda t, s=session_id: self._warmed(s, t))

    def _warmed(self, session_id: str, task: asyncio.Task) -> None:
        if self.warming.get(session_id) is task:
            del self.warming[session_id]
        if not task.cancelled() and task.exception() is not None:  # only an optimisation: never a turn's error
            self.report.log.warning("prefix warm-up failed: %s", task.exception())

    def _stop_warming(self, session_id: str | None = None) -> None:
        """Cancel the warm-up of one session, or of all (its engine request is aborted)."""
        for sid in [session_id] if session_id is not None else list(self.warming):
            task = self.warming.pop(sid, None)
            if task is not None:
                task.cancel()
