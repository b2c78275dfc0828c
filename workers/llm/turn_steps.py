"""One turn in the LLM worker, in the order it happens: its share of the worker, hear, look, prompt, generate (with
its tools), keep — or, when what was heard is not what was said, ask again. Each step is a method here, called
once, top to bottom, over the turn's run (``TurnRun``) and its session (``WorkerSession``); what a step needs of a
model or a client's tools it asks of the part that holds it (hearing, looking, the tool turns, the reply's
generation), each of which reports through the one output.

A cancel (barge-in) or a failure ends the turn with a TurnEnded that says so; what it keeps of a cancelled turn is
what the user heard of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from vita.config import Config
from vita.messages import ReplyText, SessionError, TurnEnded, TurnRequest, TurnTimings
from vita.ops.logs import turn_ids
from vita.ops.turn_recording import write_prompt
from vita.words import ASK_AGAIN, after_stop_command, asks_again, only_asks_to_stop
from workers.llm.camera_questions import about_picture
from workers.llm.engines.generation import EnginePrompt
from workers.llm.engines.local_engine import EngineFailed
from workers.llm.engines.omni import omni_prompt
from workers.llm.engines.remote_engine import RemoteEngineError
from workers.llm.hearing import Hearing
from workers.llm.kit import LlmKit
from workers.llm.looking import Looking
from workers.llm.prefix_warming import PrefixWarming
from workers.llm.prompting import ConversationHistory, Exchange
from workers.llm.reply_generation import ReplyGeneration
from workers.llm.tool_turns import ToolTurns
from workers.llm.turn_output import TurnOutput
from workers.llm.turn_run import NAME, SENSE_CHECK, ImplausibleWords, TtsBusy, TurnRun
from workers.llm.worker_sessions import ServiceLedger, WorkerSessions
from workers.memory.remembering import Remembering

MISHEARD = "misheard"
# A turn's timings as its model span's attributes: GenAI's names where they have one, ours beside them.
GENERATION_ATTRIBUTES = {"prompt_tokens": "gen_ai.usage.input_tokens", "tokens": "gen_ai.usage.output_tokens",
                         "cached_tokens": "gen_ai.usage.cache_read.input_tokens",
                         "first_token_s": "vita.first_token_s", "first_piece_s": "vita.first_piece_s",
                         "tokens_per_s": "vita.tokens_per_s", "tool_calls": "vita.tool_calls",
                         "context_turns": "vita.context_turns"}
INTEGER_ATTRIBUTES = {"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens",
                      "vita.tool_calls", "vita.context_turns"}
FAIR_WAIT_MAX_S = 5.0  # a session over its share waits at most this long for the others' turns
PUBLISH_FLUSH_S = 1.0  # a memory answer's text waits at most this long to be handed over before its voice ends


class TurnSteps:
    """The steps of every turn this worker runs, over the parts it holds."""

    def __init__(self, config: Config, kit: LlmKit, out: TurnOutput, sessions: WorkerSessions, ledger: ServiceLedger,
                 hearing: Hearing, looking: Looking, tool_turns: ToolTurns, replies: ReplyGeneration,
                 warmer: PrefixWarming, remembering: Remembering, log: logging.Logger):
        self.config, self.kit, self.out, self.sessions, self.ledger = config, kit, out, sessions, ledger
        self.hearing, self.looking, self.tool_turns, self.replies, self.warmer = (hearing, looking, tool_turns,
                                                                                   replies, warmer)
        self.remembering = remembering
        self.log = log

    async def run(self, req: TurnRequest) -> None:
        """One turn's life in this worker, from its request to its TurnEnded."""
        sid, tid = req.session_id, req.turn_id
        run = TurnRun(request_id=f"{sid}:{tid}", started=time.monotonic())
        trace = self.kit.tracing
        try:
            await self.share(sid, run)
            history = self.sessions.conversation(sid)
            transcribing = None
            if self.kit.mode.omni:  # the model hears and sees for itself
                prompt, transcribing = self.omni(req, run, history)
            else:
                looked_from = time.monotonic()
                scene = self.looking.scene_for(req)  # meanwhile, the turn's newest picture is analysed
                with trace.stage("asr", req.trace, {"vita.asr.model": self.config.asr.model}) as span:
                    await self.hear(req, run)
                    trace.note(span, heard_attributes(run, trace.said(run.user_text)))
                ended = self.nothing_to_answer(req, run)
                if ended == MISHEARD:
                    await self.ask_again(req, run)
                if ended:
                    return
                said = self.remembering.asked(req, run.user_text)
                if said is not None:  # "remember that...", "what do you know about me?": answered as it is done
                    await self.say_remembered(req, run, said, history)
                    return
                await self.look(req, run, scene, history)
                if req.frames:
                    trace.record("vision", req.trace, looked_from, attributes={
                        "vita.vision.frames": len(req.frames), "vita.vision.seen": bool(run.cues),
                        "vita.vision.about_camera": run.about_camera})
                prompt = self.prompt(req, run, history)
            run.timings["context_turns"] = float(len(history))
            if req.record_to:  # the user records their turns: what the model saw goes beside what they said
                write_prompt(req.record_to, prompt_record(run, prompt))
            with trace.stage("llm", req.trace, self.generation_request(req)) as run.span:
                generated = await self.generate(req, run, prompt, history)
                trace.note(run.span, generation_attributes(run.timings, trace.said(run.said)))
            if generated:
                await self.keep(req, run, history, transcribing)
            elif run.misheard:  # its first words showed the model could not read the user's
                await self.ask_again(req, run)
        except asyncio.CancelledError:
            await self.cancelled(req, run)
        except TtsBusy as exc:
            self.log.error("turn dropped: %s", exc, extra=turn_ids(sid, tid))
            self.out.publish(SessionError(sid, tid, "tts_busy", f"The assistant could not speak: {exc}."))
            self.out.publish(TurnEnded(sid, tid, NAME, "tts_busy", spoken=run.said))
        except Exception as exc:  # one bad turn must not take the worker (and every session) down
            self.log.exception("turn failed", extra=turn_ids(sid, tid))
            reason = str(exc) if isinstance(exc, RemoteEngineError) else f"{exc.__class__.__name__}: {exc}"
            if isinstance(exc, EngineFailed):
                reason = "its language model stopped and is being restarted; please ask again in a moment"
            self.out.publish(SessionError(sid, tid, "llm_failed", f"The assistant could not answer: {reason}"))
            self.out.publish(TurnEnded(sid, tid, NAME, "error"))

    def generation_request(self, req: TurnRequest) -> dict[str, Any]:
        """The model's span as OpenTelemetry's GenAI conventions name what was asked of it."""
        llm = self.config.llm
        return {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm" if not llm.url else "openai",
                "gen_ai.request.model": self.kit.model_name or None, "gen_ai.request.temperature": llm.temperature,
                "gen_ai.request.max_tokens": req.max_tokens or llm.max_tokens}

    # --- the steps, in order -------------------------------------------------------------------------------------
    async def share(self, sid: str, run: TurnRun) -> None:
        """A session over its share of the worker lets the turns other sessions have in flight now finish first
        (see worker_sessions.ServiceLedger); a cancel while waiting ends the turn as usual."""
        self.ledger.started(sid, run.started)
        if not self.ledger.over_share(sid, run.started):
            return
        others = [task for other, _tid, task in self.sessions.turns()
                  if other != sid and not self.sessions.of(other).yielding and not task.done()]
        if not others:
            return
        session = self.sessions.of(sid)
        session.yielding = True
        try:
            await asyncio.wait(others, timeout=FAIR_WAIT_MAX_S)
        finally:
            session.yielding = False
        now = time.monotonic()
        run.timings["fair_wait_s"] = now - run.started
        run.started = now  # the turn's own timings start when it does

    def omni(self, req: TurnRequest, run: TurnRun, history: ConversationHistory) -> tuple[EnginePrompt, Any]:
        """An omni model's prompt carries the audio and frames themselves; ASR runs beside it only for the page
        and the history (the task transcribing, or None)."""
        prompt = omni_prompt(self.kit, req, history, self.config.llm.limit_images_per_prompt)
        transcribing = asyncio.ensure_future(self.hearing.omni_transcript(req)) if req.audio else None
        run.user_text = req.text.strip() or "(spoken)"
        return prompt, transcribing

    async def hear(self, req: TurnRequest, run: TurnRun) -> None:
        """The user's words: the utterance through ASR with any typed text, or, when the turn brings the client's
        results for the calls its question made, that question again (with whatever was said meanwhile)."""
        session = self.sessions.of(req.session_id)
        awaited = session.awaited
        if req.tool_outputs and not req.speculative and awaited is not None and awaited.answers(req.tool_outputs):
            session.awaited = None  # the client's results: the same question goes on
            run.user_text = awaited.user_text
            said = await self.hearing.cascade_text(req, run) if req.audio or req.text.strip() else ""
            run.tool_messages = awaited.answered(req.tool_outputs, said)
            run.reading = None  # the prompt's words are the question's, not these
        else:
            run.user_text = await self.hearing.cascade_text(req, run)  # meanwhile, the frames
            if req.unless_command:  # speech that stopped a reply: the request after the command is what is answered
                # (over the echo the command is often misheard, "Meet stop.", and a model asked about it answers that)
                run.user_text = after_stop_command(run.user_text, req.unless_command)

    def nothing_to_answer(self, req: TurnRequest, run: TurnRun) -> str | None:
        """Why the turn ends here (None: it goes on): a command to stop the reply it interrupted ("No, stop."; told),
        words ASR misheard (MISHEARD: asked again at once, the frames not waited for), or no speech at all (told)."""
        sid, tid = req.session_id, req.turn_id
        # (a stop command Whisper was unsure of may open with a word it heard wrong: "Reef stop.")
        phrases = req.unless_command
        if phrases and only_asks_to_stop(run.user_text, phrases, first_word_misheard=run.misheard):
            self.out.publish(TurnEnded(sid, tid, NAME, "stop command"))  # nothing to answer, nor to ask again
            return "stop command"
        if run.misheard:
            return MISHEARD
        if not run.user_text:
            self.out.publish(TurnEnded(sid, tid, NAME, "no speech recognised"))
            return "no speech"
        return None

    async def look(self, req: TurnRequest, run: TurnRun, scene: Any, history: ConversationHistory) -> None:
        """What the camera shows, for a question about it (a follow-up to one looks at the picture again)."""
        last = list(history)[-1:]
        await self.looking.look(req, run, scene, after_camera=bool(last) and about_picture(last[0].user))

    def prompt(self, req: TurnRequest, run: TurnRun, history: ConversationHistory) -> EnginePrompt:
        """What the user told in other sessions, the tools the turn may call and those the model is shown, then the
        prompt."""
        standing, run.remembered = self.remembering.recall(req, run.user_text)
        run.persona = f"{req.instructions or self.kit.prompts.persona}\n\n{standing}" if standing else req.instructions
        # (a prefix that holds what a client wrote, or what a user told, is cached under its session's salt: another
        # client could time its first token to confirm a guess of it, a block at a time)
        run.cache_salt = req.session_id if req.instructions or req.client_tools or standing else None
        self.tool_turns.choose(req, run, history)
        prompt = self.kit.turn_prompt(run, history, sense_check=run.sense_check, read_words=run.reading is not None)
        # (only a model that was given the note is taken at its word: not a remote chat or transcript prompt)
        run.sense_check = run.sense_check and SENSE_CHECK in (prompt.text or "")
        return prompt

    async def generate(self, req: TurnRequest, run: TurnRun, prompt: EnginePrompt,
                       history: ConversationHistory) -> bool:
        """The reply, streamed to the voice piece by piece, with the tool calls it makes. False when the turn ends
        without one: it called the client's tools (theirs to run), or its first words showed the model could not
        read the user's (asked again, as if Whisper alone had doubted them)."""
        sid, tid = req.session_id, req.turn_id
        try:
            generated = await self.replies.generate(req, run, prompt, history)
        except ImplausibleWords:  # nothing of the reply went out
            run.generating = False
            with contextlib.suppress(Exception):
                await self.kit.engine.abort(run.request_id)
            run.misheard = True  # (asked again, as if Whisper alone had doubted the words)
            return False
        if not generated:
            self.out.publish(TurnTimings(sid, tid, NAME, {k: round(v, 4) for k, v in run.timings.items()}))
            self.out.publish(TurnEnded(sid, tid, NAME, "tool_call"))
        return generated

    async def ask_again(self, req: TurnRequest, run: TurnRun) -> None:
        """What Whisper heard is not what was said ("We try to move the salon trunk."): say so, as a person would,
        rather than answer it. The exchange stays out of the history (its words are noise)."""
        sid, tid = req.session_id, req.turn_id
        run.timings["asked_again"] = 1.0
        run.user_text = ""  # nor does a cancel put its words there
        started = time.monotonic()
        # Its text first, as a generated reply's: the voice has it ready at once, and the front must know what it is
        # before it plays (over a speakerphone's echo it drops it: nobody spoke).
        self.out.publish(ReplyText(sid, tid, ASK_AGAIN + " "))
        await self.out.send_piece(req, run.spoken, ASK_AGAIN, run.timings, started)
        await self.out.end_voice(req, run.spoken)
        self.out.publish_answered(sid, tid, run)

    async def say_remembered(self, req: TurnRequest, run: TurnRun, said: str, history: ConversationHistory) -> None:
        """A request about memory, answered in words of ours (a model of this size does not keep such promises),
        spoken as a reply is, and kept in the history."""
        sid, tid = req.session_id, req.turn_id
        started = time.monotonic()
        for piece in self.out.say_as_is(sid, tid, [said]):
            await self.out.send_piece(req, run.spoken, piece, run.timings, started)
        run.timings["memory_request"] = 1.0
        history.add(Exchange(run.asked(), run.said, turn_id=tid))
        self.out.publish_answered(sid, tid, run)
        # The text, all of it, before the voice's end: a client with no voice is done when that end comes, and the
        # voice (another process) could otherwise get there first.
        await asyncio.to_thread(self.out.publisher.flush, PUBLISH_FLUSH_S)
        await self.out.end_voice(req, run.spoken)

    async def keep(self, req: TurnRequest, run: TurnRun, history: ConversationHistory, transcribing: Any) -> None:
        """The exchange into the history (unless the words made no sense to the model: noise, not history), the
        turn answered, and the next prompt's prefix warmed while the user listens."""
        sid, tid = req.session_id, req.turn_id
        if transcribing is not None:  # omni: the transcript is for the page and the history, not the model
            run.user_text = await transcribing or run.user_text
        if run.sense_check and asks_again(run.said):
            run.timings["asked_again"] = 1.0
        else:
            history.add(Exchange(run.asked(), run.said, turn_id=tid, tool_messages=run.kept_tool_messages))
        self.out.publish_answered(sid, tid, run)
        self.remembering.learn(req, run.user_text)  # facts stated in passing, kept once the turn is answered
        try:
            self.warmer.warm(sid, tid, history, run.tools, run.persona, run.cache_salt)
        except Exception:  # only an optimisation: the turn is answered either way
            self.log.exception("could not start the prefix warm-up", extra=turn_ids(sid, tid))

    async def cancelled(self, req: TurnRequest, run: TurnRun) -> None:
        """A cancel (barge-in, a newer turn, the session's end): the request aborted, and what the user heard of
        the reply kept, unless the turn was a discarded speculation or nothing of it was said."""
        sid, tid = req.session_id, req.turn_id
        if run.generating:
            with contextlib.suppress(Exception):
                await self.kit.engine.abort(run.request_id)
        session = self.sessions.get(sid)
        history = session.history if session is not None else None
        if run.user_text and run.spoken and history is not None and tid not in session.forgotten:
            history.add(Exchange(run.asked(), run.said, interrupted=True, turn_id=tid,
                                 tool_messages=run.kept_tool_messages))
        self.out.publish(TurnEnded(sid, tid, NAME, "cancelled", spoken=run.said))


def heard_attributes(run: TurnRun, said: str | None) -> dict[str, Any]:
    """What the ASR span says of what was heard (the words themselves only where the operator asked for them)."""
    return {"vita.asr.words": len(run.user_text.split()), "vita.asr.logprob": run.timings.get("asr_logprob"),
            "vita.asr.misheard": run.misheard, "vita.asr.second_opinion": "second_asr_s" in run.timings,
            "vita.transcript": said}


def generation_attributes(timings: dict[str, float], said: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"vita.reply": said}
    for key, name in GENERATION_ATTRIBUTES.items():
        if key in timings:
            value = timings[key]
            attributes[name] = int(value) if name in INTEGER_ATTRIBUTES else round(value, 4)
    return attributes


def prompt_record(run: TurnRun, prompt: EnginePrompt) -> dict[str, Any]:
    """A turn's recording of its prompt: the words as the model read them, what the camera told it, the tools it
    was shown (an omni model's audio and pictures are in the recording's own files, not here)."""
    return {"user_text": run.user_text, "camera": run.cues, "camera_note": run.camera_note,
            "tools_offered": sorted(run.offered.tools) if run.offered is not None else [],
            "asr_unsure": run.sense_check or run.reading is not None, "text": prompt.text,
            "messages": [m for m in prompt.messages if isinstance(m, dict)],
            "images": len(prompt.images), "audio": len(prompt.audio)}
