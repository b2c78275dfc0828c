"""What every part of the LLM worker shares about a turn: its stage name, its run (what it has produced so far),
and the words and limits more than one part uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workers.llm.engines.asr import Transcription
from workers.llm.prompting import with_cues
from workers.tools.registry import ToolBox

NAME = "llm"
TTS_PUT_TIMEOUT_S = 1.0
# After a reply is generated, the next prompt's prefix (persona, history with this exchange) is prefilled into the
# engine's prefix cache, so the next turn prefills only its question. It waits this long first: the reply's last
# pieces are being synthesized then, and their voice must not wait for it.
WARM_DELAY_S = 0.4
# Beside a question Whisper was unsure of (asr.sense_check_below), just before it: fluent nonsense ("We chose to
# rise between Europe and North America.") has confident-looking words that only a reader can judge.
SENSE_CHECK = ("The speech recognizer was unsure of the user's next words: they may be misheard. If they do not "
               "make sense as something a person would say to you, reply only: Sorry, I didn't catch that.")
class TtsBusy(Exception):
    """The TTS queue stayed full: the TTS worker is stuck or far behind."""


class ImplausibleWords(Exception):
    """The model read the words Whisper was unsure of as nonsense (MisheardRule.implausible): ask again. Raised
    on the reply's first delta, before any of it reached the page or the voice."""


@dataclass
class TurnRun:
    """What one turn has produced so far: read by the cancel path to keep the history true."""

    request_id: str
    started: float
    user_text: str = ""
    spoken: list[str] = field(default_factory=list)  # pieces handed to TTS
    timings: dict[str, float] = field(default_factory=dict)
    generating: bool = False
    misheard: bool = False  # ASR was unsure of every word it gave: ask again instead of answering them
    sense_check: bool = False  # ASR was unsure enough that the model is asked whether the words make sense
    reading: Transcription | None = None  # ASR was unsure enough that the model reads these words as it prefills
    cues: str = ""  # what the camera showed ("camera: text read: ..."): quoted data after the question, kept with it
    camera_note: str = ""  # a word to the model beside the question: the camera is off (camera_questions.py)
    about_camera: bool = False  # the question is about the picture: read from it, no built-in looks it up
    # A picture's words are in the prompt: this turn's (cues), or an earlier turn's kept in the history. Either way a
    # stranger's sign is in front of the model, so only what the user's own words ask for may be called.
    picture_in_prompt: bool = False
    direct: str = ""  # a plain camera question's answer, said as it is (workers/vision/answers.py)
    tools: ToolBox | None = None  # what this turn may call
    offered: ToolBox | None = None  # what the model is shown of them beside the question (tools/relevance.py)
    fixed_tools: ToolBox | None = None  # ... and in the prompt's cached prefix, all session (ToolTurns.prefix_tools)
    cache_salt: str | None = None  # its prompts' (EnginePrompt.cache_salt): a client wrote their opening
    tool_messages: list[dict[str, Any]] = field(default_factory=list)  # its calls and their results, in order
    planned_messages: int = 0  # how many of them were planned for the model (its answer says their result)
    span: Any = None  # the model's span while it generates (its tool calls' spans are its children)
    remembered: str = ""  # what the user told in other sessions that bears on this question (the prompt's note)
    persona: str | None = None  # its system prompt: the client's or the configured one, with what is remembered

    @property
    def kept_tool_messages(self) -> tuple[dict[str, Any], ...]:
        """What the history keeps: the model's own calls. Planned ones are in the answer already, and a history
        full of calls made for it kept the 1.5B model from calling an MCP tool itself (0 of 5 in a long session)."""
        return tuple(self.tool_messages[self.planned_messages:])

    @property
    def said(self) -> str:
        return " ".join(self.spoken)

    def asked(self) -> str:
        """The user's words as the history keeps them: with what the camera showed, as the prompt had it (quoted
        data after the question), so that "and what colour is it?" can follow on from it."""
        return with_cues(self.user_text, self.cues)
