"""What the LLM worker's parts share: the config, the engine and how a prompt is made for it, the tools offered,
and the ears (Whisper). The worker fills it as it sets up (the engine and the prompt builder only once its event
loop runs); each part holds the kit and the few others it calls, never the worker."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from vita.ops.tracing import Tracing
from workers.llm.engines.asr import MisheardRule
from workers.llm.engines.generation import EnginePrompt, SamplingSettings, TextEngine
from workers.llm.engines.omni import InputMode
from workers.llm.prompting import NEVER_WRITTEN, ConversationHistory, OmniPromptBuilder, PromptBuilder
from workers.llm.turn_run import SENSE_CHECK
from workers.tools.registry import ToolBox

if TYPE_CHECKING:
    from vita.config import Config
    from workers.llm.turn_run import TurnRun


class LlmKit:
    def __init__(self, config: Config, blocking: Executor):
        self.config = config
        self.blocking = blocking  # the threads Whisper runs on, asr.workers of them (never the event loop)
        self.engine: TextEngine | None = None
        self.mode = InputMode(False)
        self.prompts: PromptBuilder | None = None
        self.omni_prompts: OmniPromptBuilder | None = None
        self.toolbox = ToolBox([])  # every tool this worker offers (sessions may narrow it)
        self.asr: Any = None
        self.second_asr: Any = None  # asked when the first is unsure (asr.second_opinion)
        self.asr_s = 0.0  # one short question's ASR here, measured in setup
        self.tracing = Tracing.off()  # the worker's spans (vita/ops/tracing.py), when traces are on
        self.model_name = ""  # the model that answers, as spans name it (gen_ai.request.model)

    @property
    def misheard_rule(self) -> MisheardRule:
        return MisheardRule.from_config(self.config.asr)

    async def in_thread(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.blocking, fn, *args)

    def sampling(self, judge_words: bool = False, max_tokens: int | None = None) -> SamplingSettings:
        """max_tokens: the client's own cap (a Realtime response's), never above llm.max_tokens."""
        limit = self.config.llm.max_tokens if max_tokens is None else min(max_tokens, self.config.llm.max_tokens)
        return SamplingSettings(limit, self.config.llm.temperature, judge_words, banned=NEVER_WRITTEN)

    def text_prompt(self, history: ConversationHistory, user_text: str, cues: str = "", tools: ToolBox | None = None,
                    after: tuple[dict[str, Any], ...] = (), persona: str | None = None, note: str = "",
                    read_words: bool = False, fixed: ToolBox | None = None, salt: str | None = None) -> EnginePrompt:
        """`tools` beside the question where the template allows, `fixed` in its usual place (the system prompt,
        part of the cached prefix: ToolTurns.prefix_tools); where it cannot, all of them there. read_words: where
        the user's words are goes with it, for the engine to read them (run.reading; not a transcript prompt: its
        stop strings need vLLM's own detokenizing, see LocalVllmEngine.stream). salt: EnginePrompt.cache_salt."""
        p = self.prompts if persona is None else self.prompts.with_persona(persona)
        if not self.tools_beside():  # (the same tool once, in the template's place)
            tools, fixed = None, ToolBox([*(fixed.tools.values() if fixed else ()),
                                          *(tools.tools.values() if tools else ())])
        text = p.build(history, user_text, cues, tools.schemas() if tools else None, after, note,
                       fixed.schemas() if fixed else None)
        words = p.words_from_end(text, user_text, cues) if read_words and not p.stop else None
        return EnginePrompt(text, p.messages(history, user_text, cues, after), tuple(p.stop), words_from_end=words,
                            cache_salt=salt)

    def turn_prompt(self, run: TurnRun, history: ConversationHistory, sense_check: bool = False,
                    read_words: bool = False) -> EnginePrompt:
        """A turn's prompt as it stands (its tools' results so far included): the words heard, what the camera
        shows, what is remembered of the user, the tools chosen for it (ToolTurns.choose). sense_check: the note
        that the words may be misheard, for the first round only; read_words: as text_prompt's."""
        cues, camera_note = self.camera_words(run)
        notes = "\n\n".join(n for n in (run.remembered, camera_note, SENSE_CHECK if sense_check else "") if n)
        return self.text_prompt(history, run.user_text, cues, run.offered, tuple(run.tool_messages), run.persona,
                                notes, read_words=read_words, fixed=run.fixed_tools, salt=run.cache_salt)

    def camera_words(self, run: TurnRun) -> tuple[str, str]:
        """(cues, note): what the camera showed goes in the user's message as quoted data, whatever the prompt
        (camera_questions.with_picture); that it is off, a word of ours, beside the question where the prompt can
        carry one (a chat template rendered here), else in the same place as a picture's data."""
        if self.prompts.style == "chat" and self.prompts.tokenizer is not None:
            return run.cues, run.camera_note
        return run.cues or ("camera off: nothing can be seen" if run.camera_note else ""), ""

    def tools_beside(self) -> bool:
        """Offered beside the question (each turn only the tools it may need), or in the prompt's usual place
        (all of them, every turn, so that the cached prefix stays the same)."""
        language = self.config.asr.language
        return (self.prompts is not None and self.prompts.tools_beside
                and (language is None or language.startswith("en")))
