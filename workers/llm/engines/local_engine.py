"""vLLM's engine inside the LLM worker process: the default, and the GPU box's 7B path."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from vita.config import Config
from vita.cpu import (
    apply_isa_cap,
    name_os_thread,
    read_cpu,
    set_nice,
)
from vita.messages import WorkerState
from workers.llm.engines.generation import Delta, EnginePrompt, SamplingSettings
from workers.llm.engines.vllm_settings import engine_kwargs, in_process_cores, weights_description


def vllm_input(prompt: EnginePrompt) -> Any:
    """A plain string, or vLLM's prompt dict (a cache salt; audio as (array, rate) pairs, images as PIL)."""
    salted = {"cache_salt": prompt.cache_salt} if prompt.cache_salt else {}
    if not prompt.has_media:
        return {"prompt": prompt.text, **salted} if salted else prompt.text
    data: dict[str, list] = {}
    if prompt.audio:
        data["audio"] = list(prompt.audio)
    if prompt.images:
        from PIL import Image

        data["image"] = [Image.fromarray(image) for image in prompt.images]
    return {"prompt": prompt.text, "multi_modal_data": data, **salted}


BANNED_BIAS = -100.0  # a logit bias that no token overcomes (SamplingSettings.banned)
MIN_WORDS_READ = 2  # fewer log-probabilities than this (a one-token utterance, a prompt cut short): no reading


def words_logprob(prompt_logprobs: Any, token_ids: Any, cached: int | None,
                  words_from_end: tuple[int, int]) -> float | None:
    """The mean log-probability of the prompt's words but their first token, and of the token after them
    (EnginePrompt.words_from_end), from vLLM's prompt_logprobs (None first, then {token id: Logprob} for each
    position). The first token opens a new question, and how surprising a new topic is says nothing of whether the
    words are nonsense: of the questions heard exactly that the reading decided, 20 and 11 of 48 were asked again
    with it, as a first question and after a short history, against 10 and 4 without it, for 11 of 14 garbled ones
    caught against 12 (Zen 1, the 0.5B model, 2026-11-27; docs/history.md). A position found in the prefix cache
    was never computed (vLLM leaves its slot unfilled): when any of those read is (the same words after the same
    history again, e.g. repeated after "say it again"), None. Their last tokens alone, the easiest to predict,
    would pass nonsense."""
    if not prompt_logprobs or not token_ids:
        return None
    words, after = words_from_end
    end = len(token_ids) - after  # the token after the words: the end of the user's turn (or the cues' "(")
    first = max(end - words + 1, 1)
    if first <= (cached or 0):
        return None
    values = []
    for i in range(first, min(end + 1, len(token_ids), len(prompt_logprobs))):
        entry = prompt_logprobs[i]
        logprob = entry.get(token_ids[i]) if entry else None
        if logprob is None:
            return None
        values.append(float(getattr(logprob, "logprob", logprob)))
    if len(values) < MIN_WORDS_READ:
        return None
    return sum(values) / len(values)


def token_texts(tokenizer: Any) -> list[str]:
    """Each token id's text (0.7 s for Qwen's 152k); none where the tokenizer cannot say (nothing is banned then)."""
    try:
        return tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    except Exception:  # noqa: BLE001 - only a guard on replies: the engine serves without it
        logging.getLogger(__name__).warning("the tokenizer could not list its tokens: replies may write an "
                                            "ellipsis", exc_info=True)
        return []


class TextAssembler:
    """The reply's text from its token ids, for a request vLLM does not detokenize (judge_words: its prompt
    log-probabilities must not be detokenized, see stream). Each decode of all the ids so far extends the last one
    (byte-level BPE does, once a character is whole): held back while the last token ends mid-character."""

    def __init__(self, tokenizer: Any):
        self.tokenizer, self.ids, self.sent = tokenizer, [], ""

    def feed(self, token_ids: Any) -> str:
        self.ids.extend(token_ids)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        if text.endswith("\ufffd"):
            return ""
        new, self.sent = text[len(self.sent):], text
        return new


@dataclass(frozen=True)
class _Add:
    request_id: str
    prompt: Any
    params: Any
    outputs: asyncio.Queue
    loop: asyncio.AbstractEventLoop

    def deliver(self, item: Any) -> None:
        """From the engine thread: an output (or the exception that ends the turn) onto the turn's queue."""
        self.loop.call_soon_threadsafe(self.outputs.put_nowait, item)


@dataclass(frozen=True)
class _Abort:
    request_id: str


@dataclass(frozen=True)
class _Fault:
    """Test hook (sent only by ``inject_fault``): the engine thread raises this error as a failing step would."""

    error: BaseException


def bind_engine_thread(cores: tuple[int, ...]) -> None:
    """The calling thread runs on these cores only (Linux affinity is per thread); the OpenMP threads it starts for
    the model's layers inherit that, while the LLM worker's other threads (ASR, the event loop) may use every core."""
    os.sched_setaffinity(0, cores)


class EngineRequestFailed(RuntimeError):
    """The engine ended one request with an error; the engine itself goes on."""


class EngineFailed(RuntimeError):
    """The engine thread ended with an error: nothing more can be generated until the worker is restarted."""


_STOP = object()
IDLE_WAKE_S = 1.0  # an idle engine thread wakes this often to show it is alive
EMPTY_STEP_S = 0.001  # a step this short with no output ran nothing: the next waits GRAMMAR_WAIT_S for a command
GRAMMAR_WAIT_S = 0.005
STALL_S = 30.0  # a step (or idle wait) longer than this means the engine is stuck: heartbeats stop


class LocalVllmEngine:
    """vLLM's engine in this process, stepped by a thread of its own ("vllm-engine").

    The thread builds the engine and runs every step, so vLLM's OpenMP threads stay bound to it. On a CPU with
    one model worker (VLLM_ENABLE_V1_MULTIPROCESSING=0, see device_env) the engine core then runs
    here too: vLLM's async engine would spawn a process for it, whose own imports cost ~10 s of every start
    (measured 23.9 → 14.1 s to build the engine, 0.6 GB less, decode 10.1 → 10.9 tok/s on 2 AVX2 cores).
    Elsewhere the engine core keeps its own process, as vLLM's offline engine does. Turns come in and go out
    through queues: requests and aborts as commands between steps, outputs onto each turn's asyncio queue.
    """

    reads_words = True  # Delta.words_logprob, from the prompt's log-probabilities

    def __init__(self, config: Config, omni: bool = False):
        self.config = config
        self.omni = omni
        self.cpu = read_cpu()
        self.kwargs = engine_kwargs(config, omni, self.cpu)
        self.commands: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        # Set once when the engine thread ends with an error; under `guard` with every put of a new turn, so a
        # turn is either drained and failed by the thread, or refused here: none waits on a dead engine.
        self.failure: BaseException | None = None
        self.guard = threading.Lock()
        self.turns: dict[str, _Add] = {}  # in flight: owned by the engine thread
        self.progress_at = time.monotonic()  # the engine thread's last pass through its loop
        self.tokenizer: Any = None  # the engine's, once built (TextAssembler)
        self.token_texts: list[str] = []  # each token id's text, once built (SamplingSettings.banned)
        self.biases: dict[tuple[str, ...], dict[int, float]] = {}  # the logit bias that bans each `banned`
        self.in_engine = 0  # requests vLLM holds (a slot each), as of the engine thread's last pass: aborts free them
        self.failed: asyncio.Future | None = None  # its result is the error, once the engine thread has failed
        self.description = f"vLLM in process ({config.llm_model_path().name}"
        if config.bundled_llm():
            self.description += f" because {config.chosen_llm()[1]}"
        self.description += f"; {weights_description(config.llm_model_path(), self.kwargs['dtype'], self.cpu)}"
        in_process = config.llm.device == "cpu" and config.llm.tensor_parallel_size == 1
        self.cores = in_process_cores(config, self.cpu) if in_process else None
        if config.llm.device == "cpu":
            if self.cores is not None:
                threads = ",".join(map(str, self.cores))
            elif in_process:
                threads = "all (torch's thread count, unbound)"
            else:
                threads = os.environ.get("VLLM_CPU_OMP_THREADS_BIND") or "vLLM's default"
            self.description += f"; cores {threads}; CPU {self.cpu.summary()}"
        self.description += ")"
        if config.llm.load_format == "dummy":
            self.description += " with RANDOM weights (load_format dummy): replies are noise"

    async def start(self, report: Any) -> None:
        report(WorkerState.LOADING, f"starting vLLM engine on {self.config.llm_model_path()} "
                                    "(about half a minute on CPU)")
        loop = asyncio.get_running_loop()
        built: asyncio.Future = loop.create_future()
        self.failed = loop.create_future()
        self.thread = threading.Thread(target=self._run, args=(loop, built), name="vllm-engine", daemon=True)
        self.thread.start()
        await built

    def _run(self, loop: asyncio.AbstractEventLoop, built: asyncio.Future) -> None:
        name_os_thread("vllm-engine")  # and its OpenMP threads
        if self.config.llm.device == "cpu" and self.config.llm.cpu_nice > 0:
            # This thread and vLLM's OpenMP threads (they inherit it) yield the CPU to the rest of the server: on a
            # CPU the voice, ASR and the front are on a turn's critical path and need the cores in short bursts;
            # the engine uses what they leave, llm.cpu_nice above the server's own niceness.
            set_nice(min(19, os.getpriority(os.PRIO_PROCESS, 0) + self.config.llm.cpu_nice))
        try:
            if self.cores is not None:
                bind_engine_thread(self.cores)
            apply_isa_cap()
            from vllm import EngineArgs
            from vllm.v1.engine.llm_engine import LLMEngine

            engine = LLMEngine.from_engine_args(EngineArgs(**self.kwargs))
            self.tokenizer = engine.get_tokenizer()
            self.token_texts = token_texts(self.tokenizer)
        except BaseException as exc:  # noqa: BLE001 - handed to start(), which raises it in the worker's loop
            loop.call_soon_threadsafe(_settle, built, exc)
            return
        loop.call_soon_threadsafe(_settle, built, None)
        try:
            self._step_until_stopped(engine)
        except BaseException as exc:  # noqa: BLE001 - any end but _STOP is the engine's failure
            self._fail(exc, loop)
        finally:
            with contextlib.suppress(Exception):
                engine.engine_core.shutdown()

    def _fail(self, error: BaseException, loop: asyncio.AbstractEventLoop) -> None:
        """Every turn in flight or queued gets the error; the worker learns through ``failed`` and exits."""
        with self.guard:
            self.failure = error
            waiting = list(self.turns.values())
            self.turns.clear()
            while True:
                try:
                    command = self.commands.get_nowait()
                except queue.Empty:
                    break
                if isinstance(command, _Add):
                    waiting.append(command)
        failed = EngineFailed(f"the vLLM engine stopped: {error.__class__.__name__}: {error}")
        for turn in waiting:
            turn.deliver(failed)
        loop.call_soon_threadsafe(self.failed.set_result, failed)

    def _step_until_stopped(self, engine: Any) -> None:
        turns = self.turns
        waiting = False  # the last step had nothing to run (a request waits for its grammar, built aside)
        while True:
            # Between steps take every waiting command; with nothing to generate, wait for one (waking now and
            # then, so that progress_at shows an idle engine is alive).
            block = not engine.has_unfinished_requests()
            while True:
                self.progress_at = time.monotonic()
                try:
                    if block:
                        command = self.commands.get(timeout=IDLE_WAKE_S)
                    elif waiting:  # not a spin against the grammar's thread for the cores
                        command = self.commands.get(timeout=GRAMMAR_WAIT_S)
                    else:
                        command = self.commands.get_nowait()
                except queue.Empty:
                    break
                block = waiting = False
                if command is _STOP:
                    return
                if isinstance(command, _Fault):
                    raise command.error
                if isinstance(command, _Abort):
                    if turns.pop(command.request_id, None) is not None:
                        engine.abort_request([command.request_id])
                    continue
                try:
                    engine.add_request(command.request_id, command.prompt, command.params)
                    turns[command.request_id] = command
                except Exception as exc:  # a prompt the engine refuses fails its turn only
                    command.deliver(exc)
            self.in_engine = engine.get_num_unfinished_requests()
            if not engine.has_unfinished_requests():
                continue
            stepped = time.monotonic()
            outputs = engine.step()
            self.progress_at = time.monotonic()
            waiting = not outputs and self.progress_at - stepped < EMPTY_STEP_S
            for output in outputs:
                turn = turns.get(output.request_id)
                if turn is None:
                    continue  # aborted while this step ran
                if output.finished:
                    del turns[output.request_id]
                turn.deliver(output)

    def healthy(self) -> bool:
        """Alive and stepping: no failure, and no step or wait has taken longer than STALL_S (a stuck engine
        stops the worker's heartbeats, and the supervisor restarts it)."""
        return (self.failure is None and self.thread is not None and self.thread.is_alive()
                and time.monotonic() - self.progress_at < STALL_S)

    async def wait_failed(self) -> BaseException:
        """Returns (never raises) the error once the engine thread has failed; waits forever otherwise."""
        assert self.failed is not None, "start() first"
        return await asyncio.shield(self.failed)

    def inject_fault(self, error: BaseException) -> None:
        """Tests only: the engine thread raises ``error`` between steps, as a failing step would."""
        self.commands.put(_Fault(error))

    def bias_against(self, banned: tuple[str, ...]) -> dict[int, float] | None:
        """The logit bias that keeps every token holding one of `banned` out of a reply (None: nothing to ban)."""
        if not banned or not self.token_texts:
            return None
        if banned not in self.biases:
            self.biases[banned] = {i: BANNED_BIAS for i, text in enumerate(self.token_texts)
                                   if any(b in text for b in banned)}
        return self.biases[banned] or None

    async def stream(self, prompt: EnginePrompt, sampling: SamplingSettings,
                     request_id: str) -> AsyncIterator[Delta]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        # The words are read as the reply's prompt is prefilled: no prefill of their own. vLLM skips its prefix
        # cache for a request with prompt log-probabilities unless told not to; the persona and history before the
        # words are cached, and only the positions computed now (the question's) are read. The slots of cached
        # positions are left unfilled, and vLLM's detokenizing of them can fail (a token id out of range): so the
        # request is not detokenized, and its text is assembled here (no stop strings then: chat prompts have none).
        reading = (sampling.judge_words and prompt.words_from_end is not None and not prompt.stop
                   and not prompt.has_media and self.tokenizer is not None)
        params = SamplingParams(temperature=sampling.temperature, max_tokens=sampling.max_tokens,
                                stop=list(prompt.stop), output_kind=RequestOutputKind.DELTA,
                                # (compact JSON: under a grammar that lets whitespace in anywhere, a small model
                                # may write it instead of the call, up to the token limit)
                                structured_outputs=(StructuredOutputsParams(json=sampling.json_schema,
                                                                            disable_any_whitespace=True)
                                                    if sampling.json_schema else None),
                                logit_bias=self.bias_against(sampling.banned),
                                **({"prompt_logprobs": 0, "skip_reading_prefix_cache": False, "detokenize": False}
                                   if reading else {}))
        assembler = TextAssembler(self.tokenizer) if reading else None
        outputs: asyncio.Queue = asyncio.Queue()
        with self.guard:
            if self.failure is not None:
                raise EngineFailed(f"the vLLM engine stopped: {self.failure!r}")
            self.commands.put(_Add(request_id, vllm_input(prompt), params, outputs, asyncio.get_running_loop()))
        finished, first = False, True
        try:
            while not finished:
                output = await outputs.get()
                if isinstance(output, BaseException):
                    raise output
                finished = output.finished
                completion = output.outputs[0]
                prompt_tokens = len(output.prompt_token_ids or ()) if first else None
                cached = getattr(output, "num_cached_tokens", None) if first else None
                read = (words_logprob(output.prompt_logprobs, output.prompt_token_ids, cached, prompt.words_from_end)
                        if first and reading else None)
                first = False
                if completion.finish_reason == "error":  # vLLM ended this request only (a grammar that failed)
                    raise EngineRequestFailed("the language model could not finish this reply")
                text = assembler.feed(completion.token_ids) if assembler is not None else completion.text
                yield Delta(text, len(completion.token_ids), prompt_tokens, cached, read)
        finally:
            if not finished:  # the consumer stopped early (cancelled, or enough said): free the engine's slot
                self.commands.put(_Abort(request_id))

    async def abort(self, request_id: str) -> None:
        self.commands.put(_Abort(request_id))

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        if self.thread is not None:
            self.commands.put(_STOP)
            self.thread.join(30)
            self.thread = None


def _settle(future: asyncio.Future, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
