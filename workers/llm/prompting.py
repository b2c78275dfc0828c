"""Per-session conversation history and the prompt built from it.

Instruction-tuned models get their tokenizer's chat template. Base models (the bundled Gemma 3 270M) babble
under a chat template but answer well as a transcript continuation, so they get a few-shot phone-call
transcript that ends with "Vita:" and is stopped at the next line. Omni models (audio in) get their
processor's chat template with audio and image placeholders for the current turn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from workers.llm.camera_questions import with_picture

ASSISTANT = "Vita"
USER = "User"

# One worked exchange anchors a base model on short one-line answers. It holds no fact: a factual example
# ("The capital of Italy is Rome.") was copied into unrelated answers.
_FEW_SHOT = (
    ("Hi, who are you?", "Hi! I'm Vita, your voice assistant. How can I help?"),
)
# How an interrupted reply is kept in the history: a plain trailing ellipsis (a bracketed note such as
# "[interrupted by the user]" was copied into replies)...
INTERRUPTED = "…"
# ...which the model never writes: after three interrupted replies it copied that too, 6 of 10 replies cut short
# ("To wash your hands, use soap and water for…"; with these banned none, and their words whole). A voice has no use
# for an ellipsis.
NEVER_WRITTEN = (INTERRUPTED, "..")
CHARS_PER_TOKEN = 4  # a token estimate where no tokenizer is at hand (a remote chat model)


@dataclass(frozen=True)
class Exchange:
    user: str
    assistant: str
    interrupted: bool = False
    turn_id: int = 0
    tool_messages: tuple[dict[str, Any], ...] = ()  # the turn's tool calls and results, between user and reply


class ConversationHistory:
    """At most ``limit`` recent exchanges of one session, trimmed in steps rather than one at a time.

    A full history drops its older half at once (4 exchanges: back to 2, then 3, 4, back to 2 ...). Dropping one
    exchange per turn would change the prompt right after the persona on every turn, so the engine's prefix cache
    would never hold the history; stepped, each prompt starts with the whole of the previous turn's prompt on
    all turns but every other one once full, and only the new exchange is prefilled.
    """

    def __init__(self, limit: int):
        self.limit = max(0, limit)
        self._exchanges: deque[Exchange] = deque()

    def add(self, exchange: Exchange) -> None:
        if not self.limit:
            return
        if len(self._exchanges) >= self.limit:
            for _ in range(len(self._exchanges) - self.limit // 2):
                self._exchanges.popleft()
        self._exchanges.append(exchange)

    def clear(self) -> None:
        self._exchanges.clear()

    def edit(self, turn_id: int, reply: str | None) -> None:
        """A client's edit: the turn's reply cut to what was heard, or (None) the whole exchange dropped."""
        if reply is None:
            self.drop_turn(turn_id)
            return
        edited = [dataclasses.replace(ex, assistant=reply, interrupted=ex.interrupted or reply != ex.assistant)
                  if ex.turn_id == turn_id else ex for ex in self._exchanges]
        self._exchanges.clear()
        self._exchanges.extend(edited)

    def drop_turn(self, turn_id: int) -> None:
        """Take back the exchange of a turn that turned out never to have happened."""
        kept = [ex for ex in self._exchanges if ex.turn_id != turn_id]
        self._exchanges.clear()
        self._exchanges.extend(kept)

    def __iter__(self):
        return iter(tuple(self._exchanges))

    def recent(self, max_tokens: int, count_tokens: Any) -> ConversationHistory:
        """The newest exchanges whose text fits ``max_tokens`` (as ``count_tokens`` counts), oldest first."""
        kept: list[Exchange] = []
        used = 0
        for ex in reversed(self._exchanges):
            used += count_tokens(ex.user) + count_tokens(ex.assistant)
            used += sum(count_tokens(json.dumps(m, ensure_ascii=False)) for m in ex.tool_messages)
            if used > max_tokens:
                break
            kept.append(ex)
        trimmed = ConversationHistory(len(kept) + 1)  # room for all of them: adding never trims here
        for ex in reversed(kept):
            trimmed.add(ex)
        return trimmed

    def __len__(self) -> int:
        return len(self._exchanges)


def choose_style(tokenizer: Any, configured: str) -> str:
    """'chat' when asked, or when 'auto' and the tokenizer carries a chat template; else 'transcript'.

    Without a local tokenizer (a remote chat model) 'auto' means chat: the server renders the messages.
    """
    if configured != "auto":
        return configured
    if tokenizer is None:
        return "chat"
    return "chat" if getattr(tokenizer, "chat_template", None) else "transcript"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def with_cues(user_text: str, cues: str) -> str:
    """The user's message: their words on one line, then what the camera shows as quoted data (never a system
    message: a sign's words are a stranger's, camera_questions.with_picture)."""
    return with_picture(_one_line(user_text), cues)


def chat_messages(persona: str, history: ConversationHistory, user_content: Any,
                  after: tuple[dict[str, Any], ...] = (), offer: str = "") -> list[dict[str, Any]]:
    """System persona, past exchanges as text (with their tool calls and results), then this turn (a string, or a
    list of content parts) and what its tools have answered so far (`after`); `offer`, the tools this question
    may call in the template's own words and any note about the question, goes in a system message just before
    it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": persona}] if persona else []
    for ex in history:
        messages.append({"role": "user", "content": ex.user})
        messages.extend(ex.tool_messages)
        reply = ex.assistant + (INTERRUPTED if ex.interrupted else "")
        messages.append({"role": "assistant", "content": reply})
    if offer:
        messages.append({"role": "system", "content": offer})
    messages.append({"role": "user", "content": user_content})
    messages.extend(after)
    return messages


def render_chat(renderer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """Apply a tokenizer's or processor's chat template (with the tools it may call), folding the persona into
    the first user turn for templates that reject a system role (e.g. Gemma's)."""
    try:
        return renderer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                            add_generation_prompt=True)
    except Exception:
        if messages[0]["role"] != "system":
            raise
        persona, rest = messages[0]["content"], [dict(m) for m in messages[1:]]
        first = rest[0]["content"]
        if isinstance(first, list):
            rest[0]["content"] = [{"type": "text", "text": f"{persona}\n\n"}, *first]
        else:
            rest[0]["content"] = f"{persona}\n\n{first}"
        return renderer.apply_chat_template(rest, tools=tools or None, tokenize=False, add_generation_prompt=True)


PROBE_TOOL = {"type": "function", "function": {"name": "probe", "description": "A tool.",
                                               "parameters": {"type": "object", "properties": {}}}}


def tool_section(renderer: Any, tools: list[dict[str, Any]]) -> str:
    """What the chat template writes into a system prompt to offer `tools` (Qwen2.5: "# Tools ... <tools>...</tools>
    ... <tool_call>..."), or "" when it writes them anywhere else or not at all."""
    mark = [{"role": "system", "content": "\x01"}]
    try:
        bare = renderer.apply_chat_template(mark, tokenize=False)
        offered = renderer.apply_chat_template(mark, tools=tools, tokenize=False)
    except Exception:
        return ""
    if "\x01" not in bare or not isinstance(offered, str):
        return ""
    head, tail = bare.split("\x01", 1)
    if not (offered.startswith(head + "\x01") and offered.endswith(tail)):
        return ""
    return offered[len(head) + 1:len(offered) - len(tail)].strip()


class PromptBuilder:
    SECTIONS_KEPT = 32  # rendered tool sections (a few tool sets in use at once: the operator's, clients')

    def __init__(self, tokenizer: Any, style: str, persona: str, history_tokens: int = 400):
        self.tokenizer = tokenizer
        self.style = choose_style(tokenizer, style)
        self.persona = persona.strip()
        self.history_tokens = history_tokens
        self._sections: dict[str, str] = {}

    @property
    def tools_beside(self) -> bool:
        """Can tools be offered beside the question (their section in a system message of its own, after the
        history)? Only a chat template that writes them into its system prompt tells us how; one that writes them
        elsewhere (Llama 3.1: into the first user message) gets them there, every turn."""
        if self.style != "chat" or self.tokenizer is None:
            return False
        return bool(self._offer([PROBE_TOOL]))

    def _offer(self, tools: list[dict[str, Any]]) -> str:
        key = json.dumps(tools, sort_keys=True)
        if key not in self._sections:
            if len(self._sections) >= self.SECTIONS_KEPT:
                self._sections.pop(next(iter(self._sections)))
            self._sections[key] = tool_section(self.tokenizer, tools)
        return self._sections[key]

    def with_persona(self, persona: str) -> PromptBuilder:
        """The same builder with a session's own system prompt (a Realtime client's `instructions`)."""
        other = PromptBuilder(self.tokenizer, self.style, persona, self.history_tokens)
        other._sections = self._sections  # the same template: the same tool sections
        return other

    def fixed_prefix_tokens(self, tools: list[dict[str, Any]] | None = None) -> int | None:
        """How many of a session's first prompt's tokens are the same whatever it asks, with a word to the model
        beside the question or not: what the engine's prefix cache can share between sessions, in whole blocks
        (None without a tokenizer)."""
        if self.tokenizer is None:
            return None
        empty = ConversationHistory(0)
        renders = [self.build(empty, "What time is it?", tools=tools), self.build(empty, "Hello there.", tools=tools),
                   self.build(empty, "What time is it?", tools=tools, note="(a word to the model)")]
        token_lists = [self.tokenizer(text)["input_ids"] for text in renders if text]  # (as the engine does)
        if len(token_lists) < 2:
            return None
        same = 0
        for column in zip(*token_lists, strict=False):
            if len(set(column)) > 1:
                break
            same += 1
        return same

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` as this model's tokenizer counts them (an estimate without one)."""
        if self.tokenizer is None:
            return len(text) // CHARS_PER_TOKEN + 1
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _bounded(self, history: ConversationHistory) -> ConversationHistory:
        return history.recent(self.history_tokens, self.count_tokens)

    @property
    def stop(self) -> list[str]:
        """Stop strings for the engine: a transcript reply ends at its line."""
        return ["\n", f"{USER}:"] if self.style == "transcript" else []

    def messages(self, history: ConversationHistory, user_text: str, cues: str = "",
                 after: tuple[dict[str, Any], ...] = ()) -> list[dict[str, Any]]:
        # (no note: a remote chat server's template may refuse a system message after the history)
        return chat_messages(self.persona, self._bounded(history), with_cues(user_text, cues), after)

    def build(self, history: ConversationHistory, user_text: str, cues: str = "",
              tools: list[dict[str, Any]] | None = None, after: tuple[dict[str, Any], ...] = (),
              note: str = "", fixed_tools: list[dict[str, Any]] | None = None) -> str | None:
        """The rendered prompt; None for a chat model whose tokenizer is not here (a remote server renders).
        `tools` (chat models only) are offered beside the question where the template allows, `fixed_tools` in
        the template's own place (the system prompt: the cached prefix); `after` is this turn's tool exchange;
        `note`, a word to the model about this question, goes beside it like the tools (chat models only)."""
        user_text = with_cues(user_text, cues)
        history = self._bounded(history)
        if self.style == "chat":
            if self.tokenizer is None:
                return None
            tool_offer = self._offer(tools) if tools else ""
            offer = "\n\n".join(part for part in (tool_offer, note) if part)
            every = [*(fixed_tools or ()), *(tools or ())] or None  # all in the template's place
            if offer:  # beside the question (after the history, which stays the cached prefix it was)
                with contextlib.suppress(Exception):  # a template that takes no system message there: as it says
                    rendered = render_chat(self.tokenizer, chat_messages(self.persona, history, user_text, after,
                                                                         offer), fixed_tools if tool_offer else every)
                    if offer in rendered:  # (a template may also drop a later system message without a word)
                        return rendered
            # (a note is then left out: only a word to the model, it is not worth a prompt it was not made for)
            return render_chat(self.tokenizer, chat_messages(self.persona, history, user_text, after), every)
        return self._transcript(history, user_text)

    def words_from_end(self, rendered: str | None, user_text: str, cues: str = "") -> tuple[int, int] | None:
        """Where this turn's words are in a prompt `build` rendered, in tokens from its end (their tokens, the
        tokens after them): for the engine to read how likely the model finds them (EnginePrompt.words_from_end).
        None without a tokenizer, or when they are not there as they are."""
        words, content = _one_line(user_text), with_cues(user_text, cues)
        if self.tokenizer is None or not rendered or not words:
            return None
        at = rendered.rfind(content)  # this turn's message: the last (a history may hold the same words)
        if at < 0:
            return None
        after = self.count_tokens(rendered[at + len(words):])
        return self.count_tokens(rendered[at:]) - after, after

    def _transcript(self, history: ConversationHistory, user_text: str) -> str:
        lines = [f"Below is a transcript of a friendly phone call with {ASSISTANT}, a helpful voice assistant. "
                 f"{self.persona}"]
        for user, reply in _FEW_SHOT:
            lines += [f"{USER}: {user}", f"{ASSISTANT}: {reply}"]
        for ex in history:
            reply = _one_line(ex.assistant) + (INTERRUPTED if ex.interrupted else "")
            lines += [f"{USER}: {_one_line(ex.user)}", f"{ASSISTANT}: {reply}"]
        lines += [f"{USER}: {user_text}", f"{ASSISTANT}:"]
        return "\n".join(lines)


class OmniPromptBuilder:
    """Prompts for models that hear and see (omni mode): this turn's audio and frames become the model's own
    placeholders, rendered by its processor's chat template; earlier turns stay as text."""

    def __init__(self, processor: Any, persona: str):
        self.processor = processor
        self.persona = persona.strip()
        self.style = "omni"

    stop: list[str] = []

    def messages(self, history: ConversationHistory, typed_text: str, images: int, audio: bool
                 ) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = [{"type": "image"} for _ in range(images)]
        if audio:
            parts.append({"type": "audio"})
        if typed_text.strip():
            parts.append({"type": "text", "text": _one_line(typed_text)})
        return chat_messages(self.persona, history, parts)

    def build(self, messages: list[dict[str, Any]]) -> str | None:
        return render_chat(self.processor, messages) if self.processor is not None else None
