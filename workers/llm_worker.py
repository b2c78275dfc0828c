"""LLM worker process: cascade ASR (or omni input), per-session prompts, streaming, pieces to the TTS queue.

Turns from all sessions run as concurrent tasks against one engine (vLLM batches them), in process or remote
(``--llm_url``). A CancelTurn cancels the turn's task, which aborts its request; history then keeps only
what was handed to TTS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vita.machine.cpu import isa_cap_env, name_os_thread, omp_threads_bind, read_cpu
from vita.messages import (
    ALL_TURNS,
    CancelTurn,
    EditHistory,
    EndSession,
    InterjectionCheck,
    InterjectionText,
    ReplyText,
    ResetHistory,
    SessionError,
    Shutdown,
    ToolCallRequested,
    ToolUsed,
    Transcript,
    TtsPiece,
    TurnEnded,
    TurnRequest,
    TurnTimings,
    WorkerState,
    read_messages,
)
from vita.ops.logs import turn_ids
from vita.words import is_stop_command
from workers.asr import word_error_rate
from workers.common import Publisher, StatusReporter, install_fault_signal, prepare_process, run_stage
from workers.fair_share import ServiceLedger
from workers.generation import EnginePrompt, SamplingSettings, TextEngine
from workers.local_engine import EngineFailed, LocalVllmEngine
from workers.omni import (
    InputMode,
    detect_input_mode,
    frames_to_images,
    load_processor,
    read_model_config,
    utterance_audio,
)
from workers.prompting import ConversationHistory, Exchange, OmniPromptBuilder, PromptBuilder
from workers.remote_engine import RemoteEngine, RemoteEngineError
from workers.speech_pieces import ReplyShaper, SpeechClock
from workers.tools.builtin import builtin_tools
from workers.tools.client_tools import SOURCE as CLIENT_TOOL
from workers.tools.client_tools import AwaitedCalls, as_tools, new_call_id
from workers.tools.in_turn import APOLOGY, FILLER, CallDetector
from workers.tools.intents import planned_calls, spoken_answer
from workers.tools.mcp_tools import McpServers
from workers.tools.registry import ToolBox, ToolCall, ToolOutcome, parse_calls

NAME = "llm"
TTS_PUT_TIMEOUT_S = 1.0
HEARTBEAT_S = 2.0
ENGINE_FAILURE_GRACE_S = 2.0  # after the engine failed, how long its turns get to send their errors
MAILBOX_BOUND = 64  # messages read from the inbox and not yet handled by the event loop
# After a reply is generated, the next prompt's prefix (persona, history with this exchange) is prefilled into the
# engine's prefix cache, so the next turn prefills only its question. It waits this long first: the reply's last
# pieces are being synthesized then, and their voice must not wait for it.
WARM_DELAY_S = 0.4
FAIR_WAIT_MAX_S = 5.0  # a session over its share waits at most this long for the others' turns
# The reply when ASR misheard (asr.ask_again_below): short, and it says what the user can do.
ASK_AGAIN = "Sorry, I didn't catch that. Could you say it again?"


class TtsBusy(Exception):
    """The TTS queue stayed full: the TTS worker is stuck or far behind."""


def device_env(config: Any) -> dict[str, str]:
    llm = config.llm
    env = {"VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if llm.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["VLLM_CPU_KVCACHE_SPACE"] = str(llm.kv_cache_space_gib)
        bind = omp_threads_bind(llm.omp_threads_bind, read_cpu())
        if bind:
            env["VLLM_CPU_OMP_THREADS_BIND"] = bind
        env.update(isa_cap_env())  # read before torch / CTranslate2 are imported
        if llm.tensor_parallel_size == 1:
            # The engine core runs in this process, in local_engine's engine thread, with its one model worker
            # ("uni" executor, see local_engine.engine_kwargs): no process to spawn for either (each one's
            # imports cost ~10 s of every start), and more tokens/s.
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    elif llm.visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = llm.visible_devices
    return env


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
    cues: str = ""  # what the camera showed, for the prompt
    tools: ToolBox | None = None  # what this turn may call
    tool_messages: list[dict[str, Any]] = field(default_factory=list)  # its calls and their results, in order
    planned_messages: int = 0  # how many of them were planned for the model (its answer says their result)

    @property
    def kept_tool_messages(self) -> tuple[dict[str, Any], ...]:
        """What the history keeps: the model's own calls. Planned ones are in the answer already, and a history
        full of calls made for it kept the 1.5B model from calling an MCP tool itself (0 of 5 in a long session)."""
        return tuple(self.tool_messages[self.planned_messages:])

    @property
    def said(self) -> str:
        return " ".join(self.spoken)


class LlmWorker:
    def __init__(self, config: Any, inbox: Any, tts: Any, outbox: Any, report: StatusReporter):
        self.config = config
        self.inbox, self.tts, self.outbox = inbox, tts, outbox
        self.report = report
        self.publisher = Publisher(outbox, report.log, "llm-publish")
        self.engine: TextEngine | None = None
        self.tts_put_timeout_s = TTS_PUT_TIMEOUT_S
        self.mode = InputMode(False)
        self.asr = None
        self.second_asr = None  # asked when the first is unsure (asr.second_opinion)
        self.cues = None
        self.prompts: PromptBuilder | None = None
        self.omni_prompts: OmniPromptBuilder | None = None
        self.histories: dict[str, ConversationHistory] = {}
        self.running: dict[str, tuple[int, asyncio.Task]] = {}
        self.forgotten: set[tuple[str, int]] = set()  # discarded speculative turns: leave no history
        self.side_tasks: set[asyncio.Task] = set()  # interjection checks in flight (kept: asyncio holds weak refs)
        self.warming: dict[str, asyncio.Task] = {}  # session -> its next prompt's prefix being prefilled
        self.latest_check: dict[str, tuple[int, int]] = {}  # session -> (turn, pause) of its newest check
        self.awaited: dict[str, AwaitedCalls] = {}  # session -> the turn waiting for its client's tool results
        self.toolbox = ToolBox([])  # every tool this worker offers (sessions may narrow it)
        self.mcp: McpServers | None = None
        self.ledger = ServiceLedger()  # who asked for many turns lately: that session yields under contention
        self.yielding: set[str] = set()  # sessions whose turn waits for the others' (never waited on in turn)
        self.blocking = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr", initializer=name_os_thread,
                                           initargs=("asr",))
        # Camera frames are decoded on their own thread: a slow image never delays another session's ASR.
        self.vision = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vision")
        self.stop = threading.Event()

    # --- setup -------------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Models this process runs itself; the engine starts in serve(), inside the event loop."""
        cfg = self.config
        self.report(WorkerState.LOADING, f"loading ASR ({cfg.asr.model})")
        from workers.asr import WhisperTranscriber
        from workers.camera_cues import FaceCues

        self.asr = WhisperTranscriber(cfg.models_path() / cfg.asr.model, cfg.asr.compute_type,
                                      cfg.asr.cpu_threads, cfg.asr.language, cfg.asr.beam_size,
                                      short_window=cfg.asr.short_window)
        # The first transcription pays CTranslate2's warm-up (0.55 against 0.3 s, measured with the AVX2 cap): on
        # a second of silence here, not on the first thing a user says.
        self.asr.transcribe(bytes(2 * 16000), 16000)
        self.second_asr = self._second_opinion()
        self.cues = FaceCues()
        llm = cfg.llm
        if llm.url:
            self.engine = RemoteEngine(llm.url, llm.remote_model, llm.api_key, llm.ready_timeout_s)
        else:
            self.mode = detect_input_mode(read_model_config(cfg.llm_model_path()), llm.input_mode)
            self.engine = LocalVllmEngine(cfg, omni=self.mode.omni)

    def _second_opinion(self) -> Any:
        """A second Whisper for the utterances the first is unsure of (two models that disagree misheard, where one
        model's confidence alone cannot see fluent nonsense); English-only models only serve English."""
        cfg = self.config.asr
        if not cfg.second_opinion or cfg.second_opinion == cfg.model or (
                cfg.second_opinion.endswith(".en") and cfg.language not in ("en", None)):
            return None
        from workers.asr import WhisperTranscriber

        second = WhisperTranscriber(self.config.models_path() / cfg.second_opinion, cfg.compute_type,
                                    cfg.cpu_threads, "en", cfg.beam_size, short_window=cfg.short_window)
        second.transcribe(bytes(2 * 16000), 16000)  # its warm-up too, off the first turn
        return second

    async def _start_engine(self) -> None:
        await self.engine.start(self.report)
        llm = self.config.llm
        model_dir = self.config.llm_model_path() if not llm.url else (
            Path(llm.model_path).expanduser() if llm.model_path else getattr(self.engine, "model_root", None))
        if llm.url:
            self.mode = detect_input_mode(read_model_config(model_dir) if model_dir else {}, llm.input_mode)
        if self.mode.omni:
            self.omni_prompts = OmniPromptBuilder(load_processor(model_dir) if model_dir else None, llm.persona)
        tokenizer = self._tokenizer(model_dir) if model_dir else None
        self.prompts = PromptBuilder(tokenizer, llm.prompt_style, llm.persona, llm.history_tokens)
        await self._start_tools()

    async def _start_tools(self) -> None:
        """The built-ins and the operator's MCP servers' tools, for a model that renders its own chat template
        (a remote server or a transcript-style model gets none: noted in /health)."""
        cfg = self.config.tools
        if self.mode.omni or self.prompts.style != "chat" or self.prompts.tokenizer is None:
            return
        tools = builtin_tools() if cfg.builtin else []
        if cfg.mcp_servers:
            self.report(WorkerState.LOADING, f"starting {len(cfg.mcp_servers)} MCP server(s)")
            self.mcp = McpServers(cfg.mcp_servers, cfg.timeout_s)
            await self.mcp.start()
            names = {t.name for t in tools}
            for tool in self.mcp.tools():
                if tool.name in names:
                    self.report.log.warning("MCP tool %r (%s) hidden by a tool of the same name", tool.name,
                                            tool.source)
                    continue
                tools.append(tool)
                names.add(tool.name)
        self.toolbox = ToolBox(tools)

    @staticmethod
    def _tokenizer(model_dir: Path) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model_dir))

    def _sampling(self) -> SamplingSettings:
        return SamplingSettings(self.config.llm.max_tokens, self.config.llm.temperature)

    def _text_prompt(self, history: ConversationHistory, user_text: str, cues: str = "", tools: ToolBox | None = None,
                     after: tuple[dict[str, Any], ...] = (), persona: str | None = None) -> EnginePrompt:
        p = self.prompts if persona is None else self.prompts.with_persona(persona)
        schemas = tools.schemas() if tools else None
        return EnginePrompt(p.build(history, user_text, cues, schemas, after), p.messages(history, user_text, cues,
                                                                                          after), tuple(p.stop))

    @staticmethod
    def _offered(tools: ToolBox | None) -> ToolBox | None:
        """The tools the model itself is shown: the operator's (MCP). The built-ins are called for it when a question
        plainly needs them (intents.py): shown to the model too, they cost the answer set 2-3 of 42 questions
        ("Yes, penguins can fly." became "Penguins can fly.") and it called them for only half of the questions."""
        offered = ToolBox([t for t in tools.tools.values() if t.source != "builtin"]) if tools else None
        return offered or None

    def _session_tools(self, req: TurnRequest) -> ToolBox | None:
        """The tools this turn may call: the session's choice; in a speculative turn (which may yet be discarded)
        only those that change nothing; none when tools.max_calls is 0."""
        if not self.config.tools.max_calls:
            return None
        box = self.toolbox.only(list(req.tools) if req.tools is not None else None, read_only=req.speculative)
        if req.client_tools and self.prompts.style == "chat":  # run by the client: safe in a speculative turn too
            box = ToolBox([*box.tools.values(), *as_tools(req.client_tools)])
        return box or None

    async def _warm_up(self) -> None:
        # With the tools: their part of the system prompt is then in the prefix cache before the first turn.
        async for _ in self.engine.stream(self._text_prompt(ConversationHistory(0), "Hello!",
                                                            tools=self._offered(self.toolbox)),
                                          self._sampling(), "warmup"):
            pass

    def describe(self) -> str:
        style = "omni" if self.mode.omni else self.prompts.style
        tools = f"tools {', '.join(self.toolbox.tools)}" if self.toolbox else "no tools"
        failed = "".join(f"; MCP server {name} failed: {error}" for name, error in
                         (self.mcp.failed() if self.mcp else {}).items())
        return f"{self.engine.description}; input {self.mode.describe()}; prompt style {style}; {tools}{failed}"

    def close(self) -> None:
        self.stop.set()
        self.publisher.close()
        self.blocking.shutdown(wait=False, cancel_futures=True)
        self.vision.shutdown(wait=False, cancel_futures=True)
        if self.engine is not None:
            self.engine.close()

    def inject_engine_fault(self) -> None:
        """Test fault (SIGUSR1 with VITA_FAULT_SIGNALS=1): the in-process engine's thread raises as a failing step
        would; a remote engine has no thread here to fail."""
        if isinstance(self.engine, LocalVllmEngine):
            self.engine.inject_fault(RuntimeError("injected engine fault (SIGUSR1)"))
        else:
            self.report.log.warning("no in-process engine to fail")

    # --- message loop ------------------------------------------------------------------------------------
    async def serve(self) -> None:
        try:
            await self._start_engine()
            self.report(WorkerState.LOADING, "warming up")
            await self._warm_up()
            self.report(WorkerState.READY, self.describe())
            beating = asyncio.create_task(self._beat())
            serving = asyncio.create_task(self._serve_inbox())
            failing = asyncio.create_task(self.engine.wait_failed())
            await asyncio.wait((serving, failing), return_when=asyncio.FIRST_COMPLETED)
            beating.cancel()
            if failing.done():
                await self._end_after_engine_failure(serving, failing.result())
            failing.cancel()
            await serving
        finally:
            if self.mcp is not None:
                await self.mcp.aclose()
            await self.engine.aclose()

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
        is stuck, and the supervisor restarts the worker."""
        while True:
            if self.engine.healthy():
                await asyncio.get_running_loop().run_in_executor(None, self.report.heartbeat)
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
            self._stop_warming()  # a turn prefills for itself, and no warm-up may slow another session's turn
        elif isinstance(message, ResetHistory | EndSession) or (isinstance(message, CancelTurn) and message.forget):
            self._stop_warming(message.session_id)  # its history changed: that prefix is not the next one
        if isinstance(message, TurnRequest):
            self._cancel(message.session_id, message.turn_id - 1)  # a newer turn supersedes the running one
            task = asyncio.create_task(self._run_turn(message))
            self.running[message.session_id] = (message.turn_id, task)
            task.add_done_callback(lambda _t, m=message: self._done(m.session_id, m.turn_id))
        elif isinstance(message, InterjectionCheck):
            self.latest_check[message.session_id] = (message.turn_id, message.pause)
            task = asyncio.create_task(self._hear_interjection(message))
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

    def _warm(self, session_id: str, turn_id: int, history: ConversationHistory, tools: ToolBox | None = None,
              persona: str | None = None) -> None:
        """Prefill the next turn's prompt up to its question while the user listens (a one-token request that
        fills the prefix cache): the previous reply, and after a history trim the whole history, is then no
        longer prefilled on the critical path."""
        llm = self.config.llm
        if not (llm.warm_prefix and llm.prefix_caching and isinstance(self.engine, LocalVllmEngine)) or self.mode.omni:
            return  # (a remote server's cache is its own business: no extra request per reply)
        prompt = self._text_prompt(history, "", tools=self._offered(tools), persona=persona)

        async def warm() -> None:
            await asyncio.sleep(WARM_DELAY_S)
            if self.running:  # another session's turn is generating: it goes first
                return
            async for _ in self.engine.stream(prompt, SamplingSettings(1, 0.0), f"{session_id}:{turn_id}:warm"):
                pass

        task = asyncio.create_task(warm())
        self.warming[session_id] = task
        task.add_done_callback(lambda t, s=session_id: self._warmed(s, t))

    def _edit_history(self, message: EditHistory) -> None:
        if (history := self.histories.get(message.session_id)) is not None:
            history.edit(message.turn_id, message.reply)

    def _warmed(self, session_id: str, task: asyncio.Task) -> None:
        if self.warming.get(session_id) is task:
            del self.warming[session_id]
        if not task.cancelled() and task.exception() is not None:  # only an optimisation: never a turn's error
            self.report.log.warning("prefix warm-up failed: %s", task.exception())

    def _stop_warming(self, session_id: str | None = None) -> None:
        """Cancel the warm-up of one session, or of all (its engine request is aborted)."""
        for sid in [session_id] if session_id is not None else list(self.warming):
            task = self.warming.pop(sid, None)
            if task is not None:
                task.cancel()

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

    async def _hear_interjection(self, check: InterjectionCheck) -> None:
        """ASR alone on short speech over a reply (the front decides whether it was "Stop."); no turn, no history.
        It shares the ASR thread with the turns' transcripts, so it waits behind at most one."""
        def transcribe_if_newest() -> str | None:  # a later pause's check supersedes it: skip the Whisper run
            if self.latest_check.get(check.session_id) != (check.turn_id, check.pause):
                return None
            return self.asr.transcribe(check.audio, check.sample_rate)

        try:
            text = await self._in_thread(transcribe_if_newest)
        except Exception:  # the front then leaves the reply playing: short speech over it is not a turn
            self.report.log.exception("interjection ASR failed")
            text = ""
        if text is not None:
            self._publish(InterjectionText(check.session_id, check.turn_id, check.pause, text))

    def _publish(self, message: Any) -> None:
        self.publisher.publish(message)  # never blocks the event loop

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
            if req.unless_command and not self.mode.omni and is_stop_command(run.user_text, req.unless_command):
                self._publish(TurnEnded(sid, tid, NAME, "stop command"))  # "No, stop.": nothing to answer
                return
            if run.misheard:
                await self._ask_again(req, run)
                return
            if prepared is None:
                self._publish(TurnEnded(sid, tid, NAME, "no speech recognised"))
                return
            prompt, transcribing = prepared
            if not await self._generate(req, run, prompt, history):  # it called the client's tools: theirs to run
                self._publish(TurnTimings(sid, tid, NAME, {k: round(v, 4) for k, v in run.timings.items()}))
                self._publish(TurnEnded(sid, tid, NAME, "tool_call"))
                return
            if transcribing is not None:  # omni: the transcript is for the page and the history, not the model
                run.user_text = await transcribing or run.user_text
            history.add(Exchange(run.user_text, run.said, turn_id=tid, tool_messages=run.kept_tool_messages))
            self._publish_answered(sid, tid, run)
            try:
                self._warm(sid, tid, history, run.tools, req.instructions)
            except Exception:  # only an optimisation: the turn is answered either way
                self.report.log.exception("could not start the prefix warm-up", extra=turn_ids(sid, tid))
        except asyncio.CancelledError:
            if run.generating:
                with contextlib.suppress(Exception):
                    await self.engine.abort(run.request_id)
            forgotten = (sid, tid) in self.forgotten
            if run.user_text and run.spoken and sid in self.histories and not forgotten:  # nothing said: nothing kept
                self.histories[sid].add(Exchange(run.user_text, run.said, interrupted=True, turn_id=tid,
                                                 tool_messages=run.kept_tool_messages))
            self._publish(TurnEnded(sid, tid, NAME, "cancelled", spoken=run.said))
        except TtsBusy as exc:
            self.report.log.error("turn dropped: %s", exc, extra=turn_ids(sid, tid))
            self._publish(SessionError(sid, tid, "tts_busy", f"The assistant could not speak: {exc}."))
            self._publish(TurnEnded(sid, tid, NAME, "tts_busy", spoken=run.said))
        except Exception as exc:  # one bad turn must not take the worker (and every session) down
            self.report.log.exception("turn failed", extra=turn_ids(sid, tid))
            reason = str(exc) if isinstance(exc, RemoteEngineError) else f"{exc.__class__.__name__}: {exc}"
            if isinstance(exc, EngineFailed):
                reason = "its language model stopped and is being restarted; please ask again in a moment"
            self._publish(SessionError(sid, tid, "llm_failed", f"The assistant could not answer: {reason}"))
            self._publish(TurnEnded(sid, tid, NAME, "error"))

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
        if self.mode.omni:
            prompt, transcribing = self._omni_prompt(req, history)
            run.user_text = req.text.strip() or "(spoken)"
        else:
            loop = asyncio.get_running_loop()
            cues = loop.run_in_executor(self.vision, self.cues.describe, req.frames) if req.frames else None
            awaited = self.awaited.pop(req.session_id, None)
            if req.tool_outputs and awaited is not None:  # the client's results: the same question goes on
                run.user_text = awaited.user_text
                run.tool_messages = awaited.answered(req.tool_outputs)
            else:
                run.user_text = await self._cascade_text(req, run)  # meanwhile, the frames
            if not run.user_text:
                return None
            if run.misheard:  # asked again at once (the caller looks): the frames are not waited for
                return None
            run.cues = await cues if cues else ""
            run.tools = self._session_tools(req)
            prompt = self._text_prompt(history, run.user_text, run.cues, self._offered(run.tools),
                                       tuple(run.tool_messages), req.instructions)
        run.timings["context_turns"] = float(len(history))
        return prompt, transcribing

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
        offered = self._offered(run.tools)

        def next_prompt() -> EnginePrompt:  # with what the tools have answered so far
            return self._text_prompt(history or ConversationHistory(0), run.user_text, run.cues, offered,
                                     tuple(run.tool_messages), req.instructions)

        round_tokens = 0
        answered = False  # by the tools' results, said as they are: no (more) generation
        planned = planned_calls(run.user_text, set(run.tools.tools)) if calls_left else []
        if planned:  # "What time is it?": called for the model, and said as it is when the calls worked
            outcomes = await self._run_calls(req, run, planned[:calls_left], "", clock, gen_started)
            run.planned_messages = len(run.tool_messages)
            calls_left -= len(outcomes)
            answered = all(o.ok for o in outcomes)
            if answered:
                held += self._say_results(sid, tid, planned, outcomes)
            else:
                prompt = next_prompt()
        while not answered:
            detector = CallDetector(enabled=bool(offered))  # on to the end: a call past the limit is not spoken
            round_tokens = 0
            run.generating = True
            async for delta in self.engine.stream(prompt, self._sampling(), run.request_id):
                tokens += delta.tokens
                round_tokens += delta.tokens
                if delta.prompt_tokens is not None:
                    timings["prompt_tokens"] = float(delta.prompt_tokens)
                if delta.cached_tokens is not None:
                    timings["cached_tokens"] = float(delta.cached_tokens)
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
            outcomes = await self._run_calls(req, run, calls, detector.pending, clock, gen_started)
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

    def _for_the_client(self, req: TurnRequest, run: TurnRun, calls: list[ToolCall]) -> bool:
        """Calls of the client's own tools go to the client (the others in the same reply are left out: the
        client answers first); the turn then waits for its results, as a turn of its own."""
        theirs = [c for c in calls if not c.error and (tool := run.tools.tools.get(c.name)) is not None
                  and tool.source == CLIENT_TOOL]
        if not theirs:
            return False
        named = [(new_call_id(), c) for c in theirs]
        self.awaited[req.session_id] = AwaitedCalls.of(run.user_text, run.tool_messages, named)
        for call_id, call in named:
            self._publish(ToolCallRequested(req.session_id, req.turn_id, call_id, call.name,
                                            json.dumps(call.arguments, ensure_ascii=False)))
        return True

    def _say_results(self, sid: str, tid: int, calls: list[ToolCall], outcomes: list[ToolOutcome]) -> list[str]:
        """The tools' results, said as they are, shown as the reply's text. Asked to put them in words, the bundled
        1.5B model said "The current date, day of the week and time is 2..." for 125 x 48, or nothing, or called
        the tool again (scripts/eval_tools.py)."""
        answers = [spoken_answer(call, o.result) for call, o in zip(calls, outcomes, strict=False)]
        for answer in answers:
            self._publish(ReplyText(sid, tid, answer + " "))
        return answers

    async def _run_calls(self, req: TurnRequest, run: TurnRun, calls: list[ToolCall], text: str,
                         clock: SpeechClock, gen_started: float) -> list[ToolOutcome]:
        """Run tool calls (the model's, written as `text`, or planned for it), each result shown on the page and
        added to the turn's context; a call still running after tools.filler_after_ms gets "Let me check." said
        first. Returns their outcomes, in order."""
        readable = [c for c in calls if not c.error]
        run.tool_messages.append({"role": "assistant", "content": "" if readable else text.strip(),
                                  "tool_calls": [{"type": "function", "function": {"name": c.name,
                                                                                   "arguments": c.arguments}}
                                                 for c in readable]})
        filler_s = self.config.tools.filler_after_ms / 1000
        outcomes = []
        for call in calls:
            task = asyncio.create_task(run.tools.call(call, {"timezone": req.timezone}))
            try:
                if filler_s and not run.spoken:
                    done, _ = await asyncio.wait({task}, timeout=filler_s)
                    if not done:  # the line must not go dead while the tool works
                        await self._send_piece(req, run.spoken, FILLER, run.timings, gen_started)
                        clock.handed(FILLER, time.monotonic())
                outcome = await task
            finally:
                task.cancel()
            run.tool_messages.append(outcome.as_message())
            timings = run.timings
            timings["tool_calls"] = timings.get("tool_calls", 0.0) + 1
            timings["tool_s"] = timings.get("tool_s", 0.0) + outcome.duration_s
            timings["tool_result_chars"] = timings.get("tool_result_chars", 0.0) + len(outcome.result)
            if not outcome.ok:
                timings["tool_errors"] = timings.get("tool_errors", 0.0) + 1
            self._publish(ToolUsed(req.session_id, req.turn_id, outcome.name or "(unreadable call)",
                                   json.dumps(outcome.arguments, ensure_ascii=False), outcome.result, outcome.ok,
                                   outcome.outcome, outcome.duration_s))
            outcomes.append(outcome)
        return outcomes

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

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.blocking, fn, *args)

    async def _cascade_text(self, req: TurnRequest, run: TurnRun) -> str:
        """Cascade: the utterance through ASR, joined with any typed text."""
        transcript = ""
        if req.audio:
            heard = await self._in_thread(self.asr.hear, req.audio, req.sample_rate)
            transcript = heard.text
            run.timings["asr_s"] = time.monotonic() - run.started
            if transcript:
                run.timings["asr_logprob"] = heard.avg_logprob
                below = self.config.asr.ask_again_below
                run.misheard = below is not None and heard.avg_logprob < below and not req.text.strip()
                if not run.misheard and not req.text.strip() and heard.avg_logprob < self.config.asr.doubt_below:
                    run.misheard = await self._disagree(req, run, transcript)
            self._publish(Transcript(req.session_id, req.turn_id, transcript))
        return " ".join(t for t in (transcript, req.text.strip()) if t)

    async def _disagree(self, req: TurnRequest, run: TurnRun, transcript: str) -> bool:
        """Whisper was unsure: does a second model hear the same words? (scripts/bench_asr.py accuracy: with it,
        "say it again" catches 12 of 15 garbled robotic questions instead of 9, 50 of 62 noisy ones instead of 44.)"""
        if self.second_asr is None:
            return False
        started = time.monotonic()
        other = await self._in_thread(self.second_asr.hear, req.audio, req.sample_rate)
        disagreement = word_error_rate(transcript, other.text)
        run.timings["second_asr_s"] = time.monotonic() - started
        run.timings["asr_disagreement"] = round(disagreement, 3)
        return disagreement > self.config.asr.disagree_above

    async def _ask_again(self, req: TurnRequest, run: TurnRun) -> None:
        """What Whisper heard is not what was said ("We try to move the salon trunk."): say so, as a person would,
        rather than answer it. The exchange stays out of the history (its words are noise)."""
        sid, tid = req.session_id, req.turn_id
        run.timings["asked_again"] = 1.0
        run.user_text = ""  # nor does a cancel put its words there
        started = time.monotonic()
        await self._send_piece(req, run.spoken, ASK_AGAIN, run.timings, started)
        await self._to_tts(TtsPiece(sid, tid, len(run.spoken), "", last=True, voice=req.voice))
        self._publish_answered(sid, tid, run)

    def _publish_answered(self, sid: str, tid: int, run: TurnRun) -> None:
        """An answered turn's last messages: the reply as spoken, the timings, the end."""
        self._publish(ReplyText(sid, tid, "", done=True, text=run.said))
        self._publish(TurnTimings(sid, tid, NAME, {k: round(v, 4) for k, v in run.timings.items()}))
        self._publish(TurnEnded(sid, tid, NAME, spoken=run.said))

    def _omni_prompt(self, req: TurnRequest, history: ConversationHistory
                     ) -> tuple[EnginePrompt, asyncio.Future | None]:
        """Audio and frames go to the model as they are; ASR runs beside it only for the page and history."""
        llm = self.config.llm
        audio = (utterance_audio(req.audio, req.sample_rate),) if req.audio else ()
        images = frames_to_images(req.frames, llm.limit_images_per_prompt) if self.mode.images else ()
        messages = self.omni_prompts.messages(history, req.text, len(images), bool(audio))
        prompt = EnginePrompt(self.omni_prompts.build(messages), messages, (), audio, images)
        transcribing = None
        if req.audio:
            transcribing = asyncio.ensure_future(self._omni_transcript(req))
        return prompt, transcribing

    async def _omni_transcript(self, req: TurnRequest) -> str:
        transcript = await self._in_thread(self.asr.transcribe, req.audio, req.sample_rate)
        self._publish(Transcript(req.session_id, req.turn_id, transcript))
        return " ".join(t for t in (transcript, req.text.strip()) if t)

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


def run_llm_worker(config: Any, inbox: Any, queues: dict[str, Any]) -> None:
    """Process entry point (spawned by the process graph)."""
    log = prepare_process(NAME, device_env(config), config.server)
    report = StatusReporter(NAME, queues["status"], log)
    report(WorkerState.LOADING, "importing libraries")
    worker = LlmWorker(config, inbox, queues["tts"], queues["outputs"], report)
    install_fault_signal(worker.inject_engine_fault, log)
    run_stage(report, worker.setup, lambda: asyncio.run(worker.serve()), worker.close)
