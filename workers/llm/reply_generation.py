"""The LLM worker's voice side of a turn: the reply streamed from the engine, cut into pieces the voice can say as
they come, tool calls run (or handed to the client) between generation rounds, the pieces handed to TTS."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import time

from vita.messages import (
    ReplyText,
    TtsPiece,
    TurnEnded,
    TurnRequest,
    TurnTimings,
)
from workers.llm.asr import Transcription
from workers.llm.generation import EnginePrompt
from workers.llm.prompting import ConversationHistory
from workers.llm.speech_pieces import ReplyShaper, SpeechClock
from workers.llm.turn_run import NAME, ImplausibleWords, TtsBusy, TurnRun
from workers.tools.in_turn import APOLOGY, CallDetector
from workers.tools.intents import planned_calls
from workers.tools.registry import ToolCall, parse_calls


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
    """A part of LlmWorker (workers/llm/worker.py): its methods run on the worker itself."""

    async def _generate(self, req: TurnRequest, run: TurnRun, prompt: EnginePrompt,
                        history: ConversationHistory | None = None) -> bool:
        """Stream the reply: text deltas to the page, pieces to TTS as they become speakable (or all at the end in
        "full" mode), stopping the engine once the reply is long enough to speak. A reply that begins with a tool
        call is not spoken: the calls run, their results join the prompt, and the model goes on (at most
        tools.max_calls calls a turn). False when it called the client's own tools instead: the turn ends there."""
        sid, tid, timings = req.session_id, req.turn_id, run.timings
        llm = self.config.llm
        shaper = ReplyShaper(llm.max_reply_words, llm.first_piece_words)
        clock = SpeechClock()  # when the pieces handed to the voice will have been spoken
        streaming = req.reply_mode != "full"
        held: list[str] = []  # full mode: pieces wait for the end of generation
        gen_started = time.monotonic()
        tokens = 0
        calls_left = self.config.tools.max_calls if run.tools else 0
        offered = run.offered
        # The call detector is on when tools are offered, or the history shows calls the model may copy; on to the
        # end: a call past the limit is not spoken.
        detect = bool(offered) or bool(run.tools) and any(ex.tool_messages for ex in (history or ()))

        def next_prompt() -> EnginePrompt:  # with what the tools have answered so far
            cues, camera_note = self._camera_words(run)
            return self._text_prompt(history or ConversationHistory(0), run.user_text, cues, offered,
                                     tuple(run.tool_messages), req.instructions, camera_note)

        round_tokens = 0
        answered = False  # by the tools' results, said as they are: no (more) generation
        planned = planned_calls(run.user_text, set(run.tools.tools)) if calls_left else []
        # The model's own calls run only what it was shown: the tools offered this turn, those called for it, and
        # those its history shows it calling; never the rest of the session's box (a built-in it was not shown).
        shown = {*(offered.tools if offered else ()), *(c.name for c in planned), *called_in(history)}
        callable_tools = run.tools.only(list(shown)) if run.tools else None
        if run.direct and not planned:  # "What does the sign say?": the camera's answer, said as it is
            held += self._say_as_is(sid, tid, [run.direct])
            answered = True
        if planned:  # "What time is it?": called for the model, and said as it is when the calls worked
            outcomes = await self._run_calls(req, run, planned[:calls_left], "", clock, gen_started)
            run.planned_messages = len(run.tool_messages)
            calls_left -= len(outcomes)
            answered = all(o.ok for o in outcomes)
            if answered:
                held += self._say_results(sid, tid, planned, outcomes)
            elif all(o.ok or o.name == "calculate" for o in outcomes):
                # A sum the calculator refuses ("too large to say", "division by zero") is said so at once: no
                # generation is spent on it (typed every second, such sums kept the engine from other sessions).
                held += self._say_as_is(sid, tid, [refusal(o.result) for o in outcomes if not o.ok])
                answered = True
            else:
                prompt = next_prompt()
        while not answered:
            detector = CallDetector(enabled=detect)
            round_tokens = 0
            run.generating = True
            reading = run.reading if prompt.words_from_end is not None else None
            async for delta in self.engine.stream(prompt, self._sampling(reading is not None), run.request_id):
                tokens += delta.tokens
                round_tokens += delta.tokens
                if delta.prompt_tokens is not None:
                    timings["prompt_tokens"] = float(delta.prompt_tokens)
                if delta.cached_tokens is not None:
                    timings["cached_tokens"] = float(delta.cached_tokens)
                if reading is not None:  # the first delta: the words were read as the prompt was prefilled
                    self._judge_words(run, reading, delta.words_logprob)
                    reading = None
                if "first_token_s" not in timings and (delta.text or delta.tokens):
                    timings["first_token_s"] = time.monotonic() - gen_started
                text = detector.feed(delta.text)
                if text:
                    self._publish(ReplyText(sid, tid, text))
                held += shaper.feed(text)
                if streaming and not held:
                    first_token_at = gen_started + timings.get("first_token_s", 0.0)
                    held += self._cut_early(shaper, clock, bool(run.spoken), first_token_at)
                if streaming:
                    for piece in held:
                        await self._send_piece(req, run.spoken, piece, timings, gen_started)
                        clock.handed(piece, time.monotonic())
                    held.clear()
                if shaper.complete or detector.cut:  # long enough to speak (or a late tool call): stop generating
                    with contextlib.suppress(Exception):
                        await self.engine.abort(run.request_id)
                    break
            run.generating = False
            if (tail := detector.finish()):
                self._publish(ReplyText(sid, tid, tail))
                held += shaper.feed(tail)
            if not detector.is_call:
                break
            if calls_left <= 0:  # yet another call after the last allowed: the apology below
                break
            calls = parse_calls(detector.pending)[:calls_left] or [ToolCall("", error="the tool call was empty")]
            if self._for_the_client(req, run, calls):
                return False
            outcomes = await self._run_calls(req, run, calls, detector.pending, clock, gen_started, callable_tools)
            calls_left -= len(outcomes)
            answered = all(o.ok for o in outcomes)
            if answered:
                held += self._say_results(sid, tid, calls, outcomes)
                break
            run.request_id = f"{sid}:{tid}:{len(run.tool_messages)}"  # the engine's next request for this turn
            prompt = next_prompt()
        held += shaper.finish(cut_by_token_limit=round_tokens >= llm.max_tokens)
        if not run.spoken and not held:
            # Nothing to say (the tools' answer never came to words, or the model ended at once: 1 in 23 tool
            # questions): silence would leave the user waiting for nothing.
            held.append(APOLOGY)
        if streaming:
            for piece in held:
                await self._send_piece(req, run.spoken, piece, timings, gen_started)
        elif held:
            await self._send_piece(req, run.spoken, " ".join(held), timings, gen_started)
        await self._to_tts(TtsPiece(sid, tid, len(run.spoken), "", last=True, voice=req.voice))
        timings["generate_s"] = time.monotonic() - gen_started
        timings["tokens"] = float(tokens)
        timings["tokens_per_s"] = tokens / timings["generate_s"] if timings["generate_s"] > 0 else 0.0
        return True

    def _judge_words(self, run: TurnRun, heard: Transcription, words_logprob: float | None) -> None:
        """Were Whisper's unsure words nonsense to the model too (MisheardRule.implausible)? ImplausibleWords ends
        the reply's stream before any of it went out. Once a turn: a tool round's prompt carries no words to read."""
        if words_logprob is None:  # the engine could not say (the words in its prefix cache): Whisper's rules decide
            run.timings["words_unread"] = 1.0
            return
        run.timings["words_logprob"] = words_logprob
        if self.misheard_rule.implausible(heard, words_logprob):
            raise ImplausibleWords(run.user_text)

    def _cut_early(self, shaper: ReplyShaper, clock: SpeechClock, started: bool, first_token_at: float) -> list[str]:
        """Pieces cut before their boundary: the first piece's first two words once it has decoded for
        llm.first_piece_wait_ms (a slow decode), or the words pending when the voice would otherwise fall silent
        before the sentence is generated."""
        now = time.monotonic()
        first_wait = self.config.llm.first_piece_wait_ms / 1000
        if not started:
            if not (first_wait and self.config.llm.first_piece_words and now - first_token_at >= first_wait):
                return []
            return shaper.cut_due(first=True)
        return shaper.cut_due() if clock.due(now) else []

    async def _to_tts(self, piece: TtsPiece) -> None:
        """Drop policy: a TTS queue still full after TTS_PUT_TIMEOUT_S means the voice is stuck; this turn fails
        (the session gets ``tts_busy``). The put waits in a thread: the event loop, and every other session's
        turn on it, never waits on the queue."""
        try:
            await asyncio.to_thread(self.tts.put, piece, True, self.tts_put_timeout_s)
        except queue.Full:
            raise TtsBusy("the voice is not keeping up; the reply was dropped") from None

    async def _send_piece(self, req: TurnRequest, spoken: list[str], piece: str, timings: dict[str, float],
                          gen_started: float) -> None:
        if not spoken:
            timings["first_piece_s"] = time.monotonic() - gen_started
        message = TtsPiece(req.session_id, req.turn_id, len(spoken), piece, voice=req.voice)
        # Recorded before the put: a cancel that lands while the put's thread runs does not stop the put, so the
        # piece reaches the voice and belongs in the history of what was said.
        spoken.append(piece)
        if not req.output_audio:  # a text-only client: the voice gets only the turn's (silent) last piece
            return
        try:
            await self._to_tts(message)
        except TtsBusy:
            spoken.pop()  # it was never handed over
            raise

    def _publish_answered(self, sid: str, tid: int, run: TurnRun) -> None:
        """An answered turn's last messages: the reply as spoken, the timings, the end."""
        self._publish(ReplyText(sid, tid, "", done=True, text=run.said))
        self._publish(TurnTimings(sid, tid, NAME, {k: round(v, 4) for k, v in run.timings.items()}))
        self._publish(TurnEnded(sid, tid, NAME, spoken=run.said))
