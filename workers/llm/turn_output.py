"""Where a turn's results go: its pieces to the voice (the TTS queue), everything else to the front (the
publisher). Every part of the LLM worker that speaks or reports goes through this one place."""

from __future__ import annotations

import asyncio
import queue
import time
from typing import TYPE_CHECKING, Any

from vita.messages import ReplyText, TtsPiece, TurnEnded, TurnRequest, TurnTimings
from workers.llm.speech_pieces import ReplyShaper
from workers.llm.turn_run import NAME, TTS_PUT_TIMEOUT_S, TtsBusy, TurnRun

if TYPE_CHECKING:
    from workers.common import Publisher


class TurnOutput:
    def __init__(self, tts: Any, publisher: Publisher, max_reply_words: int):
        self.tts = tts
        self.publisher = publisher
        self.max_reply_words = max_reply_words
        self.put_timeout_s = TTS_PUT_TIMEOUT_S

    def publish(self, message: Any) -> None:
        self.publisher.publish(message)  # never blocks the event loop

    async def to_tts(self, piece: TtsPiece) -> None:
        """Drop policy: a TTS queue still full after put_timeout_s means the voice is stuck; this turn fails
        (the session gets ``tts_busy``). The put waits in a thread: the event loop, and every other session's
        turn on it, never waits on the queue."""
        try:
            await asyncio.to_thread(self.tts.put, piece, True, self.put_timeout_s)
        except queue.Full:
            raise TtsBusy("the voice is not keeping up; the reply was dropped") from None

    async def send_piece(self, req: TurnRequest, spoken: list[str], piece: str, timings: dict[str, float],
                         gen_started: float) -> None:
        if not spoken:
            timings["first_piece_s"] = time.monotonic() - gen_started
        message = TtsPiece(req.session_id, req.turn_id, len(spoken), piece, voice=req.voice, trace=req.trace)
        # Recorded before the put: a cancel that lands while the put's thread runs does not stop the put, so the
        # piece reaches the voice and belongs in the history of what was said.
        spoken.append(piece)
        if not req.output_audio:  # a text-only client: the voice gets only the turn's (silent) last piece
            return
        try:
            await self.to_tts(message)
        except TtsBusy:
            spoken.pop()  # it was never handed over
            raise

    async def end_voice(self, req: TurnRequest, spoken: list[str]) -> None:
        """The reply's end, to the voice: its last (empty) piece, after the ``spoken`` ones."""
        await self.to_tts(TtsPiece(req.session_id, req.turn_id, len(spoken), "", last=True, voice=req.voice,
                                   trace=req.trace))

    def say_as_is(self, sid: str, tid: int, answers: list[str]) -> list[str]:
        """Answers said as they are, shown as the reply's text: the pieces to speak."""
        # Said within the reply's word limit and in speakable pieces, as a generated reply is: an operator's tool
        # may answer at length.
        shaper = ReplyShaper(self.max_reply_words)
        pieces = [piece for answer in answers for piece in shaper.feed(answer + " ")]
        pieces += shaper.finish(cut_by_token_limit=False)
        for piece in pieces:
            self.publish(ReplyText(sid, tid, piece + " "))
        return pieces

    def publish_answered(self, sid: str, tid: int, run: TurnRun) -> None:
        """An answered turn's last messages: the reply as spoken, the timings, the end."""
        self.publish(ReplyText(sid, tid, "", done=True, text=run.said))
        self.publish(TurnTimings(sid, tid, NAME, {k: round(v, 4) for k, v in run.timings.items()}))
        self.publish(TurnEnded(sid, tid, NAME, spoken=run.said))
