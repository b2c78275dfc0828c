"""LLM worker process: cascade ASR (or omni input), per-session prompts, streaming, pieces to the TTS queue.

Turns from all sessions run as concurrent tasks against one engine (vLLM batches them), in process or remote
(``--llm_url``). A CancelTurn cancels the turn's task, which aborts its request; history then keeps only
what was handed to TTS.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from vita.config import Config
from vita.cpu import name_os_thread
from vita.messages import (
    ALL_TURNS,
    CameraFrame,
    CancelTurn,
    EditHistory,
    EndSession,
    InterjectionCheck,
    MeasuredSpeed,
    ResetHistory,
    SessionError,
    Shutdown,
    TurnEnded,
    TurnRequest,
    TurnTimings,
    TurnWorking,
    WorkerState,
    read_messages,
)
from vita.ops.logs import turn_ids
from vita.words import asks_again, only_asks_to_stop
from workers.common import Publisher, StatusReporter, install_fault_signal, prepare_process
from workers.llm.camera_questions import about_picture
from workers.llm.engines.asr import WhisperTranscriber, quickest_on_silence, threads_worth_it
from workers.llm.engines.generation import EnginePrompt
from workers.llm.engines.local_engine import EngineFailed, LocalVllmEngine, device_env
from workers.llm.engines.remote_engine import RemoteEngine, RemoteEngineError
from workers.llm.fair_share import ServiceLedger
from workers.llm.hearing import Hearing, second_opinion
from workers.llm.kit import LlmKit
from workers.llm.looking import Looking
from workers.llm.omni import detect_input_mode, load_processor, omni_prompt, read_model_config
from workers.llm.prefix_warming import PrefixWarming
from workers.llm.prompting import ConversationHistory, Exchange, OmniPromptBuilder, PromptBuilder
from workers.llm.reply_generation import ReplyGeneration
from workers.llm.tool_setup import start_tools
from workers.llm.tool_turns import ToolTurns
from workers.llm.turn_output import TurnOutput
from workers.llm.turn_run import (
    NAME,
    SENSE_CHECK,
    ImplausibleWords,
    TtsBusy,
    TurnRun,
)
from workers.stage import run_stage
from workers.tools.client_tools import AwaitedCalls
from workers.tools.isolated import IsolatedCalls
from workers.tools.mcp_tools import McpServers

HEARTBEAT_S = 2.0
WORKING_MAX_STALLS = 4  # a turn is said to be at work for at most this many of the front's stall limits
ENGINE_FAILURE_GRACE_S = 2.0  # after the engine failed, how long its turns get to send their errors
MAILBOX_BOUND = 64  # messages read from the inbox and not yet handled by the event loop
FAIR_WAIT_MAX_S = 5.0  # a session over its share waits at most this long for the others' turns
ASR_DECODE_FACTOR = 1.4  # a short question's ASR against its encoder's time alone (see _time_asr)


def turns_at_work(running: set[tuple[str, int]], first_seen: dict[tuple[str, int], float], now: float,
                  longest: float) -> tuple[dict[tuple[str, int], float], list[tuple[str, int]]]:
    """When each running (session, turn) was first seen at work (only those still running), and those that may
    still be said to be at work: seen for less than `longest`."""
    seen = {turn: first_seen.get(turn, now) for turn in running}
    return seen, sorted(turn for turn, since in seen.items() if now - since < longest)


class LlmWorker:
    """One process's turns, from every session, on one engine: the inbox read, each turn run as a task, the
    history kept. Its parts each hold the kit (config, engine, prompts, tools, ears) and what they call: hearing
    (ASR), the reply's generation, the tool calls of a turn, the prefix warming; all report through one output."""

    def __init__(self, config: Config, inbox: Any, tts: Any, outbox: Any, report: StatusReporter):
        self.config = config
        self.inbox, self.outbox = inbox, outbox
        self.report = report
        self.publisher = Publisher(outbox, report.log, "llm-publish")
        self.blocking = ThreadPoolExecutor(max_workers=config.asr.workers, thread_name_prefix="asr",
                                           initializer=name_os_thread,
                                           initargs=("asr",))
        self.kit = LlmKit(config, self.blocking)
        self.out = TurnOutput(tts, self.publisher, config.llm.max_reply_words)
        self.speed: MeasuredSpeed | None = None  # measured as the engine warms up (--max_users auto)
        self.histories: dict[str, ConversationHistory] = {}
        self.running: dict[str, tuple[int, asyncio.Task]] = {}
        self.forgotten: set[tuple[str, int]] = set()  # discarded speculative turns: leave no history
        self.side_tasks: set[asyncio.Task] = set()  # interjection checks in flight (kept: asyncio holds weak refs)
        self.latest_check: dict[str, tuple[int, int]] = {}  # session -> (turn, pause) of its newest check
        self.awaited: dict[str, AwaitedCalls] = {}  # session -> the turn waiting for its client's tool results
        self.mcp: McpServers | None = None
        self.arithmetic: IsolatedCalls | None = None  # the process `calculate` runs in
        self.ledger = ServiceLedger()  # who asked for many turns lately: that session yields under contention
        self.yielding: set[str] = set()  # sessions whose turn waits for the others' (never waited on in turn)
        self.hearing = Hearing(self.kit, self.out, report.log, self.latest_check)
        self.tool_turns = ToolTurns(self.kit, self.out, self.awaited)
        self.replies = ReplyGeneration(self.kit, self.out, self.tool_turns)
        self.warmer = PrefixWarming(self.kit, self.tool_turns, report.log, self.running)
        self.looking = Looking(config.vision, self.out, report.log)  # what a text-only model learns of the camera
        self.stop = threading.Event()

    # --- setup -------------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Models this process runs itself; the engine starts in serve(), inside the event loop."""
        cfg = self.config
        self.report(WorkerState.LOADING, f"loading ASR ({cfg.asr.model})")

        def whisper(threads: int) -> WhisperTranscriber:
            return WhisperTranscriber(cfg.models_path() / cfg.asr.model, cfg.asr.compute_type, threads,
                                      cfg.asr.language, cfg.asr.beam_size, short_window=cfg.asr.short_window,
                                      redecode_below=cfg.asr.redecode_below,
                                      redecode_beam_size=cfg.asr.redecode_beam_size, workers=cfg.asr.workers)

        threads = cfg.asr.cpu_threads
        if threads is None:  # auto: the model measured with the threads chosen is the one kept
            self.kit.asr, threads, why = threads_worth_it(whisper)
            self.report.log.info("ASR threads: %s", why)
        else:
            self.kit.asr = whisper(threads)
        # The first transcription pays CTranslate2's warm-up (0.55 against 0.3 s, measured with the AVX2 cap): on
        # a second of silence here, not on the first thing a user says.
        self.kit.asr.warm_up()
        self.kit.asr_s = self._time_asr()
        self.kit.second_asr = second_opinion(cfg, threads)
        llm = cfg.llm
        if llm.url:
            self.kit.engine = RemoteEngine(llm.url, llm.remote_model, llm.api_key, llm.ready_timeout_s)
        else:
            self.kit.mode = detect_input_mode(read_model_config(cfg.llm_model_path()), llm.input_mode)
            self.kit.engine = LocalVllmEngine(cfg, omni=self.kit.mode.omni)
        if not self.kit.mode.omni:  # an omni model sees the frames themselves
            self.looking.setup(self.report)

    async def _start_engine(self) -> None:
        await self.kit.engine.start(self.report)
        llm = self.config.llm
        model_dir = self.config.llm_model_path() if not llm.url else (
            Path(llm.model_path).expanduser() if llm.model_path else getattr(self.kit.engine, "model_root", None))
        if llm.url:
            self.kit.mode = detect_input_mode(read_model_config(model_dir) if model_dir else {}, llm.input_mode)
        if self.kit.mode.omni:
            self.kit.omni_prompts = OmniPromptBuilder(load_processor(model_dir) if model_dir else None, llm.persona)
        tokenizer = self._tokenizer(model_dir) if model_dir else None
        self.kit.prompts = PromptBuilder(tokenizer, llm.prompt_style, llm.persona, llm.history_tokens)
        await self._start_tools()

    async def _start_tools(self) -> None:
        if self.kit.mode.omni or self.kit.prompts.style != "chat" or self.kit.prompts.tokenizer is None:
            return  # a model that does not render its own chat template gets no tools
        started = await start_tools(self.config.tools, self.report)
        self.kit.toolbox, self.arithmetic, self.mcp = started.toolbox, started.arithmetic, started.mcp

    @staticmethod
    def _tokenizer(model_dir: Path) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model_dir))

    def describe(self) -> str:
        style = "omni" if self.kit.mode.omni else self.kit.prompts.style
        tools = f"tools {', '.join(self.kit.toolbox.tools)}" if self.kit.toolbox else "no tools"
        failed = "".join(f"; MCP server {name} failed: {error}" for name, error in
                         (self.mcp.failed() if self.mcp else {}).items())
        vision = self.looking.describe()
        return (f"{self.kit.engine.description}; input {self.kit.mode.describe()}; prompt style {style}; {tools}"
                f"{failed}{vision}")

    def close(self) -> None:
        self.stop.set()
        self.publisher.close()
        self.blocking.shutdown(wait=False, cancel_futures=True)
        self.looking.close()
        if self.arithmetic is not None:
            self.arithmetic.close()
        if self.kit.engine is not None:
            self.kit.engine.close()

    def _time_asr(self) -> float:
        """What one short question's ASR takes here (--max_users auto): Whisper on two seconds of silence is its
        encoder's time, the best of two (the TTS worker loads beside it); a question's dozen tokens of decoding
        add ~40 % to that (0.41 -> 0.57 s, whisper-base on a 2-core EPYC)."""
        return quickest_on_silence(self.kit.asr, 2) * ASR_DECODE_FACTOR

    def inject_engine_fault(self) -> None:
        """Test fault (SIGUSR1 with VITA_FAULT_SIGNALS=1): the in-process engine's thread raises as a failing step
        would; a remote engine has no thread here to fail."""
        if isinstance(self.kit.engine, LocalVllmEngine):
            self.kit.engine.inject_fault(RuntimeError("injected engine fault (SIGUSR1)"))
        else:
            self.report.log.warning("no in-process engine to fail")

    # --- message loop ------------------------------------------------------------------------------------
    def serve(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        try:
            await self._start_engine()
            self.report(WorkerState.LOADING, "warming up")
            self.speed = await self.warmer.warm_up()
            self.report(WorkerState.READY, self.describe(), measured=self.speed)
            beating = asyncio.create_task(self._beat())
            serving = asyncio.create_task(self._serve_inbox())
            failing = asyncio.create_task(self.kit.engine.wait_failed())
            await asyncio.wait((serving, failing), return_when=asyncio.FIRST_COMPLETED)
            beating.cancel()
            if failing.done():
                await self._end_after_engine_failure(serving, failing.result())
            failing.cancel()
            await serving
        finally:
            if self.mcp is not None:
                await self.mcp.aclose()
            await self.kit.engine.aclose()

    async def _end_after_engine_failure(self, serving: asyncio.Task, error: BaseException) -> None:
        """Engine failure is worker failure: the turns in flight have their error (the engine handed it to each);
        let them tell their sessions, then raise, so the worker reports FAILED, exits and is restarted."""
        turns = [task for _, task in self.running.values()]
        if turns:
            await asyncio.wait(turns, timeout=ENGINE_FAILURE_GRACE_S)
        self.stop.set()  # the inbox reader stops taking messages: the restarted worker reads what is left
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        # The turns' errors go out before the FAILED report and the exit (which the front would report instead).
        await asyncio.to_thread(self.publisher.flush, ENGINE_FAILURE_GRACE_S)
        raise error

    async def _beat(self) -> None:
        """Heartbeats from the event loop every turn runs on, while the engine is stepping: they stop if either
        is stuck, and the supervisor restarts the worker. With them, each turn the local engine is stepping is
        said to be at work (the front's stall watchdog), for at most WORKING_MAX_STALLS of its stall limit: a
        remote server's health is not seen from here, and a turn stuck in a live worker still ends."""
        first_seen: dict[tuple[str, int], float] = {}
        longest = WORKING_MAX_STALLS * self.config.limits.turn_stall_s
        local = isinstance(self.kit.engine, LocalVllmEngine)
        while True:
            if self.kit.engine.healthy():
                await asyncio.get_running_loop().run_in_executor(None, self.report.heartbeat)
                if local:
                    running = {(sid, tid) for sid, (tid, _) in self.running.items()}
                    first_seen, working = turns_at_work(running, first_seen, time.monotonic(), longest)
                    for session_id, turn_id in working:
                        self.publisher.publish(TurnWorking(session_id, turn_id))
            await asyncio.sleep(HEARTBEAT_S)

    async def _serve_inbox(self) -> None:
        loop = asyncio.get_running_loop()
        mailbox: asyncio.Queue = asyncio.Queue(MAILBOX_BOUND)
        reader = threading.Thread(target=self._read_inbox, args=(loop, mailbox), name="llm-inbox", daemon=True)
        reader.start()
        while True:
            message = await mailbox.get()
            if isinstance(message, Shutdown):
                break
            self._handle(message)
        for _, task in list(self.running.values()):
            task.cancel()
        if self.running:
            await asyncio.gather(*(t for _, t in self.running.values()), return_exceptions=True)

    def _read_inbox(self, loop: asyncio.AbstractEventLoop, mailbox: asyncio.Queue) -> None:
        """Bounded hand-over: while the event loop is behind, this thread waits and the Manager queue (bounded
        too) fills, so the front's puts time out into ``server_busy`` instead of memory growing here."""
        for message in read_messages(self.inbox, self.stop):
            put = mailbox.put(message)
            try:
                handed = asyncio.run_coroutine_threadsafe(put, loop)
            except RuntimeError:  # the loop closed: the worker is ending (its engine failed); this message is lost
                put.close()  # (never scheduled: no "never awaited" warning)
                return  # and the front's turn watchdog ends its turn
            while not self.stop.is_set():
                with contextlib.suppress(FutureTimeout):
                    handed.result(timeout=1.0)
                    break
            else:
                handed.cancel()  # stopping: the message goes with the worker

    def _handle(self, message: Any) -> None:
        if isinstance(message, TurnRequest):
            self.warmer.stop()  # a turn prefills for itself, and no warm-up may slow another session's turn
        elif isinstance(message, ResetHistory | EndSession) or (isinstance(message, CancelTurn) and message.forget):
            self.warmer.stop(message.session_id)  # its history changed: that prefix is not the next one
        if isinstance(message, TurnRequest):
            self._cancel(message.session_id, message.turn_id - 1)  # a newer turn supersedes the running one
            task = asyncio.create_task(self._run_turn(message))
            self.running[message.session_id] = (message.turn_id, task)
            task.add_done_callback(lambda _t, m=message: self._done(m.session_id, m.turn_id))
        elif isinstance(message, CameraFrame):
            self.looking.seen(message.session_id, message.picture)
        elif isinstance(message, InterjectionCheck):
            self.latest_check[message.session_id] = (message.turn_id, message.pause)
            task = asyncio.create_task(self.hearing.hear_interjection(message))
            self.side_tasks.add(task)
            task.add_done_callback(self.side_tasks.discard)
        elif isinstance(message, CancelTurn):
            if message.forget:
                self._forget(message.session_id, message.turn_id)
            self._cancel(message.session_id, message.turn_id)
        elif isinstance(message, EditHistory):
            running = self.running.get(message.session_id)
            if running is not None and running[0] == message.turn_id and not running[1].done():
                # Its exchange is written when the turn ends (a barge-in's cancel is still unwinding): edit it then.
                running[1].add_done_callback(lambda _task, m=message: self._edit_history(m))
            else:
                self._edit_history(message)
        elif isinstance(message, (ResetHistory, EndSession)):
            self._cancel(message.session_id, ALL_TURNS)
            self.histories.pop(message.session_id, None)
            self.latest_check.pop(message.session_id, None)
            self.awaited.pop(message.session_id, None)
            if isinstance(message, EndSession):
                self.ledger.forget(message.session_id)
                self.looking.forget(message.session_id)

    def _edit_history(self, message: EditHistory) -> None:
        if (history := self.histories.get(message.session_id)) is not None:
            history.edit(message.turn_id, message.reply)

    def _cancel(self, session_id: str, up_to_turn: int) -> None:
        current = self.running.get(session_id)
        if current and current[0] <= up_to_turn:
            current[1].cancel()

    def _forget(self, session_id: str, turn_id: int) -> None:
        """A discarded speculative turn: if it is still running it will leave no history; if it already
        finished (a very short reply), its exchange is taken back."""
        current = self.running.get(session_id)
        if current and current[0] == turn_id:
            self.forgotten.add((session_id, turn_id))  # cleared by _done when the task ends
        if session_id in self.histories:
            self.histories[session_id].drop_turn(turn_id)

    def _done(self, session_id: str, turn_id: int) -> None:
        self.forgotten.discard((session_id, turn_id))
        current = self.running.get(session_id)
        if current and current[0] == turn_id:
            del self.running[session_id]

    async def _run_turn(self, req: TurnRequest) -> None:
        """One turn's life in this worker: its text, the prompt, generation, then the history; a cancel (barge-in)
        or a failure ends it with a TurnEnded that says so."""
        sid, tid = req.session_id, req.turn_id
        run = TurnRun(request_id=f"{sid}:{tid}", started=time.monotonic())
        try:
            self.ledger.started(sid, run.started)
            await self._take_fair_share(sid, run)
            history = self.histories.setdefault(sid, ConversationHistory(self.config.llm.history_turns))
            prepared = await self._prepare(req, run, history)
            if req.unless_command and not self.kit.mode.omni and only_asks_to_stop(run.user_text, req.unless_command):
                self.out.publish(TurnEnded(sid, tid, NAME, "stop command"))  # "No, stop.": nothing to answer
                return
            if run.misheard:
                await self.hearing.ask_again(req, run)
                return
            if prepared is None:
                self.out.publish(TurnEnded(sid, tid, NAME, "no speech recognised"))
                return
            prompt, transcribing = prepared
            try:
                generated = await self.replies.generate(req, run, prompt, history)
            except ImplausibleWords:  # nothing of the reply went out: as if Whisper alone had doubted the words
                run.generating = False
                with contextlib.suppress(Exception):
                    await self.kit.engine.abort(run.request_id)
                await self.hearing.ask_again(req, run)
                return
            if not generated:  # it called the client's tools: theirs to run
                self.out.publish(TurnTimings(sid, tid, NAME, {k: round(v, 4) for k, v in run.timings.items()}))
                self.out.publish(TurnEnded(sid, tid, NAME, "tool_call"))
                return
            if transcribing is not None:  # omni: the transcript is for the page and the history, not the model
                run.user_text = await transcribing or run.user_text
            if run.sense_check and asks_again(run.said):  # the words made no sense to the model: noise, not history
                run.timings["asked_again"] = 1.0
            else:
                history.add(Exchange(run.asked(), run.said, turn_id=tid, tool_messages=run.kept_tool_messages))
            self.out.publish_answered(sid, tid, run)
            try:
                self.warmer.warm(sid, tid, history, run.tools, req.instructions, run.cache_salt)
            except Exception:  # only an optimisation: the turn is answered either way
                self.report.log.exception("could not start the prefix warm-up", extra=turn_ids(sid, tid))
        except asyncio.CancelledError:
            if run.generating:
                with contextlib.suppress(Exception):
                    await self.kit.engine.abort(run.request_id)
            forgotten = (sid, tid) in self.forgotten
            if run.user_text and run.spoken and sid in self.histories and not forgotten:  # nothing said: nothing kept
                self.histories[sid].add(Exchange(run.asked(), run.said, interrupted=True, turn_id=tid,
                                                 tool_messages=run.kept_tool_messages))
            self.out.publish(TurnEnded(sid, tid, NAME, "cancelled", spoken=run.said))
        except TtsBusy as exc:
            self.report.log.error("turn dropped: %s", exc, extra=turn_ids(sid, tid))
            self.out.publish(SessionError(sid, tid, "tts_busy", f"The assistant could not speak: {exc}."))
            self.out.publish(TurnEnded(sid, tid, NAME, "tts_busy", spoken=run.said))
        except Exception as exc:  # one bad turn must not take the worker (and every session) down
            self.report.log.exception("turn failed", extra=turn_ids(sid, tid))
            reason = str(exc) if isinstance(exc, RemoteEngineError) else f"{exc.__class__.__name__}: {exc}"
            if isinstance(exc, EngineFailed):
                reason = "its language model stopped and is being restarted; please ask again in a moment"
            self.out.publish(SessionError(sid, tid, "llm_failed", f"The assistant could not answer: {reason}"))
            self.out.publish(TurnEnded(sid, tid, NAME, "error"))

    async def _take_fair_share(self, sid: str, run: TurnRun) -> None:
        """A session over its share of the worker lets the turns other sessions have in flight now finish first
        (see fair_share); a cancel while waiting ends the turn as usual."""
        if not self.ledger.over_share(sid, run.started):
            return
        others = [task for other, (_tid, task) in self.running.items()
                  if other != sid and other not in self.yielding and not task.done()]
        if not others:
            return
        self.yielding.add(sid)
        try:
            await asyncio.wait(others, timeout=FAIR_WAIT_MAX_S)
        finally:
            self.yielding.discard(sid)
        now = time.monotonic()
        run.timings["fair_wait_s"] = now - run.started
        run.started = now  # the turn's own timings start when it does

    async def _prepare(self, req: TurnRequest, run: TurnRun, history: ConversationHistory
                       ) -> tuple[EnginePrompt, Any] | None:
        """The prompt, and (omni) the task transcribing the audio; None when the user said nothing (or ASR
        misheard them: run.misheard)."""
        transcribing = None
        if self.kit.mode.omni:
            # ASR runs beside the model only for the page and the history
            prompt = omni_prompt(self.kit, req, history, self.config.llm.limit_images_per_prompt)
            if req.audio:
                transcribing = asyncio.ensure_future(self.hearing.omni_transcript(req))
            run.user_text = req.text.strip() or "(spoken)"
        else:
            scene = self.looking.scene_for(req)  # meanwhile, the turn's newest picture is analysed
            awaited = self.awaited.get(req.session_id)
            if req.tool_outputs and not req.speculative and awaited is not None and awaited.answers(req.tool_outputs):
                del self.awaited[req.session_id]  # the client's results: the same question goes on
                run.user_text = awaited.user_text
                said = await self.hearing.cascade_text(req, run) if req.audio or req.text.strip() else ""
                run.tool_messages = awaited.answered(req.tool_outputs, said)
                run.reading = None  # the prompt's words are the question's, not these
            else:
                run.user_text = await self.hearing.cascade_text(req, run)  # meanwhile, the frames
            if not run.user_text:
                return None
            if run.misheard:  # asked again at once (the caller looks): the frames are not waited for
                return None
            last = list(history)[-1:]  # (a follow-up to a question about the camera looks at the picture again)
            await self.looking.look(req, run, scene, after_camera=bool(last) and about_picture(last[0].user))
            run.tools = self.tool_turns.session_tools(req)
            run.fixed_tools = self.tool_turns.prefix_tools(run.tools)
            run.cache_salt = req.session_id if req.instructions or req.client_tools else None
            # (with the client's results in the turn, its functions are not offered beside the question again: the
            # model called the same function again instead of answering from them; nor with results it no longer
            # waits for, as the front charges no functions' section for a response that brings any)
            # (with the picture's text in the prompt, only the tools the user's own words ask for)
            run.picture_in_prompt = bool(run.cues) or any(about_picture(ex.user) for ex in history)
            run.offered = None if run.tool_messages or req.tool_outputs else self.tool_turns.offered_for(
                run.tools, run.user_text, history, picture=run.picture_in_prompt)
            cues, camera_note = self.kit.camera_words(run)
            notes = "\n\n".join(n for n in (camera_note, SENSE_CHECK if run.sense_check else "") if n)
            prompt = self.kit.text_prompt(history, run.user_text, cues, run.offered, tuple(run.tool_messages),
                                          req.instructions, notes, read_words=run.reading is not None,
                                          fixed=run.fixed_tools, salt=run.cache_salt)
            # (only a model that was given the note is taken at its word: not a remote chat or transcript prompt)
            run.sense_check = run.sense_check and SENSE_CHECK in (prompt.text or "")
        run.timings["context_turns"] = float(len(history))
        return prompt, transcribing


def run_llm_worker(config: Config, inbox: Any, queues: dict[str, Any]) -> None:
    """Process entry point (spawned by the process graph)."""
    log = prepare_process(NAME, device_env(config), config.server)
    report = StatusReporter(NAME, queues["status"], log)
    report(WorkerState.LOADING, "importing libraries")
    worker = LlmWorker(config, inbox, queues["tts"], queues["outputs"], report)
    install_fault_signal(worker.inject_engine_fault, log)
    run_stage(report, worker)
