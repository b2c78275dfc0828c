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
    Shutdown,
    TurnCommitted,
    TurnRequest,
    TurnWorking,
    WorkerState,
    read_messages,
)
from vita.ops.tracing import Tracing
from workers.common import Publisher, StatusReporter, install_fault_signal, prepare_process
from workers.llm.engines.asr import WhisperTranscriber, quickest_on_silence, threads_worth_it
from workers.llm.engines.local_engine import LocalVllmEngine
from workers.llm.engines.omni import detect_input_mode, load_processor, read_model_config
from workers.llm.engines.remote_engine import RemoteEngine
from workers.llm.engines.vllm_settings import device_env
from workers.llm.hearing import Hearing, second_opinion
from workers.llm.kit import LlmKit
from workers.llm.looking import Looking
from workers.llm.prefix_warming import PrefixWarming
from workers.llm.prompting import OmniPromptBuilder, PromptBuilder
from workers.llm.reply_generation import ReplyGeneration
from workers.llm.tool_setup import start_tools
from workers.llm.tool_turns import ToolTurns
from workers.llm.turn_output import TurnOutput
from workers.llm.turn_run import NAME
from workers.llm.turn_steps import TurnSteps
from workers.llm.worker_sessions import ServiceLedger, WorkerSessions
from workers.memory.remembering import Remembering
from workers.stage import run_stage
from workers.tools.isolated import IsolatedCalls
from workers.tools.mcp_tools import McpServers

HEARTBEAT_S = 2.0
WORKING_MAX_STALLS = 4  # a turn is said to be at work for at most this many of the front's stall limits
ENGINE_FAILURE_GRACE_S = 2.0  # after the engine failed, how long its turns get to send their errors
MAILBOX_BOUND = 64  # messages read from the inbox and not yet handled by the event loop
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
        self.kit.tracing = Tracing.for_process(NAME, config.tracing.endpoint, config.tracing.protocol,
                                               config.tracing.content)
        self.out = TurnOutput(tts, self.publisher, config.llm.max_reply_words)
        self.speed: MeasuredSpeed | None = None  # measured as the engine warms up (--max_users auto)
        self.sessions = WorkerSessions(config.llm.history_turns)  # each session's history, turn, checks, calls
        self.side_tasks: set[asyncio.Task] = set()  # interjection checks in flight (kept: asyncio holds weak refs)
        self.mcp: McpServers | None = None
        self.arithmetic: IsolatedCalls | None = None  # the process `calculate` runs in
        self.ledger = ServiceLedger()  # who asked for many turns lately: that session yields under contention
        self.hearing = Hearing(self.kit, self.out, report.log, self.sessions.latest_check)
        self.tool_turns = ToolTurns(self.kit, self.out, self.sessions)
        self.replies = ReplyGeneration(self.kit, self.out, self.tool_turns)
        self.warmer = PrefixWarming(self.kit, self.tool_turns, report.log, self.sessions.any_turn)
        self.looking = Looking(config.vision, self.out, report.log)  # what a text-only model learns of the camera
        self.remembering = Remembering(config.memory_path(), config.memory.retention_days, self.sessions, report.log)
        self.steps = TurnSteps(config, self.kit, self.out, self.sessions, self.ledger, self.hearing, self.looking,
                               self.tool_turns, self.replies, self.warmer, self.remembering, report.log)
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
        self.remembering.setup()

    async def _start_engine(self) -> None:
        await self.kit.engine.start(self.report)
        llm = self.config.llm
        model_dir = self.config.llm_model_path() if not llm.url else (
            Path(llm.model_path).expanduser() if llm.model_path else getattr(self.kit.engine, "model_root", None))
        self.kit.model_name = llm.remote_model or (Path(model_dir).name if model_dir else "")
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
        self.kit.tracing.shutdown()
        self.blocking.shutdown(wait=False, cancel_futures=True)
        self.looking.close()
        self.remembering.close()
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
        turns = [task for _, _, task in self.sessions.turns()]
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
                    running = {(sid, tid) for sid, tid, _ in self.sessions.turns()}
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
        tasks = [task for _, _, task in self.sessions.turns()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

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
        sid = getattr(message, "session_id", "")
        if isinstance(message, TurnRequest):
            self.warmer.stop()  # a turn prefills for itself, and no warm-up may slow another session's turn
        elif isinstance(message, ResetHistory | EndSession) or (isinstance(message, CancelTurn) and message.forget):
            self.warmer.stop(sid)  # its history changed: that prefix is not the next one
        if isinstance(message, TurnRequest):
            self._cancel(sid, message.turn_id - 1)  # a newer turn supersedes the running one
            task = asyncio.create_task(self.steps.run(message))
            self.sessions.of(sid).turn = (message.turn_id, task)
            task.add_done_callback(lambda _t, m=message: self._done(m.session_id, m.turn_id))
        elif isinstance(message, CameraFrame):
            self.looking.seen(sid, message.picture)
        elif isinstance(message, InterjectionCheck):
            self.sessions.of(sid).latest_check = (message.turn_id, message.pause)
            task = asyncio.create_task(self.hearing.hear_interjection(message))
            self.side_tasks.add(task)
            task.add_done_callback(self.side_tasks.discard)
        elif isinstance(message, TurnCommitted):
            self.remembering.committed(sid, message.turn_id)
        elif isinstance(message, CancelTurn):
            if message.forget:
                self._forget(sid, message.turn_id)
                self.remembering.forgotten(sid, message.turn_id)
            self._cancel(sid, message.turn_id)
        elif isinstance(message, EditHistory):
            running = self.sessions.turn_of(sid)
            if running is not None and running[0] == message.turn_id and not running[1].done():
                # Its exchange is written when the turn ends (a barge-in's cancel is still unwinding): edit it then.
                running[1].add_done_callback(lambda _task, m=message: self._edit_history(m))
            else:
                self._edit_history(message)
        elif isinstance(message, ResetHistory | EndSession):
            self._cancel(sid, ALL_TURNS)
            if (session := self.sessions.get(sid)) is not None:
                session.forget_conversation()
                session.ended = isinstance(message, EndSession)
                self.sessions.prune(sid)  # (an ended one's turn still unwinding: when it ends)
            if isinstance(message, EndSession):
                self.ledger.forget(sid)
                self.looking.forget(sid)

    def _edit_history(self, message: EditHistory) -> None:
        if (history := self.sessions.history(message.session_id)) is not None:
            history.edit(message.turn_id, message.reply)

    def _cancel(self, session_id: str, up_to_turn: int) -> None:
        current = self.sessions.turn_of(session_id)
        if current and current[0] <= up_to_turn:
            current[1].cancel()

    def _forget(self, session_id: str, turn_id: int) -> None:
        """A discarded speculative turn: if it is still running it will leave no history; if it already
        finished (a very short reply), its exchange is taken back."""
        session = self.sessions.get(session_id)
        if session is None:
            return
        if session.turn and session.turn[0] == turn_id:
            session.forgotten.add(turn_id)  # cleared by _done when the task ends
        if session.history is not None:
            session.history.drop_turn(turn_id)

    def _done(self, session_id: str, turn_id: int) -> None:
        session = self.sessions.get(session_id)
        if session is None:
            return
        session.forgotten.discard(turn_id)
        if session.turn and session.turn[0] == turn_id:
            session.turn = None
        self.sessions.prune(session_id)


def run_llm_worker(config: Config, inbox: Any, queues: dict[str, Any]) -> None:
    """Process entry point (spawned by the process graph)."""
    log = prepare_process(NAME, device_env(config), config.server)
    report = StatusReporter(NAME, queues["status"], log)
    report(WorkerState.LOADING, "importing libraries")
    worker = LlmWorker(config, inbox, queues["tts"], queues["outputs"], report)
    install_fault_signal(worker.inject_engine_fault, log)
    run_stage(report, worker)
