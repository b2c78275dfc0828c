"""The LLM worker's voice side of a turn: the reply streamed from the engine, cut into pieces the voice can say as
they come, tool calls run (or handed to the client) between generation rounds, the pieces handed to TTS."""

from __future__ import annotations

import contextlib
import dataclasses
import time

from vita.messages import ReplyText, TurnRequest
from vita.words import APOLOGY
from workers.llm.engines.asr import Transcription
from workers.llm.engines.generation import EnginePrompt
from workers.llm.kit import LlmKit
from workers.llm.prompting import ConversationHistory
from workers.llm.speech_pieces import ReplyShaper, SpeechClock
from workers.llm.tool_turns import ToolTurns
from workers.llm.turn_output import TurnOutput
from workers.llm.turn_run import ImplausibleWords, TurnRun
from workers.tools.client_tools import SOURCE as CLIENT
from workers.tools.forced_calls import FORCED_CALL_TOKENS, RequiredCallFailed
from workers.tools.in_turn import CallDetector
from workers.tools.intents import planned_calls
from workers.tools.registry import ToolBox, ToolCall, parse_calls


def refusal(result: str) -> str:
    """The calculator's refusal ("Error: division by zero") as the assistant says it."""
    reason = result.removeprefix("Error:").strip().removeprefix("calculate failed:").strip()
    return f"Sorry, I can't work that out: {reason}." if reason else "Sorry, I can't work that out."


def called_in(history: ConversationHistory | None) -> set[str]:
    """The names of the tools the history shows answering the model (a call that was refused, a tool it was not
    shown, gives it no right to call that tool later)."""
    return {m["name"] for ex in (history or ()) for m in ex.tool_messages
            if m.get("role") == "tool" and isinstance(m.get("name"), str)
            and not str(m.get("content", "")).startswith("Error:")}


class ReplyGeneration:
    def __init__(self, kit: LlmKit, out: TurnOutput, tools: ToolTurns):
        self.kit, self.out, self.tools = kit, out, tools

    async def generate(self, req: TurnRequest, run: TurnRun, prompt: EnginePrompt,
                       history: ConversationHistory | None = None) -> bool:
        """Stream the reply: text deltas to the page, pieces to TTS as they become speakable (or all at the end in
        "full" mode), stopping the engine once the reply is long enough to speak. A reply that begins with a tool
        call is not spoken: the calls run, their results join the prompt, and the model goes on (at most
        tools.max_calls calls a turn). False when it called the client's own tools instead: the turn ends there."""
        sid, tid, timings = req.session_id, req.turn_id, run.timings
        kit, out = self.kit, self.out
        llm = kit.config.llm
        shaper = ReplyShaper(llm.max_reply_words, llm.first_piece_words)
        sampling = kit.sampling(max_tokens=req.max_tokens)
        clock = SpeechClock()  # when the pieces handed to the voice will have been spoken
        streaming = req.reply_mode != "full"
        held: list[str] = []  # full mode: pieces wait for the end of generation
        gen_started = time.monotonic()
        tokens = 0
        calls_left = kit.config.tools.max_calls if run.tools else 0
        offered = run.offered
        # The call detector is on when tools are offered, or the prompt shows calls the model may copy (its history,
        # this turn's calls so far), even where no tool may be called now (tool_choice "none"); on to the end: a call
        # past the limit is not spoken (the 0.5B model, its client's result before it, wrote the same call again as
        # its answer).
        detect = (bool(offered) or bool(run.fixed_tools) or bool(run.tool_messages)
                  or any(ex.tool_messages for ex in (history or ())))

        def next_prompt() -> EnginePrompt:  # with what the tools have answered so far
            return kit.turn_prompt(run, history or ConversationHistory(0))

        round_tokens = 0
        answered = False  # by the tools' results, said as they are: no (more) generation
        # A client that requires a call of its functions gets one: no call planned for it, no camera answer.
        forced = self.tools.forced(req, run, prompt)  # (None without a call left: no tools this turn)
        # Planned calls are the server's own tools': never a client's function that took a built-in's name.
        own = {name for name, tool in run.tools.tools.items() if tool.source != CLIENT} if run.tools else set()
        # A question about the picture is answered from it: "What date is on the label?" is read, not the clock's.
        planned = planned_calls(run.user_text, own) if calls_left and forced is None and not run.about_camera else []
        # The model's own calls run only what it was shown: the tools offered this turn, those called for it, and
        # those its history shows it calling; never the rest of the session's box (a built-in it was not shown).
        shown = {*(offered.tools if offered else ()), *(run.fixed_tools.tools if run.fixed_tools else ()),
                 *(c.name for c in planned), *called_in(history)}
        if run.cues or run.picture_in_prompt:  # a picture's words are in the prompt (this turn's or the history's):
            # only what the user's own words ask for may run (and what the client itself requires this response: its
            # choice, not the picture's)
            shown = {*(self.tools.asked_for(run.tools, run.user_text) or ToolBox([])).tools, *req.must_call}
        callable_tools = run.tools.only(list(shown)) if run.tools else None
        if run.direct and not planned and forced is None:  # "What does the sign say?": the camera's answer, as it is
            held += out.say_as_is(sid, tid, [run.direct])
            answered = True
        if planned:  # "What time is it?": called for the model, and said as it is when the calls worked
            outcomes = await self.tools.run_calls(req, run, planned[:calls_left], "", clock, gen_started)
            run.planned_messages = len(run.tool_messages)
            calls_left -= len(outcomes)
            answered = all(o.ok for o in outcomes)
            if answered:
                held += self.tools.say_results(sid, tid, planned, outcomes)
            elif all(o.ok or o.name == "calculate" for o in outcomes):
                # A sum the calculator refuses ("too large to say", "division by zero") is said so at once: no
                # generation is spent on it (typed every second, such sums kept the engine from other sessions).
                held += out.say_as_is(sid, tid, [refusal(o.result) for o in outcomes if not o.ok])
                answered = True
            else:
                prompt = next_prompt()
        while not answered:
            detector = CallDetector(enabled=detect or forced is not None)
            round_tokens = 0
            run.generating = True
            round_prompt, settings, forcing = prompt, sampling, forced is not None
            if forced is not None:  # this round writes the call: its opening ends the prompt, the rest is the grammar's
                words = prompt.words_from_end  # (the words are still read: a misheard question is asked again)
                if words is not None:
                    words = (words[0], words[1] + kit.prompts.count_tokens(forced.opening))
                round_prompt = dataclasses.replace(prompt, text=f"{prompt.text}{forced.opening}", words_from_end=words)
                settings = dataclasses.replace(sampling, json_schema=forced.schema, banned=(),  # (not spoken)
                                               max_tokens=FORCED_CALL_TOKENS
                                               if req.max_tokens is None else min(req.max_tokens, FORCED_CALL_TOKENS))
                detector.feed(forced.opening)
                forced = None
            reading = run.reading if round_prompt.words_from_end is not None else None
            settings = dataclasses.replace(settings, judge_words=reading is not None)
            async for delta in kit.engine.stream(round_prompt, settings, run.request_id):
                tokens += delta.tokens
                round_tokens += delta.tokens
                if delta.prompt_tokens is not None:
                    timings["prompt_tokens"] = float(delta.prompt_tokens)
                    # every round's (the turn log's: what the turn made the engine do)
                    timings["prefilled_tokens"] = (timings.get("prefilled_tokens", 0.0) + delta.prompt_tokens
                                                   - (delta.cached_tokens or 0))
                if delta.cached_tokens is not None:
                    timings["cached_tokens"] = float(delta.cached_tokens)
                if reading is not None:  # the first delta: the words were read as the prompt was prefilled
                    self.judge_words(run, reading, delta.words_logprob)
                    reading = None
                if "first_token_s" not in timings and (delta.text or delta.tokens):
                    timings["first_token_s"] = time.monotonic() - gen_started
                text = detector.feed(delta.text)
                if text:
                    out.publish(ReplyText(sid, tid, text))
                held += shaper.feed(text)
                if streaming and not held:
                    first_token_at = gen_started + timings.get("first_token_s", 0.0)
                    held += self.cut_early(shaper, clock, bool(run.spoken), first_token_at)
                if streaming:
                    for piece in held:
                        await out.send_piece(req, run.spoken, piece, timings, gen_started)
                        clock.handed(piece, time.monotonic())
                    held.clear()
                if shaper.complete or detector.cut:  # long enough to speak (or a late tool call): stop generating
                    with contextlib.suppress(Exception):
                        await kit.engine.abort(run.request_id)
                    break
            run.generating = False
            if (tail := detector.finish()):
                out.publish(ReplyText(sid, tid, tail))
                held += shaper.feed(tail)
            if not detector.is_call:
                break
            if calls_left <= 0:  # yet another call after the last allowed: the apology below
                break
            calls = parse_calls(detector.pending)[:calls_left] or [ToolCall("", error="the tool call was empty")]
            if forcing and any(c.error for c in calls):  # required: never words instead, nor another try unforced
                raise RequiredCallFailed(f"its call of {' or '.join(req.must_call)} could not be read "
                                         f"({calls[0].error or calls[-1].error})")
            if self.tools.for_the_client(req, run, calls, callable_tools):
                return False
            outcomes = await self.tools.run_calls(req, run, calls, detector.pending, clock, gen_started,
                                                  callable_tools)
            calls_left -= len(outcomes)
            answered = all(o.ok for o in outcomes)
            if answered:
                held += self.tools.say_results(sid, tid, calls, outcomes)
                break
            run.request_id = f"{sid}:{tid}:{len(run.tool_messages)}"  # the engine's next request for this turn
            prompt = next_prompt()
        held += shaper.finish(cut_by_token_limit=round_tokens >= sampling.max_tokens)
        if not run.spoken and not held:
            # Nothing to say (the tools' answer never came to words, or the model ended at once: 1 in 23 tool
            # questions): silence would leave the user waiting for nothing.
            held.append(APOLOGY)
        if streaming:
            for piece in held:
                await out.send_piece(req, run.spoken, piece, timings, gen_started)
        elif held:
            await out.send_piece(req, run.spoken, " ".join(held), timings, gen_started)
        await out.end_voice(req, run.spoken)
        timings["generate_s"] = time.monotonic() - gen_started
        timings["tokens"] = float(tokens)
        timings["tokens_per_s"] = tokens / timings["generate_s"] if timings["generate_s"] > 0 else 0.0
        return True

    def judge_words(self, run: TurnRun, heard: Transcription, words_logprob: float | None) -> None:
        """Were Whisper's unsure words nonsense to the model too (MisheardRule.implausible)? ImplausibleWords ends
        the reply's stream before any of it went out. Once a turn: a tool round's prompt carries no words to read."""
        if words_logprob is None:  # the engine could not say (the words in its prefix cache, a one-token utterance):
            # Whisper's rules decide
            run.timings["words_unread"] = 1.0
            return
        run.timings["words_logprob"] = words_logprob
        if self.kit.misheard_rule.implausible(heard, words_logprob):
            raise ImplausibleWords(run.user_text)

    def cut_early(self, shaper: ReplyShaper, clock: SpeechClock, started: bool, first_token_at: float) -> list[str]:
        """Pieces cut before their boundary: the first piece's first two words once it has decoded for
        llm.first_piece_wait_ms (a slow decode), or the words pending when the voice would otherwise fall silent
        before the sentence is generated."""
        now = time.monotonic()
        first_wait = self.kit.config.llm.first_piece_wait_ms / 1000
        if not started:
            if not (first_wait and self.kit.config.llm.first_piece_words and now - first_token_at >= first_wait):
                return []
            return shaper.cut_due(first=True)
        return shaper.cut_due() if clock.due(now) else []
