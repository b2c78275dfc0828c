"""The phone door's wire: what Twilio, Telnyx and Plivo send over a bidirectional media stream, read into one
small vocabulary, and what the door sends back in each provider's words (audio, clear, mark), with the XML that
connects a call to the stream, the XML that turns a call away, and the REST request that ends a call.

The three speak the same protocol in three dialects: Twilio's Media Streams (``streamSid``, ``customParameters``,
``mark``), Telnyx's (``stream_id``, ``call_control_id``, ``PCMU``/``PCMA``) and Plivo's audio streams
(``streamId``, ``playAudio``, ``clearAudio``, ``checkpoint`` answered by ``playedStream``). A stream says which it
is in its ``start`` message; a ``connected`` before it names nobody.
"""

from __future__ import annotations

import base64
import binascii
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import quote
from xml.sax.saxutils import escape, quoteattr

from vita.web.codecs import Law

MAX_PAYLOAD_BYTES = 8000  # one second of 8 kHz G.711 in one media message (the providers send 20 ms)
MAX_PARAMETERS = 32
MAX_PARAMETER_CHARS = 512


class WireError(ValueError):
    """A message the door cannot read: the stream is told nothing (a phone hears no errors) and, past a few, closed."""


# --- what a stream says --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StreamConnected:
    """The provider opened the stream (it names no call yet)."""


@dataclass(frozen=True)
class CallStarted:
    """The call's stream begins: its ids, the G.711 law of the caller's audio and of the reply's, and the custom
    parameters the stream carries."""

    stream_id: str
    call_id: str
    law: Law
    reply_law: Law
    parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CallAudio:
    """The caller's audio: G.711 bytes at 8 kHz."""

    payload: bytes


@dataclass(frozen=True)
class KeyPressed:
    """A DTMF digit the caller pressed."""

    digit: str


@dataclass(frozen=True)
class MarkPlayed:
    """The phone has played everything sent before the mark of this name."""

    name: str


@dataclass(frozen=True)
class CallStopped:
    """The call is over (the caller hung up, or the call was ended)."""


StreamEvent = StreamConnected | CallStarted | CallAudio | KeyPressed | MarkPlayed | CallStopped
DIGITS = frozenset("0123456789*#ABCD")


@dataclass(frozen=True)
class HangUp:
    """The provider's REST request that ends a call."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None = None


def parse(data: str | bytes) -> dict[str, Any]:
    """A stream message as a JSON object with a string ``event`` (WireError otherwise)."""
    try:
        message = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise WireError("a stream message must be JSON") from None
    if not isinstance(message, dict) or not isinstance(message.get("event"), str):
        raise WireError("a stream message is a JSON object with a string event")
    return message


def _text(value: Any, what: str, most: int = 128) -> str:
    if not isinstance(value, str) or not value or len(value) > most:
        raise WireError(f"{what} must be a string of 1 to {most} characters")
    return value


def _parameters(value: Any) -> dict[str, str]:
    """A start message's custom parameters (a few short strings; anything else is left out)."""
    if not isinstance(value, dict):
        return {}
    kept = {}
    for key, item in list(value.items())[:MAX_PARAMETERS]:
        if isinstance(key, str) and isinstance(item, str | int) and len(key) <= 64:
            kept[key] = str(item)[:MAX_PARAMETER_CHARS]
    return kept


def _payload(media: Any) -> bytes:
    payload = media.get("payload") if isinstance(media, dict) else None
    if not isinstance(payload, str) or len(payload) > MAX_PAYLOAD_BYTES * 4 // 3 + 4:
        raise WireError(f"media needs a base64 payload of at most {MAX_PAYLOAD_BYTES} bytes")
    try:
        audio = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise WireError("media payload is not valid base64") from None
    if len(audio) > MAX_PAYLOAD_BYTES:
        raise WireError(f"media needs a base64 payload of at most {MAX_PAYLOAD_BYTES} bytes")
    return audio


def _digit(dtmf: Any) -> KeyPressed:
    digit = dtmf.get("digit") if isinstance(dtmf, dict) else None
    if not isinstance(digit, str) or digit.upper() not in DIGITS:
        raise WireError("dtmf needs a digit (0-9, *, #, A-D)")
    return KeyPressed(digit.upper())


# --- the providers -------------------------------------------------------------------------------------------------
class Provider(ABC):
    """One provider's dialect. `stream_id` is set once the stream's start has been read."""

    name: ClassVar[str]
    mark_event: ClassVar[str] = "mark"

    def __init__(self, stream_id: str = ""):
        self.stream_id = stream_id

    @staticmethod
    def recognise(message: Mapping[str, Any]) -> Provider | None:
        """The provider whose start message this is (None: not a start any of them sends)."""
        start = message.get("start")
        if message.get("event") != "start" or not isinstance(start, dict):
            return None
        if "streamSid" in start and "callSid" in start:
            return Twilio()
        if "call_control_id" in start:
            return Telnyx()
        if "streamId" in start and "callId" in start:
            return Plivo()
        return None

    def read(self, message: Mapping[str, Any]) -> StreamEvent | None:
        """A message of a started stream in the common vocabulary (None: one the door has no use for)."""
        event = message["event"]
        if event == "media":
            media = message.get("media")
            if isinstance(media, dict) and media.get("track", "inbound") not in ("inbound", "inbound_track"):
                return None  # (a stream of both tracks: only the caller's is heard)
            return CallAudio(_payload(media))
        if event == "dtmf":
            return _digit(message.get("dtmf"))
        if event == self.mark_event:
            return MarkPlayed(self._mark_name(message))
        if event == "stop":
            return CallStopped()
        if event == "connected":
            return StreamConnected()
        if event == "start":
            raise WireError("the stream has started already")
        return None

    def _mark_name(self, message: Mapping[str, Any]) -> str:
        mark = message.get("mark")
        return _text(mark.get("name") if isinstance(mark, dict) else None, "mark.name")

    @abstractmethod
    def started(self, message: Mapping[str, Any]) -> CallStarted:
        """The call a start message names (WireError: one this door cannot take)."""

    # what the door sends
    @abstractmethod
    def media(self, payload: bytes) -> dict[str, Any]:
        """Reply audio, G.711 bytes at 8 kHz."""

    @abstractmethod
    def clear(self) -> dict[str, Any]:
        """Drop what the phone has not played yet (a barge-in)."""

    @abstractmethod
    def mark(self, name: str) -> dict[str, Any]:
        """Ask the phone to say when it has played everything sent before this."""

    # the webhook's answers
    @staticmethod
    @abstractmethod
    def answer(stream_url: str) -> str:
        """The XML that connects the call to `stream_url` (which carries the stream's token in its path)."""

    @staticmethod
    def refusal(text: str) -> str:
        return _xml(f"<Say>{escape(text)}</Say><Hangup/>")

    @staticmethod
    @abstractmethod
    def hang_up(call_id: str, credentials: Mapping[str, str]) -> HangUp | None:
        """The request that ends the call, or None without the account's credentials."""


def _xml(body: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?><Response>{body}</Response>'


def _basic(user: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode("ascii")


class Twilio(Provider):
    """Twilio Media Streams (``<Connect><Stream>``; its Stream URL takes no query string: the token is in its path)."""

    name = "twilio"

    def started(self, message: Mapping[str, Any]) -> CallStarted:
        start = message["start"]
        media_format = start.get("mediaFormat") if isinstance(start.get("mediaFormat"), dict) else {}
        encoding = media_format.get("encoding", "audio/x-mulaw")
        if encoding != "audio/x-mulaw":
            raise WireError(f"Twilio streams carry audio/x-mulaw, not {str(encoding)[:32]!r}")
        self.stream_id = _text(start.get("streamSid"), "start.streamSid")
        return CallStarted(self.stream_id, _text(start.get("callSid"), "start.callSid"), "ulaw", "ulaw",
                           _parameters(start.get("customParameters")))

    def media(self, payload: bytes) -> dict[str, Any]:
        return {"event": "media", "streamSid": self.stream_id,
                "media": {"payload": base64.b64encode(payload).decode("ascii")}}

    def clear(self) -> dict[str, Any]:
        return {"event": "clear", "streamSid": self.stream_id}

    def mark(self, name: str) -> dict[str, Any]:
        return {"event": "mark", "streamSid": self.stream_id, "mark": {"name": name}}

    @staticmethod
    def answer(stream_url: str) -> str:
        return _xml(f"<Connect><Stream url={quoteattr(stream_url)}/></Connect>")

    @staticmethod
    def hang_up(call_id: str, credentials: Mapping[str, str]) -> HangUp | None:
        sid, token = credentials.get("TWILIO_ACCOUNT_SID"), credentials.get("TWILIO_AUTH_TOKEN")
        if not sid or not token:
            return None
        base = credentials.get("TWILIO_API_BASE", "https://api.twilio.com").rstrip("/")
        return HangUp("POST", f"{base}/2010-04-01/Accounts/{quote(sid, safe='')}/Calls/{quote(call_id, safe='')}.json",
                      {"Authorization": _basic(sid, token), "Content-Type": "application/x-www-form-urlencoded"},
                      b"Status=completed")


class Telnyx(Provider):
    """Telnyx media streaming, connected by TeXML (``<Connect><Stream bidirectionalMode="rtp">``), played back in
    PCMU whatever the call's codec."""

    name = "telnyx"
    LAWS: ClassVar[dict[str, Law]] = {"PCMU": "ulaw", "PCMA": "alaw"}

    def started(self, message: Mapping[str, Any]) -> CallStarted:
        start = message["start"]
        media_format = start.get("media_format") if isinstance(start.get("media_format"), dict) else {}
        encoding = media_format.get("encoding", "PCMU")
        if not isinstance(encoding, str) or encoding not in self.LAWS:
            raise WireError(f"the phone door hears PCMU or PCMA, not {str(encoding)[:32]!r}")
        self.stream_id = _text(message.get("stream_id"), "stream_id")
        # (what it plays back is the answer's bidirectionalCodec, PCMU, whatever the call's own codec)
        return CallStarted(self.stream_id, _text(start.get("call_control_id"), "start.call_control_id"),
                           self.LAWS[encoding], "ulaw", _parameters(start.get("custom_parameters")))

    def media(self, payload: bytes) -> dict[str, Any]:
        return {"event": "media", "media": {"payload": base64.b64encode(payload).decode("ascii")}}

    def clear(self) -> dict[str, Any]:
        return {"event": "clear"}

    def mark(self, name: str) -> dict[str, Any]:
        return {"event": "mark", "mark": {"name": name}}

    @staticmethod
    def answer(stream_url: str) -> str:
        return _xml(f'<Connect><Stream url={quoteattr(stream_url)} bidirectionalMode="rtp" '
                    'bidirectionalCodec="PCMU"/></Connect>')

    @staticmethod
    def hang_up(call_id: str, credentials: Mapping[str, str]) -> HangUp | None:
        key = credentials.get("TELNYX_API_KEY")
        if not key:
            return None
        base = credentials.get("TELNYX_API_BASE", "https://api.telnyx.com").rstrip("/")
        return HangUp("POST", f"{base}/v2/calls/{quote(call_id, safe='')}/actions/hangup",
                      {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, b"{}")


class Plivo(Provider):
    """Plivo audio streams (``<Stream bidirectional="true">``): audio out is ``playAudio``, a barge-in
    ``clearAudio``, a mark a ``checkpoint`` that Plivo answers with ``playedStream``."""

    name = "plivo"
    mark_event = "playedStream"
    content_type = "audio/x-mulaw"
    LAWS: ClassVar[dict[str, Law]] = {"audio/x-mulaw": "ulaw", "audio/x-alaw": "alaw"}

    def started(self, message: Mapping[str, Any]) -> CallStarted:
        start = message["start"]
        media_format = start.get("mediaFormat") if isinstance(start.get("mediaFormat"), dict) else {}
        encoding = media_format.get("encoding", "audio/x-mulaw")
        if not isinstance(encoding, str) or encoding not in self.LAWS or media_format.get("sampleRate", 8000) != 8000:
            raise WireError("the phone door hears audio/x-mulaw or audio/x-alaw at 8000 Hz")
        self.stream_id = _text(start.get("streamId"), "start.streamId")
        self.content_type = encoding  # (what it sends back is in the same law, labelled so)
        law = self.LAWS[encoding]
        return CallStarted(self.stream_id, _text(start.get("callId"), "start.callId"), law, law, {})

    def _mark_name(self, message: Mapping[str, Any]) -> str:
        return _text(message.get("name"), "name")

    def media(self, payload: bytes) -> dict[str, Any]:
        return {"event": "playAudio", "streamId": self.stream_id,
                "media": {"contentType": self.content_type, "sampleRate": 8000,
                          "payload": base64.b64encode(payload).decode("ascii")}}

    def clear(self) -> dict[str, Any]:
        return {"event": "clearAudio", "streamId": self.stream_id}

    def mark(self, name: str) -> dict[str, Any]:
        return {"event": "checkpoint", "streamId": self.stream_id, "name": name}

    @staticmethod
    def answer(stream_url: str) -> str:
        return _xml('<Stream bidirectional="true" keepCallAlive="true" contentType="audio/x-mulaw;rate=8000">'
                    f"{escape(stream_url)}</Stream>")

    @staticmethod
    def refusal(text: str) -> str:
        return _xml(f"<Speak>{escape(text)}</Speak><Hangup/>")

    @staticmethod
    def hang_up(call_id: str, credentials: Mapping[str, str]) -> HangUp | None:
        auth_id, token = credentials.get("PLIVO_AUTH_ID"), credentials.get("PLIVO_AUTH_TOKEN")
        if not auth_id or not token:
            return None
        base = credentials.get("PLIVO_API_BASE", "https://api.plivo.com").rstrip("/")
        return HangUp("DELETE", f"{base}/v1/Account/{quote(auth_id, safe='')}/Call/{quote(call_id, safe='')}/",
                      {"Authorization": _basic(auth_id, token)})


PROVIDERS: dict[str, type[Provider]] = {p.name: p for p in (Twilio, Telnyx, Plivo)}
