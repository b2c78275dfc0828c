"""LLM worker process: cascade ASR, per-session prompts, vLLM async streaming, pieces to the TTS queue.

Turns from all sessions run as concurrent tasks against one engine (vLLM batches them). A CancelTurn cancels
the turn's task, which aborts its vLLM request; history then keeps only what was handed to TTS.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from vita.logs import turn_ids
from vita.messages import (
    CancelTurn,
    EndSession,
    ReplyText,
    ResetHistory,
    SessionError,
    Shutdown,
    Transcript,
    TtsPiece,
    TurnEnded,
    TurnRequest,
    TurnTimings,
    WorkerState,
)
from vita.prompting import ConversationHistory, Exchange, PromptBuilder
from vita.speech_pieces import PieceSplitter
from workers.common import StatusReporter, prepare_process, run_stage

NAME = "llm"


def device_env(config: Any) -> dict[str, str]:
    llm = config.llm
    env = {"VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if llm.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["VLLM_CPU_KVCACHE_SPACE"] = str(llm.kv_cache_space_gib)
    elif llm.visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = llm.visible_devices
    return env


class LlmWorker:
    def __init__(self, config: Any, inbox: Any, tts: Any, outbox: Any, report: StatusReporter):
        self.config = config
        self.inbox, self.tts, self.outbox = inbox, tts, outbox
        self.report = report
        self.engine = None
        self.asr = None
        self.cues = None
        self.prompts: PromptBuilder | None = None
        self.histories: dict[str, ConversationHistory] = {}
        self.running: dict[str, tuple[int, asyncio.Task]] = {}
        self.blocking = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr")
        self.stop = threading.Event()

    # --- setup -------------------------------------------------------------------------------------------
    def setup(self) -> None:
        cfg = self.config
        self.report(WorkerState.LOADING, f"loading ASR ({cfg.asr.model})")
        from workers.asr import WhisperTranscriber
        from workers.camera_cues import FaceCues

        self.asr = WhisperTranscriber(cfg.models_path() / cfg.asr.model, cfg.asr.compute_type,
                                      cfg.asr.cpu_threads, cfg.asr.language, cfg.asr.beam_size)
        self.cues = FaceCues()
        self.report(WorkerState.LOADING, f"starting vLLM engine on {cfg.llm_model_path()} (about a minute on CPU)")
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        llm = cfg.llm
        kwargs: dict[str, Any] = dict(
            model=str(cfg.llm_model_path()), dtype=llm.dtype, max_model_len=llm.max_model_len,
            enforce_eager=llm.enforce_eager, tensor_parallel_size=llm.tensor_parallel_size,
            disable_log_stats=True,
        )
        if llm.device == "cuda":
            kwargs["gpu_memory_utilization"] = llm.gpu_memory_utilization
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
        tokenizer = self._tokenizer()
        self.prompts = PromptBuilder(tokenizer, llm.prompt_style, llm.persona)
        self.report(WorkerState.LOADING, f"warming up (prompt style: {self.prompts.style})")

    def _tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(self.config.llm_model_path()))

    def _sampling(self) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        llm = self.config.llm
        return SamplingParams(temperature=llm.temperature, max_tokens=llm.max_tokens, stop=self.prompts.stop,
                              output_kind=RequestOutputKind.DELTA)

    async def _warm_up(self) -> None:
        prompt = self.prompts.build(ConversationHistory(0), "Hello!")
        async for _ in self.engine.generate(prompt, self._sampling(), "warmup"):
            pass

    def close(self) -> None:
        self.stop.set()
        self.blocking.shutdown(wait=False, cancel_futures=True)
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None

    # --- message loop ------------------------------------------------------------------------------------
    async def serve(self) -> None:
        await self._warm_up()
        self.report(WorkerState.READY, f"prompt style {self.prompts.style}")
        loop = asyncio.get_running_loop()
        mailbox: asyncio.Queue = asyncio.Queue()
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
        while not self.stop.is_set():
            try:
                message = self.inbox.get(timeout=1.0)
            except queue.Empty:
                continue
            except (EOFError, OSError, BrokenPipeError):  # the manager is gone: the server is stopping
                message = Shutdown()
            loop.call_soon_threadsafe(mailbox.put_nowait, message)
            if isinstance(message, Shutdown):
                return

    def _handle(self, message: Any) -> None:
        if isinstance(message, TurnRequest):
            self._cancel(message.session_id, message.turn_id - 1)  # a newer turn supersedes the running one
            task = asyncio.create_task(self._run_turn(message))
            self.running[message.session_id] = (message.turn_id, task)
            task.add_done_callback(lambda _t, m=message: self._forget(m.session_id, m.turn_id))
        elif isinstance(message, CancelTurn):
            self._cancel(message.session_id, message.turn_id)
        elif isinstance(message, (ResetHistory, EndSession)):
            self._cancel(message.session_id, 1 << 62)
            self.histories.pop(message.session_id, None)

    def _cancel(self, session_id: str, up_to_turn: int) -> None:
        current = self.running.get(session_id)
        if current and current[0] <= up_to_turn:
            current[1].cancel()

    def _forget(self, session_id: str, turn_id: int) -> None:
        current = self.running.get(session_id)
        if current and current[0] == turn_id:
            del self.running[session_id]

    def _emit(self, message: Any) -> None:
        self.outbox.put(message)

    async def _run_turn(self, req: TurnRequest) -> None:
        sid, tid = req.session_id, req.turn_id
        timings: dict[str, float] = {}
        spoken: list[str] = []
        user_text = ""
        request_id = f"{sid}:{tid}"
        generating = False
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            transcript = ""
            if req.audio:
                transcript = await loop.run_in_executor(self.blocking, self.asr.transcribe, req.audio,
                                                        req.sample_rate)
                timings["asr_s"] = time.monotonic() - started
                self._emit(Transcript(sid, tid, transcript))
            user_text = " ".join(t for t in (transcript, req.text.strip()) if t)
            if not user_text:
                self._emit(TurnEnded(sid, tid, NAME, "no speech recognised"))
                return
            cues = ""
            if req.frames:
                cues = await loop.run_in_executor(self.blocking, self.cues.describe, req.frames)
            history = self.histories.setdefault(sid, ConversationHistory(self.config.llm.history_turns))
            timings["context_turns"] = float(len(history))
            prompt = self.prompts.build(history, user_text, cues)
            splitter = PieceSplitter()
            streaming = req.reply_mode != "full"
            held: list[str] = []  # full mode: pieces wait for the end of generation
            gen_started = time.monotonic()
            tokens = 0
            generating = True
            async for output in self.engine.generate(prompt, self._sampling(), request_id):
                completion = output.outputs[0]
                tokens += len(completion.token_ids)
                if "first_token_s" not in timings:
                    timings["first_token_s"] = time.monotonic() - gen_started
                    timings["prompt_tokens"] = float(len(output.prompt_token_ids or ()))
                if completion.text:
                    self._emit(ReplyText(sid, tid, completion.text))
                for piece in splitter.feed(completion.text):
                    if streaming:
                        self._send_piece(req, spoken, piece, timings, gen_started)
                    else:
                        held.append(piece)
            generating = False
            held += splitter.flush()
            if streaming:
                for piece in held:
                    self._send_piece(req, spoken, piece, timings, gen_started)
            elif held:
                self._send_piece(req, spoken, " ".join(held), timings, gen_started)
            self.tts.put(TtsPiece(sid, tid, len(spoken), "", last=True, voice=req.voice))
            timings["generate_s"] = time.monotonic() - gen_started
            timings["tokens"] = float(tokens)
            timings["tokens_per_s"] = tokens / timings["generate_s"] if timings["generate_s"] > 0 else 0.0
            history.add(Exchange(user_text, " ".join(spoken)))
            self._emit(ReplyText(sid, tid, "", done=True))
            self._emit(TurnTimings(sid, tid, NAME, {k: round(v, 4) for k, v in timings.items()}))
            self._emit(TurnEnded(sid, tid, NAME, spoken=" ".join(spoken)))
        except asyncio.CancelledError:
            if generating:
                with contextlib.suppress(Exception):
                    await self.engine.abort(request_id)
            if user_text and sid in self.histories:
                self.histories[sid].add(Exchange(user_text, " ".join(spoken), interrupted=True))
            self._emit(TurnEnded(sid, tid, NAME, "cancelled", spoken=" ".join(spoken)))
        except Exception as exc:  # one bad turn must not take the worker (and every session) down
            self.report.log.exception("turn failed", extra=turn_ids(sid, tid))
            self._emit(SessionError(sid, tid, "llm_failed", f"The assistant could not answer: {exc}"))
            self._emit(TurnEnded(sid, tid, NAME, "error"))

    def _send_piece(self, req: TurnRequest, spoken: list[str], piece: str, timings: dict[str, float],
                    gen_started: float) -> None:
        if not spoken:
            timings["first_piece_s"] = time.monotonic() - gen_started
        self.tts.put(TtsPiece(req.session_id, req.turn_id, len(spoken), piece, voice=req.voice))
        spoken.append(piece)


def run_llm_worker(config: Any, inbox: Any, queues: dict[str, Any]) -> None:
    """Process entry point (spawned by the process graph)."""
    log = prepare_process(NAME, device_env(config), config.server)
    report = StatusReporter(NAME, queues["outputs"], log)
    report(WorkerState.LOADING, "importing libraries")
    worker = LlmWorker(config, inbox, queues["tts"], queues["outputs"], report)
    run_stage(report, worker.setup, lambda: asyncio.run(worker.serve()), worker.close)
