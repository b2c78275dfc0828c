"""The contract between the LLM worker and the engine that generates: an in-process vLLM or a remote server.

Both engines take the same ``EnginePrompt`` and yield the same ``Delta`` stream, so the worker's streaming,
cancellation (cancel the task that iterates) and timings do not depend on where the model runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class EnginePrompt:
    """What to generate from.

    ``text`` is the prompt rendered by the model's own tokenizer or processor (None when there is no local
    copy of it: a remote chat model renders ``messages`` itself). ``audio`` is float32 mono at its rate;
    ``images`` are RGB arrays; both are only given to models that take them (omni mode).
    """

    text: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    stop: tuple[str, ...] = ()
    audio: tuple[tuple[np.ndarray, int], ...] = ()
    images: tuple[np.ndarray, ...] = ()
    # Where the user's words are, counted in tokens from the end of the prompt: (their tokens, the tokens after
    # them). From the end, because an engine may add tokens at the start (a BOS) that the builder never sees.
    words_from_end: tuple[int, int] | None = None
    # The prefix cache is shared by every session; a prompt that opens with what a client wrote (its instructions,
    # its functions) is cached under its session's salt, or another client could time its first token to confirm a
    # guess of them, a block at a time.
    cache_salt: str | None = None

    @property
    def has_media(self) -> bool:
        return bool(self.audio or self.images)


@dataclass(frozen=True)
class Delta:
    """New reply text since the last delta; tokens counts the tokens behind it when the engine says so."""

    text: str
    tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # of the prompt, found in the engine's prefix cache (first delta only)
    # The model's mean log-probability of the user's words but their opening token, and of the token after them
    # (the end of their turn, or the camera cues' "("), given everything before them: first delta only, when
    # SamplingSettings.judge_words asked and it could say
    words_logprob: float | None = None


@dataclass(frozen=True)
class SamplingSettings:
    max_tokens: int
    temperature: float
    judge_words: bool = False  # read the prompt's words too (EnginePrompt.words_from_end): Delta.words_logprob
    # The reply must be JSON of this schema (JSON text): a tool call the client required, written by the model
    # under the engine's grammar. None: free text. An engine that cannot constrain ignores it (the prompt's own
    # opening still asks for the call).
    json_schema: str | None = None
    # No token of the reply may hold one of these (prompting.NEVER_WRITTEN); the remote engine does not pass it on
    # (a server's token ids are not asked for), nor does an engine whose tokenizer could not list its tokens
    banned: tuple[str, ...] = ()


class TextEngine(Protocol):
    description: str
    reads_words: bool  # can it give Delta.words_logprob (an in-process vLLM can; a remote server is not asked)

    async def start(self, report: Any) -> None:
        """Load or connect; report(WorkerState.LOADING, detail) shows progress on /health and the page."""

    def stream(self, prompt: EnginePrompt, sampling: SamplingSettings, request_id: str) -> AsyncIterator[Delta]:
        """Yield the reply as it is generated; cancelling the consuming task must stop the generation."""

    async def abort(self, request_id: str) -> None: ...

    def healthy(self) -> bool:
        """False once the engine cannot generate or is stuck: the worker then stops its heartbeats."""

    async def wait_failed(self) -> BaseException:
        """Returns the error once the engine has failed for good (the worker then exits and is restarted);
        an engine that cannot fail that way waits forever."""

    async def aclose(self) -> None:
        """Release connections inside the worker's event loop, before it ends."""

    def close(self) -> None:
        """Last-resort release when the loop is gone (setup failed, or the worker is stopping)."""
