"""Per-session conversation history and the prompt built from it, in one of two styles.

Instruction-tuned models get their tokenizer's chat template. Base models (the bundled Gemma 3 270M) babble
under a chat template but answer well as a transcript continuation, so they get a few-shot phone-call
transcript that ends with "Vita:" and is stopped at the next line.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

ASSISTANT = "Vita"
USER = "User"

# Two worked exchanges anchor a base model on short, factual, one-line answers.
_FEW_SHOT = (
    ("Hi, who are you?", "Hi! I'm Vita, your voice assistant. How can I help?"),
    ("What is the capital of Italy?", "The capital of Italy is Rome."),
)


@dataclass(frozen=True)
class Exchange:
    user: str
    assistant: str
    interrupted: bool = False


class ConversationHistory:
    """The last ``limit`` exchanges of one session."""

    def __init__(self, limit: int):
        self._exchanges: deque[Exchange] = deque(maxlen=limit if limit > 0 else 0)

    def add(self, exchange: Exchange) -> None:
        if self._exchanges.maxlen:
            self._exchanges.append(exchange)

    def clear(self) -> None:
        self._exchanges.clear()

    def __iter__(self):
        return iter(tuple(self._exchanges))

    def __len__(self) -> int:
        return len(self._exchanges)


def choose_style(tokenizer: Any, configured: str) -> str:
    """'chat' when asked, or when 'auto' and the tokenizer carries a chat template; else 'transcript'."""
    if configured != "auto":
        return configured
    return "chat" if getattr(tokenizer, "chat_template", None) else "transcript"


def _one_line(text: str) -> str:
    return " ".join(text.split())


class PromptBuilder:
    def __init__(self, tokenizer: Any, style: str, persona: str):
        self.tokenizer = tokenizer
        self.style = choose_style(tokenizer, style)
        self.persona = persona.strip()

    @property
    def stop(self) -> list[str]:
        """Stop strings for the engine: a transcript reply ends at its line."""
        return ["\n", f"{USER}:"] if self.style == "transcript" else []

    def build(self, history: ConversationHistory, user_text: str, cues: str = "") -> str:
        user_text = _one_line(user_text)
        if cues:
            user_text = f"{user_text} ({_one_line(cues)})" if user_text else f"({_one_line(cues)})"
        if self.style == "chat":
            return self._chat(history, user_text)
        return self._transcript(history, user_text)

    def _chat(self, history: ConversationHistory, user_text: str) -> str:
        messages = [{"role": "system", "content": self.persona}] if self.persona else []
        for ex in history:
            messages.append({"role": "user", "content": ex.user})
            reply = ex.assistant + (" [interrupted by the user]" if ex.interrupted else "")
            messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": user_text})
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception:
            # Some templates (e.g. Gemma's) reject a system role: fold the persona into the first turn.
            messages = messages[1:] if self.persona else messages
            messages[0] = {"role": "user", "content": f"{self.persona}\n\n{messages[0]['content']}"}
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _transcript(self, history: ConversationHistory, user_text: str) -> str:
        lines = [f"Below is a transcript of a friendly phone call with {ASSISTANT}, a helpful voice assistant. "
                 f"{self.persona}"]
        for user, reply in _FEW_SHOT:
            lines += [f"{USER}: {user}", f"{ASSISTANT}: {reply}"]
        for ex in history:
            reply = _one_line(ex.assistant) + (" —" if ex.interrupted else "")
            lines += [f"{USER}: {_one_line(ex.user)}", f"{ASSISTANT}: {reply}"]
        lines += [f"{USER}: {user_text}", f"{ASSISTANT}:"]
        return "\n".join(lines)
