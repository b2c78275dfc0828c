"""One Realtime client's conversation as the protocol sees it: the client events every door gets
(vita/client_events.py: the user's speech, the turn, its transcript, the reply's text and audio, its end or
cancel, errors) become Realtime server events, with the items and responses they belong to.

The turn machine stays the one authority on turns: a committed turn is a user item and a response; its end (or its
cancel: a barge-in, ``response.cancel``, a request the user went on with, a failure) is the response's
``response.done``. All of it runs on the session's own thread but for errors, which may come from the socket's
thread: one lock.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import soxr

from vita.client_events import (
    ClientEvent,
    ErrorNotice,
    FunctionCall,
    OutOfTime,
    ReplyAudio,
    ReplyDelta,
    ResponseText,
    StateChanged,
    StopSpeaking,
    Transcript,
    TurnCancelled,
    TurnStarted,
    VadChanged,
)
from vita.messages import Picture, ToolOutput
from vita.turns.turn_events import Speech
from vita.web.realtime.protocol import FORMATS, PCM_RATE, Settings, encode_g711, error_event, new_id

# turn_cancelled reasons that are the user's or the client's doing -> response.done's status_details.reason;
# any other cancel (stalled, a worker failed, the server stopping) is a failure of the server's.
# (an "echo" turn's words were the assistant's own reply heard back from a speaker: cancelled, and its user item
# withdrawn, as a turn the user extended is)
CANCEL_REASONS = {"barge-in": "turn_detected", "extended": "turn_detected", "new turn": "turn_detected",
                  "client_cancelled": "client_cancelled", "echo": "turn_detected"}
WITHDRAWN = ("extended", "echo")  # reasons whose user item goes
FAILED = ("error", "tts_busy", "server busy", "not ready")  # unanswered reasons that are failures
MAX_ITEMS = 512  # items remembered for retrieve/truncate/delete; older ones are forgotten (their turns too)
MAX_TURNS_REMEMBERED = 64  # turn -> user item, for late transcripts


def as_part(content: dict[str, Any]) -> dict[str, Any]:
    """An item's content (output_audio / output_text) as a response's content part (audio / text)."""
    return {**content, "type": content["type"].removeprefix("output_")}


@dataclass
class Item:
    """A conversation item as the client knows it (no audio is sent back: the transcript is what is retrievable);
    a client's own item keeps what it asks of the next response (`speech`, `tool_output`) until then."""

    id: str
    kind: str  # "message" or "function_call" / "function_call_output"
    role: str = ""
    turn_id: int | None = None
    content: list[dict[str, Any]] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    arguments: str = ""
    output: str = ""
    status: str = "completed"
    audio_ms: float = 0.0  # an assistant message's audio sent so far (for truncate)
    speech: Speech | None = field(default=None, repr=False)
    images: tuple[Picture, ...] = field(default=(), repr=False)  # input_image parts: camera pictures for the next turn
    tool_output: ToolOutput | None = None

    @property
    def text(self) -> str:
        return " ".join(p["text"].strip() for p in self.content if p.get("type") == "input_text")

    def as_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {"id": self.id, "type": self.kind, "object": "realtime.item", "status": self.status}
        if self.kind == "message":
            item.update(role=self.role, content=self.content)
        elif self.kind == "function_call":
            item.update(call_id=self.call_id, name=self.name, arguments=self.arguments)
        else:
            item.update(call_id=self.call_id, output=self.output)
        return item


@dataclass
class Response:
    id: str
    turn_id: int
    message: Item | None = None  # the assistant's message, once it says something
    outputs: list[Item] = field(default_factory=list)
    text: str = ""
    resampler: Any = None  # 24 kHz -> 8 kHz for G.711 output
    audio: bool = True  # its output modality: audio (with a transcript), or text only
    max_tokens: int | None = None  # the client's cap on its tokens (None: the server's)


class RealtimeConversation:
    """The Realtime door's serializer: ``tell(event)`` takes the client events for this session and says them as
    Realtime events and items; ``send(dict)`` writes to the client.
    ``settings()`` is the session's current settings, ``audio_ms()`` how much input audio it has received."""

    def __init__(self, send: Callable[[dict[str, Any]], None], settings: Callable[[], Settings],
                 audio_ms: Callable[[], int] = lambda: 0, max_tokens: int | str = "inf"):
        self._write = send
        self.settings, self.audio_ms, self.max_tokens = settings, audio_ms, max_tokens
        self.lock = threading.RLock()
        self.items: list[Item] = []
        self.response: Response | None = None
        self.speech_item: str | None = None  # the user item the VAD's current speech will become
        self.committed: dict[int, str] = {}  # turn -> its user item
        self.calls: dict[str, Item] = {}  # call_id -> the function call the client owes a result for
        self.claimed: list[Item] = []  # the client's items its response.create asked about, for the turn it starts
        self.claimed_audio: bool | None = None  # and its response's output modality, when it chose one
        self.claimed_max_tokens: int | None = None  # and its cap on the response's tokens
        self.webrtc = False  # a call: the audio is on the track, and output_audio_buffer.* say when it is heard
        self.playing: str | None = None  # a call's response being played on the track

    # --- writing ---------------------------------------------------------------------------------------------
    def send(self, event: dict[str, Any]) -> None:
        event.setdefault("event_id", new_id("event"))
        with self.lock:
            self._write(event)

    def error(self, code: str, message: str, param: str | None = None, event_id: str | None = None,
              kind: str = "invalid_request_error") -> None:
        self.send(error_event(code, message, param, event_id, kind))

    def added(self, item: Item) -> None:
        """An item the conversation now holds (`conversation.item.added`); `done` follows when it is complete."""
        with self.lock:
            previous = self.items[-1].id if self.items else None
            self.items.append(item)
            del self.items[:-MAX_ITEMS]
            self.send({"type": "conversation.item.added", "previous_item_id": previous, "item": item.as_json()})

    def done(self, item: Item) -> None:
        with self.lock:
            at = self.items.index(item) if item in self.items else 0
            previous = self.items[at - 1].id if at > 0 else None
            self.send({"type": "conversation.item.done", "previous_item_id": previous, "item": item.as_json()})

    def add_item(self, item: Item) -> None:
        """A complete item (the client's own, or a committed turn's user item): added and done at once."""
        with self.lock:
            self.added(item)
            self.done(item)

    def item(self, item_id: Any) -> Item | None:
        with self.lock:
            return next((i for i in self.items if i.id == item_id), None)

    def forget(self, item: Item) -> None:
        with self.lock:
            if item in self.items:
                self.items.remove(item)
            self.send({"type": "conversation.item.deleted", "item_id": item.id})

    def active(self) -> bool:
        with self.lock:
            return self.response is not None

    # --- the client events --------------------------------------------------------------------------------------------
    def tell(self, event: ClientEvent) -> None:
        """A client event, said in the Realtime protocol's words (the events it has none for are not sent)."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            with self.lock:
                handler(self, event)

    def _on_vad(self, p: VadChanged) -> None:
        if self.settings().turn_detection is None:
            return
        if p.speaking:
            self.speech_item = new_id("item")
            self.send({"type": "input_audio_buffer.speech_started", "audio_start_ms": self.audio_ms(),
                       "item_id": self.speech_item})
        elif self.speech_item is not None:
            self.send({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": self.audio_ms(),
                       "item_id": self.speech_item})
            if p.dropped:  # a cough: nothing was committed
                self.speech_item = None

    def _on_turn(self, p: TurnStarted) -> None:
        turn_id = p.turn_id
        claimed, self.claimed = self.claimed, []
        audio, self.claimed_audio = self.claimed_audio, None
        limit, self.claimed_max_tokens = self.claimed_max_tokens, None
        spoken = [i for i in claimed if i.content and i.content[0].get("type") == "input_audio"]
        if spoken:  # the client's own audio (a push-to-talk commit, an input_audio item): its item hears it
            self._remember(turn_id, spoken[-1].id)
        elif p.source == "speech":  # what our VAD heard: its item is made now
            item_id, self.speech_item = self.speech_item or new_id("item"), None
            previous = self.items[-1].id if self.items else None
            self.send({"type": "input_audio_buffer.committed", "previous_item_id": previous, "item_id": item_id})
            content = [{"type": "input_audio", "transcript": None}]
            if p.text:
                content.append({"type": "input_text", "text": p.text})
            self.add_item(Item(item_id, "message", "user", turn_id, content))
            self._remember(turn_id, item_id)
        for item in claimed:  # the client's items this turn answers belong to it (for delete)
            item.turn_id = turn_id
        if self.response is not None:  # never left open: a turn that supersedes another ends it first
            self._finish("cancelled", {"type": "cancelled", "reason": "turn_detected"})
        settings = self.settings()
        self.response = Response(new_id("resp"), turn_id, audio=settings.audio_out if audio is None else audio,
                                 max_tokens=settings.max_output_tokens if limit is None else limit)
        self.send({"type": "response.created", "response": self._response_json("in_progress")})

    def _remember(self, turn_id: int, item_id: str) -> None:
        self.committed[turn_id] = item_id
        for old in list(self.committed)[:-MAX_TURNS_REMEMBERED]:
            del self.committed[old]

    def _on_transcript(self, p: Transcript) -> None:
        item = self.item(self.committed.get(p.turn_id))
        if item is None:
            return
        item.content[0]["transcript"] = p.text
        common = {"item_id": item.id, "content_index": 0}
        self.send({"type": "conversation.item.input_audio_transcription.delta", **common, "delta": p.text})
        self.send({"type": "conversation.item.input_audio_transcription.completed", **common,
                   "transcript": p.text, "usage": {"type": "duration", "seconds": 0}})

    def _message(self) -> tuple[Response, Item] | None:
        """The current response's message, added (with its content part) on its first output."""
        response = self.response
        if response is None:
            return None
        if response.message is None:
            part = {"type": "output_audio", "transcript": ""} if response.audio else {"type": "output_text", "text": ""}
            message = Item(new_id("item"), "message", "assistant", response.turn_id, [part], status="in_progress")
            response.message = message
            response.outputs.append(message)
            self.send({"type": "response.output_item.added", "response_id": response.id,
                       "output_index": len(response.outputs) - 1, "item": message.as_json()})
            self.added(message)  # retrievable and truncatable while it plays
            self.send({"type": "response.content_part.added", **self._where(response, message), "part": as_part(part)})
        return response, response.message

    @staticmethod
    def _where(response: Response, item: Item) -> dict[str, Any]:
        return {"response_id": response.id, "item_id": item.id, "output_index": response.outputs.index(item),
                "content_index": 0}

    def _audio_delta(self, response: Response, message: Item, samples: np.ndarray, last: bool = False) -> None:
        kind = self.settings().output_format
        if kind != "audio/pcm":
            if response.resampler is None:
                response.resampler = soxr.ResampleStream(PCM_RATE, FORMATS[kind], 1, dtype="int16")
            data = encode_g711(response.resampler.resample_chunk(samples, last=last), kind)
        else:
            data = samples.astype("<i2").tobytes()
        message.audio_ms += 1000 * len(samples) / PCM_RATE
        if data:
            self.send({"type": "response.output_audio.delta", **self._where(response, message),
                       "delta": base64.b64encode(data).decode("ascii")})

    def _on_audio(self, p: ReplyAudio) -> None:
        opened = self._message() if self.response is not None and self.response.audio else None
        if opened is not None:
            self._audio_delta(*opened, np.frombuffer(p.pcm, dtype=np.int16))

    def _on_reply_delta(self, p: ReplyDelta) -> None:
        if self.response is None or p.turn_id != self.response.turn_id:
            return
        response, message = self._message()
        response.text += p.text
        kind = "response.output_audio_transcript.delta" if response.audio else "response.output_text.delta"
        self.send({"type": kind, **self._where(response, message), "delta": p.text})

    def _on_response_text(self, p: ResponseText) -> None:
        if self.response is not None and p.turn_id == self.response.turn_id:
            self.response.text = p.text  # the reply as spoken: the final word on its text

    def _on_function_call(self, p: FunctionCall) -> None:
        response = self.response
        if response is None or p.turn_id != response.turn_id:
            return
        call = Item(new_id("item"), "function_call", turn_id=response.turn_id, call_id=p.call_id, name=p.name,
                    arguments=p.arguments, status="in_progress")
        response.outputs.append(call)
        where = {"response_id": response.id, "item_id": call.id, "output_index": len(response.outputs) - 1}
        self.send({"type": "response.output_item.added", "response_id": response.id,
                   "output_index": where["output_index"], "item": {**call.as_json(), "arguments": ""}})
        self.added(call)
        self.send({"type": "response.function_call_arguments.delta", **where, "call_id": call.call_id,
                   "delta": call.arguments})
        self.send({"type": "response.function_call_arguments.done", **where, "call_id": call.call_id,
                   "name": call.name, "arguments": call.arguments})
        call.status = "completed"
        self.send({"type": "response.output_item.done", "response_id": response.id,
                   "output_index": where["output_index"], "item": call.as_json()})
        self.done(call)
        self.calls[call.call_id] = call
        for old in list(self.calls)[:-MAX_TURNS_REMEMBERED]:  # calls never answered are forgotten in the end
            del self.calls[old]

    def _on_turn_cancelled(self, p: TurnCancelled) -> None:
        if self.response is None or p.turn_id != self.response.turn_id:
            return
        reason = p.reason
        withdrawn = self.item(self.committed.pop(p.turn_id, None)) if reason in WITHDRAWN else None
        if withdrawn is not None:  # the user went on (the joined request is a new item and response), or it was
            # the assistant's own words
            self.forget(withdrawn)
        if reason in CANCEL_REASONS:
            self._finish("cancelled", {"type": "cancelled", "reason": CANCEL_REASONS[reason]})
        else:
            self._failed(str(reason))

    def _on_state(self, p: StateChanged) -> None:
        if self.webrtc:
            self._audio_buffer(p)
        if p.state != "listening" or self.response is None or p.turn_id != self.response.turn_id:
            return
        reason = p.reason
        if reason is None or reason == "tool_call":
            self._finish("completed", None)
        elif reason in FAILED:
            self._failed(reason)
        else:  # nothing to say (no speech recognised, a stop command)
            self._finish("incomplete", {"type": "incomplete", "reason": reason.replace(" ", "_")})

    def _audio_buffer(self, p: StateChanged) -> None:
        """A call's output audio buffer: started as the reply's first audio goes onto the track, stopped when the
        turn is over (its audio played out)."""
        if p.state == "speaking" and self.response is not None and p.turn_id == self.response.turn_id:
            self.playing = self.response.id
            self.send({"type": "output_audio_buffer.started", "response_id": self.playing})
        elif p.state == "listening" and self.playing is not None:
            self.send({"type": "output_audio_buffer.stopped", "response_id": self.playing})
            self.playing = None

    def _on_stop_tts(self, _p: StopSpeaking) -> None:
        """Barge-in (or a cancel) emptied the track: a call's client hears nothing more of the reply."""
        if self.webrtc and self.playing is not None:
            self.send({"type": "output_audio_buffer.cleared", "response_id": self.playing})
            self.playing = None

    def _failed(self, reason: str) -> None:
        self._finish("failed", {"type": "failed", "error": {"type": "server_error", "code": reason.replace(" ", "_")}})

    def _on_error(self, p: ErrorNotice) -> None:
        code = p.code
        server_side = code in ("llm_failed", "tts_busy", "worker_failed", "server_busy", "server_stopping",
                               "turn_stalled", "not_ready")
        self.error(code, p.message, kind="server_error" if server_side else "invalid_request_error")

    def _on_out_time(self, _p: OutOfTime) -> None:
        self.error("idle_timeout", "The session was idle for too long and is being closed.")

    _handlers: ClassVar[dict[type, Callable[[Any, Any], None]]] = {
        VadChanged: _on_vad, TurnStarted: _on_turn, Transcript: _on_transcript, ReplyAudio: _on_audio,
        ReplyDelta: _on_reply_delta, ResponseText: _on_response_text, FunctionCall: _on_function_call,
        TurnCancelled: _on_turn_cancelled, StateChanged: _on_state, StopSpeaking: _on_stop_tts,
        ErrorNotice: _on_error, OutOfTime: _on_out_time}

    # --- the end of a response -----------------------------------------------------------------------------------
    def _finish(self, status: str, details: dict[str, Any] | None) -> None:
        response = self.response
        message = response.message
        if message is not None:
            where = self._where(response, message)
            part = message.content[0]
            if part["type"] == "output_audio":
                if response.resampler is not None:  # what the G.711 resampler still holds
                    self._audio_delta(response, message, np.zeros(0, np.int16), last=True)
                part["transcript"] = response.text
                self.send({"type": "response.output_audio.done", **where})
                self.send({"type": "response.output_audio_transcript.done", **where, "transcript": response.text})
            else:
                part["text"] = response.text
                self.send({"type": "response.output_text.done", **where, "text": response.text})
            self.send({"type": "response.content_part.done", **where, "part": as_part(part)})
            message.status = "completed" if status == "completed" else "incomplete"
            self.send({"type": "response.output_item.done", "response_id": response.id,
                       "output_index": where["output_index"], "item": message.as_json()})
            self.done(message)
        self.response = None
        self.send({"type": "response.done", "response": self._response_json(status, details, response)})

    def _cap(self, asked: int | None) -> int | str:
        """The tokens a response may have: the client's cap under the server's own."""
        if asked is None:
            return self.max_tokens
        return asked if not isinstance(self.max_tokens, int) else min(asked, self.max_tokens)

    def _response_json(self, status: str, details: dict | None = None, response: Response | None = None
                       ) -> dict[str, Any]:
        response = response or self.response
        settings = self.settings()
        return {"id": response.id, "object": "realtime.response", "status": status, "status_details": details,
                "output": [i.as_json() for i in response.outputs], "conversation_id": None,
                "output_modalities": ["audio"] if response.audio else ["text"],
                "max_output_tokens": self._cap(response.max_tokens),
                "audio": {"output": {"format": {"type": settings.output_format}, "voice": settings.voice}},
                "usage": None, "metadata": None}
