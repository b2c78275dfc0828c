"""The TTS worker as a real process with the real Piper voice, fed through real Manager queues."""

from __future__ import annotations

import multiprocessing
import queue
import time

import numpy as np
import pytest

from vita.config import Config
from vita.messages import CancelTurn, Shutdown, TtsChunk, TtsPiece, TurnTimings, WorkerState, WorkerStatus
from vita.process_graph import QUEUES
from workers.llm.engines.asr import word_error_rate
from workers.tts.worker import run_tts_worker

SENTENCE = "The capital of France is Paris, and it is a beautiful city to visit in the spring."


class TtsHarness:
    def __init__(self):
        ctx = multiprocessing.get_context("spawn")
        self.manager = ctx.Manager()
        self.queues = {name: self.manager.Queue() for name in QUEUES}
        self.process = ctx.Process(target=run_tts_worker, args=(Config(), self.queues["tts"], self.queues),
                                   daemon=True)
        self.process.start()
        self.wait(lambda m: isinstance(m, WorkerStatus) and m.state is WorkerState.READY, 60, "status")

    def put(self, message) -> None:
        self.queues["tts"].put(message)

    def wait(self, predicate, timeout: float, queue_name: str = "outputs") -> list:
        """Collect outputs until one matches predicate; return everything collected."""
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = self.queues[queue_name].get(timeout=0.2)
            except queue.Empty:
                continue
            seen.append(message)
            if predicate(message):
                return seen
        raise TimeoutError(f"no matching output in {timeout} s; got {seen!r}")

    def close(self) -> None:
        self.put(Shutdown())
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
        self.manager.shutdown()


@pytest.fixture(scope="module")
def tts():
    harness = TtsHarness()
    yield harness
    harness.close()


def ended(session: str, turn: int):
    """A turn's last chunk: nothing more comes for it."""
    return lambda m: isinstance(m, TtsChunk) and m.last and (m.session_id, m.turn_id) == (session, turn)


def test_a_phrase_said_again_is_played_from_the_cache(tts):
    phrase = "Sorry, I can't work that out: division by zero."
    heard = []
    for turn in (7, 8):
        tts.put(TtsPiece("cache", turn, 0, phrase))
        tts.put(TtsPiece("cache", turn, 1, "", last=True))
        out = tts.wait(ended("cache", turn), 30)
        timings = next(m for m in out if isinstance(m, TurnTimings)).timings
        heard.append((b"".join(m.pcm for m in out if isinstance(m, TtsChunk)), timings["said_before"]))
    (first, cached_first), (again, cached_again) = heard
    assert cached_first == 0 and cached_again == 1
    assert again == first and len(first) > 24000  # the same speech, sample for sample
    tts.put(TtsPiece("other", 1, 0, phrase))  # another session: never from the first one's cache
    tts.put(TtsPiece("other", 1, 1, "", last=True))
    out = tts.wait(ended("other", 1), 30)
    assert next(m for m in out if isinstance(m, TurnTimings)).timings["said_before"] == 0


def test_the_assistants_own_phrases_are_ready_made_in_every_session(tts):
    from vita.words import ASK_AGAIN

    heard = []
    for session in ("first-ever", "another"):  # neither said it before: it was spoken as the worker set up
        tts.put(TtsPiece(session, 1, 0, ASK_AGAIN))
        tts.put(TtsPiece(session, 1, 1, "", last=True))
        out = tts.wait(ended(session, 1), 30)
        timings = next(m for m in out if isinstance(m, TurnTimings)).timings
        assert timings["said_before"] == 1
        heard.append(b"".join(m.pcm for m in out if isinstance(m, TtsChunk)))
    assert heard[0] == heard[1] and len(heard[0]) / 2 / 24000 > 1.5  # the whole phrase, the same for everyone


def test_sentence_becomes_24khz_chunks_that_transcribe_back(tts):
    tts.put(TtsPiece("a", 1, 0, SENTENCE))
    tts.put(TtsPiece("a", 1, 1, "", last=True))
    out = tts.wait(ended("a", 1), 30)
    chunks = [m for m in out if isinstance(m, TtsChunk)]
    assert chunks and chunks[-1].last and all(c.sample_rate == 24000 for c in chunks)
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    pcm = b"".join(c.pcm for c in chunks)
    duration = len(pcm) / 2 / 24000
    timings = next(m for m in out if isinstance(m, TurnTimings)).timings
    assert abs(duration - timings["audio_s"]) < 0.05  # resampling kept the length of the speech
    assert 2.0 < duration < 8.0
    import soxr
    from faster_whisper import WhisperModel

    audio16k = soxr.resample(np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768, 24000, 16000)
    model = WhisperModel(str(Config().models_path() / "whisper-base"), device="cpu", compute_type="int8")
    segments, _ = model.transcribe(audio16k, language="en", beam_size=1)
    text = " ".join(s.text for s in segments)
    assert word_error_rate(SENTENCE, text) <= 0.2, text


def test_interleaved_sessions_get_only_their_own_chunks_in_order(tts):
    for seq, (a, b) in enumerate([("One apple.", "Red car."), ("Two apples.", "Blue car.")]):
        tts.put(TtsPiece("s1", 1, seq, a))
        tts.put(TtsPiece("s2", 1, seq, b))
    tts.put(TtsPiece("s1", 1, 2, "", last=True))
    tts.put(TtsPiece("s2", 1, 2, "", last=True))
    out = tts.wait(ended("s2", 1), 30)
    for sid in ("s1", "s2"):
        mine = [m for m in out if isinstance(m, TtsChunk) and m.session_id == sid]
        assert [c.seq for c in mine] == list(range(len(mine)))
        assert mine[-1].last and sum(len(c.pcm) for c in mine) > 24000  # two short sentences > 0.5 s


def test_cancelled_turn_delivers_no_further_chunk(tts):
    long_text = " ".join(["This is a long sentence that keeps the voice busy for a while."] * 6)
    tts.put(TtsPiece("c", 1, 0, long_text))
    tts.put(TtsPiece("c", 1, 1, "And here is even more to say after that.", last=True))
    first = tts.wait(lambda m: isinstance(m, TtsChunk) and m.session_id == "c", 30)
    tts.put(CancelTurn("c", 1))
    # Pieces are spoken in order: once the next turn has ended, whatever turn 1 was going to send has been sent.
    tts.put(TtsPiece("c", 2, 0, "A new turn still speaks.", last=True))
    rest = tts.wait(ended("c", 2), 30)
    late = [m for m in rest if isinstance(m, TtsChunk) and m.turn_id == 1]
    # Chunks already queued before the cancel arrived may follow; synthesis must stop right after.
    total_audio = sum(len(m.pcm) for m in first + late if isinstance(m, TtsChunk)) / 2 / 24000
    assert total_audio < 12.0, total_audio  # the whole text would be ~25 s of speech
    assert not any(c.last for c in late)  # a cancelled turn never completes
    assert any(isinstance(m, TtsChunk) and m.turn_id == 2 and m.pcm for m in rest)


@pytest.mark.fast
def test_cancelled_turns_are_remembered_for_a_bounded_number_of_sessions():
    """One entry per session used to stay forever; the least recently cancelled now go first."""
    import logging

    from workers.common import StatusReporter
    from workers.stage import CANCELLED_KEPT
    from workers.tts.worker import TtsWorker

    worker = TtsWorker(Config(), queue.Queue(), queue.Queue(), StatusReporter("tts", queue.Queue(),
                                                                                 logging.getLogger("test.tts")))
    ledger = worker.cancelled
    ledger.cancel("active", 3)
    for i in range(CANCELLED_KEPT + 100):
        ledger.cancel(f"ended-{i}")
        if i % 1000 == 0:
            ledger.cancel("active", 3)  # a live session keeps its entry fresh
    assert len(ledger) == CANCELLED_KEPT
    assert ledger.is_cancelled("active", 3) and not ledger.is_cancelled("active", 4)
    assert ledger.is_cancelled("active", 2)  # a cancel covers the earlier turns
    assert not ledger.is_cancelled("ended-0", 1) and ledger.is_cancelled(f"ended-{CANCELLED_KEPT + 99}", 5)


@pytest.mark.fast
def test_a_turn_cancelled_between_its_pieces_leaves_no_state_behind():
    """Its last piece never comes: the cancel itself drops the turn's resampler (one client cancelling a turn a
    second used to leak ~0.4 MB/s), and only that session's turns up to the cancelled one."""
    import logging

    from workers.common import StatusReporter
    from workers.tts.worker import TtsWorker, TurnAudio

    worker = TtsWorker(Config(), queue.Queue(), queue.Queue(), StatusReporter("tts", queue.Queue(),
                                                                                 logging.getLogger("test.tts")))
    for key in [("a", 1), ("a", 2), ("a", 3), ("b", 2)]:
        worker.turns[key] = TurnAudio(resampler=None)
    worker._drop_cancelled("a", 2)
    assert sorted(worker.turns) == [("a", 3), ("b", 2)]
