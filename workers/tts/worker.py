"""TTS worker process: Piper speech for each piece, resampled to 24 kHz, chunked, routed by session and turn.

Cancels are read by a separate inbox thread the moment they arrive, so a turn being synthesized stops at
its next chunk rather than after the queue drains.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vita.config import Config
from vita.machine.models import available_voices
from vita.messages import (
    CancelTurn,
    EndSession,
    SessionError,
    Shutdown,
    TtsChunk,
    TtsPiece,
    TurnTimings,
    WorkerState,
    put_or_drop,
    read_messages,
)
from vita.ops.tracing import Tracing
from vita.words import STOCK_PHRASES
from workers.common import StatusReporter, install_fault_signal, prepare_process
from workers.stage import CancelLedger, run_stage
from workers.tts.phrase_cache import PhraseCache, StockPhrases
from workers.tts.piece_queue import PieceQueue
from workers.tts.text import normalize_for_speech

NAME = "tts"
HEARTBEAT_S = 1.0
LOCAL_BOUND = 64  # the synthesis loop says it is alive at least this often (the front kills a silent worker)


class PiperEngine:
    """One Piper voice: text in, int16 mono audio at its native rate out, a sentence at a time.

    Its onnxruntime threads sleep while they wait (onnxruntime's default is to spin): on two cores a spinning
    voice takes the core the LLM engine's threads need, and alone it is as fast either way (3 words in 44 vs
    47 ms, 2 threads, 2026-11-25).
    """

    def __init__(self, folder: Path, threads: int = 2):
        import json

        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig
        from piper.voice import ESPEAK_DATA_DIR

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(str(folder / "voice.onnx"), sess_options=options,
                                               providers=["CPUExecutionProvider"])
        config = PiperConfig.from_dict(json.loads((folder / "voice.onnx.json").read_text(encoding="utf-8")))
        self.voice = PiperVoice(config=config, session=session, espeak_data_dir=Path(ESPEAK_DATA_DIR),
                                download_dir=Path.cwd())
        self.sample_rate = int(self.voice.config.sample_rate)

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        for chunk in self.voice.synthesize(text):
            yield np.frombuffer(chunk.audio_int16_bytes, dtype=np.int16)


@dataclass
class TurnAudio:
    """Streaming state of one turn's audio: one resampler so joins between pieces are continuous."""

    resampler: Any
    seq: int = 0
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    first_piece_at: float | None = None
    first_chunk_s: float | None = None
    synth_s: float = 0.0
    audio_s: float = 0.0
    said_before: int = 0  # pieces played ready-made (the assistant's own phrases, or said before in the session)
    trace: str = ""  # the turn's traceparent: the voice's span joins its trace
    began: float = 0.0  # when its first piece came (monotonic)
    pieces: int = 0


class TtsWorker:
    def __init__(self, config: Config, inbox: Any, outbox: Any, report: StatusReporter):
        self.config = config
        self.inbox, self.outbox, self.report = inbox, outbox, report
        self.engines: dict[str, PiperEngine] = {}
        # Bounded: a synthesis loop that falls behind stops the reader, so the Manager queue fills and the LLM
        # worker's put times out (its drop policy) instead of pieces piling up here.
        self.pieces = PieceQueue(maxsize=LOCAL_BOUND)  # a reply's first piece before other replies' later ones
        self.cancelled = CancelLedger()
        self.turns: dict[tuple[str, int], TurnAudio] = {}
        self.stop = threading.Event()
        self.lose_next_end = False  # set by the test fault signal (install_fault_signal)
        self.phrases = PhraseCache()  # short phrases said before, as spoken (only the synthesis loop uses it)
        self.stock = StockPhrases()  # the assistant's own phrases, spoken in setup
        self.tracing = Tracing.for_process(NAME, config.tracing.endpoint, config.tracing.protocol,
                                           config.tracing.content)
        self.out_rate = config.tts.output_sample_rate
        self.chunk_samples = self.out_rate * config.tts.chunk_ms // 1000

    def setup(self) -> None:
        models = self.config.models_path()
        names = available_voices(models)
        default = self.config.tts.voice
        if default not in names:
            raise RuntimeError(f"voice {default!r} not found under {models / 'piper'} (have: {names})")
        for name in names:
            self.report(WorkerState.LOADING, f"loading Piper voice {name}")
            self.engines[name] = PiperEngine(models / "piper" / name, self.config.tts.cpu_threads)
        # Each voice's first synthesis pays onnxruntime's warm-up: the assistant's own phrases, spoken here before
        # saying ready, pay it.
        self.report(WorkerState.LOADING, "speaking the assistant's own phrases")
        for name, engine in self.engines.items():
            for phrase in STOCK_PHRASES:
                text = normalize_for_speech(phrase)
                self.stock.keep(name, text, tuple(engine.synthesize(text)))

    def close(self) -> None:
        self.stop.set()
        self.tracing.shutdown()

    def lose_an_end(self) -> None:
        """Test fault (SIGUSR1 with VITA_FAULT_SIGNALS=1): the next turn to finish never sends its last chunk."""
        self.lose_next_end = True

    # --- inbox -------------------------------------------------------------------------------------------
    def read_inbox(self) -> None:
        for message in read_messages(self.inbox, self.stop):
            if isinstance(message, CancelTurn):
                self.cancelled.cancel(message.session_id, message.turn_id)
                self.pieces.put(message)  # in order behind its turn's pieces: then its state is dropped
            elif isinstance(message, EndSession):
                self.cancelled.cancel(message.session_id)
                self.pieces.put(message)
            else:
                self.pieces.put(message)

    # --- synthesis loop ----------------------------------------------------------------------------------
    def serve(self) -> None:
        reader = threading.Thread(target=self.read_inbox, name="tts-inbox", daemon=True)
        reader.start()
        self.report(WorkerState.READY, f"voices: {', '.join(self.engines)}")
        beat_at = 0.0
        while True:
            if time.monotonic() - beat_at >= HEARTBEAT_S:
                self.report.heartbeat()
                beat_at = time.monotonic()
            try:
                message = self.pieces.get(timeout=HEARTBEAT_S)
            except queue.Empty:
                continue
            if isinstance(message, Shutdown):
                break
            if isinstance(message, EndSession):
                self._drop_session(message.session_id)
            elif isinstance(message, CancelTurn):
                self._drop_cancelled(message.session_id, message.turn_id)
            elif isinstance(message, TtsPiece):
                try:
                    self.speak(message)
                except Exception as exc:  # a piece that cannot be spoken must not stop other sessions
                    self.report.log.exception("piece %s:%s failed", message.session_id, message.turn_id)
                    put_or_drop(self.outbox, SessionError(message.session_id, message.turn_id, "tts_failed",
                                                          f"Could not speak the reply: {exc}"), self.report.log)
                    self.turns.pop((message.session_id, message.turn_id), None)
        self.stop.set()

    def _drop_cancelled(self, session_id: str, turn_id: int) -> None:
        """A turn cancelled between its pieces sends no last piece: its resampler (~0.4 MB) goes now."""
        for key in [k for k in self.turns if k[0] == session_id and k[1] <= turn_id]:
            self._traced(self.turns.pop(key), interrupted=True)

    def _drop_session(self, session_id: str) -> None:
        for key in [k for k in self.turns if k[0] == session_id]:
            self._traced(self.turns.pop(key), interrupted=True)
        self.phrases.forget(session_id)

    def speak(self, piece: TtsPiece) -> None:
        key = (piece.session_id, piece.turn_id)
        if self.cancelled.is_cancelled(*key):
            self._end_cancelled(key)
            return
        turn = self.turns.get(key)
        if turn is None:
            import soxr

            engine = self._engine(piece.voice)
            resampler = soxr.ResampleStream(engine.sample_rate, self.out_rate, 1, dtype="int16", quality="HQ")
            turn = self.turns[key] = TurnAudio(resampler, trace=piece.trace, began=time.monotonic())
        turn.pieces += 1
        if turn.first_piece_at is None and piece.text:
            turn.first_piece_at = time.monotonic()
        text = normalize_for_speech(piece.text)
        if text:
            engine = self._engine(piece.voice)
            started = time.monotonic()
            for audio in self._voiced(piece.session_id, piece.voice, engine, text, turn):
                turn.synth_s += time.monotonic() - started
                turn.audio_s += audio.size / engine.sample_rate
                if not self._send_whole_chunks(key, turn, turn.resampler.resample_chunk(audio)):
                    self._end_cancelled(key)
                    return
                started = time.monotonic()
        if piece.last:
            tail = turn.resampler.resample_chunk(np.zeros(0, dtype=np.int16), last=True)
            if not self._send_whole_chunks(key, turn, tail, final=True):
                self._end_cancelled(key)
                return
            del self.turns[key]
            self._traced(turn, interrupted=False, voice=self._voice_name(piece.voice))
            timings = {"synth_s": turn.synth_s, "audio_s": turn.audio_s,
                       "rtf": turn.synth_s / turn.audio_s if turn.audio_s else 0.0, "said_before": turn.said_before}
            if turn.first_chunk_s is not None:
                timings["first_chunk_s"] = turn.first_chunk_s
            # Timings go before the last chunk: the front forgets the turn when the last chunk arrives.
            put_or_drop(self.outbox, TurnTimings(*key, NAME, {k: round(v, 4) for k, v in timings.items()}),
                        self.report.log)
            if self.lose_next_end:  # test fault: the front never hears this turn end (its watchdog must)
                self.lose_next_end = False
                self.report.log.warning("test fault: the end of turn %s:%s is not sent", *key)
                return
            self._put_chunk(key, turn, b"", last=True)  # the turn's end: nothing more comes for it

    def _voiced(self, session: str, voice: str | None, engine: PiperEngine, text: str, turn: TurnAudio
                ) -> Iterator[np.ndarray]:
        """The text's audio, sentence by sentence: ready-made for the assistant's own phrases, from the phrase
        cache when this session heard it in this voice before, else synthesized (and kept once whole)."""
        name = self._voice_name(voice)
        kept = self.stock.get(name, text) or self.phrases.get(session, name, text)
        if kept is not None:
            turn.said_before += 1
            yield from kept
            return
        spoken = []
        for audio in engine.synthesize(text):
            spoken.append(audio)
            yield audio
        self.phrases.put(session, name, text, tuple(spoken))

    def _voice_name(self, voice: str | None) -> str:
        """The voice a piece is spoken in: its own if this worker has it, else the configured one."""
        return voice if voice in self.engines else self.config.tts.voice

    def _engine(self, voice: str | None) -> PiperEngine:
        return self.engines[self._voice_name(voice)]

    def _send_whole_chunks(self, key: tuple[str, int], turn: TurnAudio, audio: np.ndarray, final: bool = False) -> bool:
        """Send whole chunks (and the remainder if final); False if the turn was cancelled meanwhile."""
        turn.pending = np.concatenate([turn.pending, audio]) if turn.pending.size else audio
        while turn.pending.size >= self.chunk_samples or (final and turn.pending.size):
            if self.cancelled.is_cancelled(*key):
                return False
            chunk, turn.pending = turn.pending[: self.chunk_samples], turn.pending[self.chunk_samples:]
            self._put_chunk(key, turn, chunk.tobytes(), last=False)
        return True

    def _put_chunk(self, key: tuple[str, int], turn: TurnAudio, pcm: bytes, last: bool) -> None:
        if turn.first_chunk_s is None and pcm and turn.first_piece_at is not None:
            turn.first_chunk_s = time.monotonic() - turn.first_piece_at
        put_or_drop(self.outbox, TtsChunk(key[0], key[1], turn.seq, pcm, self.out_rate, last=last), self.report.log)
        turn.seq += 1

    def _end_cancelled(self, key: tuple[str, int]) -> None:
        turn = self.turns.pop(key, None)  # the front dropped the turn when it cancelled it: nothing to tell it
        if turn is not None:
            self._traced(turn, interrupted=True)

    def _traced(self, turn: TurnAudio, interrupted: bool, voice: str | None = None) -> None:
        """The turn's voice as a span of its trace: from its first piece to its last chunk (or its cancel)."""
        self.tracing.record("tts", turn.trace, turn.began, attributes={
            "vita.tts.voice": voice, "vita.tts.pieces": turn.pieces, "vita.tts.audio_s": round(turn.audio_s, 4),
            "vita.tts.synth_s": round(turn.synth_s, 4), "vita.tts.said_before": turn.said_before,
            "vita.tts.first_chunk_s": round(turn.first_chunk_s, 4) if turn.first_chunk_s is not None else None,
            "vita.interrupted": interrupted})


def run_tts_worker(config: Config, inbox: Any, queues: dict[str, Any]) -> None:
    """Process entry point (spawned by the process graph)."""
    log = prepare_process(NAME, {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}, config.server)
    report = StatusReporter(NAME, queues["status"], log)
    worker = TtsWorker(config, inbox, queues["outputs"], report)
    install_fault_signal(worker.lose_an_end, log)
    report(WorkerState.LOADING, "loading voices")
    run_stage(report, worker)
