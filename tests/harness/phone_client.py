"""A phone provider of our own, for tests and benchmarks: it does what Twilio, Telnyx or Plivo do when a call comes
in — POSTs the webhook, reads the stream URL and parameters from the XML answer, opens the media stream (TLS to the
server's self-signed certificate), sends ``connected`` / ``start`` and the caller's voice as 8 kHz μ-law ``media``
every 20 ms in real time — and plays what comes back as a phone would: the reply's media in order at 8 kHz, a
``clear`` drops what is not yet played, and each ``mark`` is answered once everything sent before it has played."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import secrets
import sqlite3
import ssl
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import requests
import soxr

from vita.web.codecs import g711_decode, g711_encode

RATE = 8000
FRAME = 160  # 20 ms of 8 kHz


def over_phone_line(pcm16k: np.ndarray, law: str = "ulaw") -> bytes:
    """16 kHz speech as a phone line carries it: 8 kHz G.711."""
    return g711_encode(soxr.resample(pcm16k, 16000, RATE).astype(np.int16), law)


def as_heard_over_phone(pcm16k: np.ndarray) -> np.ndarray:
    """16 kHz speech after a phone line: band-limited to 8 kHz μ-law and back to 16 kHz (what the server's VAD and
    ASR get of a call)."""
    return soxr.resample(g711_decode(over_phone_line(pcm16k), "ulaw"), RATE, 16000).astype(np.int16)


@dataclass
class Heard:
    """What the phone was sent: each message with its arrival time."""

    messages: list[tuple[float, dict[str, Any]]] = field(default_factory=list)


def webhook(url: str, provider: str, call_id: str, path_query: str = "", auth_token: str | None = None,
            **form: str) -> requests.Response:
    """The provider's POST when a call comes in (Twilio's signed with the account's `auth_token`, as Twilio does)."""
    fields = {"twilio": {"CallSid": call_id, "AccountSid": "AC" + "0" * 32, "From": "+15550001111",
                         "To": "+15550002222", "CallStatus": "ringing"},
              "telnyx": {"CallSid": call_id, "From": "+15550001111", "To": "+15550002222"},
              "plivo": {"CallUUID": call_id, "From": "15550001111", "To": "15550002222", "Direction": "inbound"}}
    data, target = {**fields[provider], **form}, f"{url}/phone/{provider}{path_query}"
    headers = {}
    if auth_token is not None:
        from vita.web.phone.route import twilio_signature

        headers["X-Twilio-Signature"] = twilio_signature(auth_token, target, data)
    return requests.post(target, data=data, headers=headers, verify=False, timeout=10)


def stream_of(provider: str, xml: str) -> str:
    """The stream URL the answer connects the call to."""
    root = ET.fromstring(xml)
    stream = root.find(".//Stream")
    assert stream is not None, xml
    return stream.get("url") if provider in ("twilio", "telnyx") else (stream.text or "").strip()


class PhoneCall:
    """One call from the provider's side: webhook, stream, a caller's voice in, the reply out."""

    def __init__(self, url: str, provider: str = "twilio", call_id: str | None = None, law: str = "ulaw",
                 answer_marks: bool = True, auth_token: str | None = None, stream_url: str | None = None):
        """stream_url: open this stream instead of the one the webhook answers with (no webhook is called)."""
        self.provider, self.law, self.answer_marks = provider, law, answer_marks
        self.call_id = call_id or {"twilio": "CA", "telnyx": "v3:", "plivo": ""}[provider] + secrets.token_hex(16)
        self.stream_id = secrets.token_hex(16)
        if stream_url is None:
            form = {"CallControlId": self.call_id} if provider == "telnyx" else {}
            answer = webhook(url, provider, self.call_id, auth_token=auth_token if provider == "twilio" else None,
                             **form)
            answer.raise_for_status()
            stream_url = stream_of(provider, answer.text)
        self.stream_url = stream_url
        self.heard = Heard()
        self.changed = threading.Condition()
        self.played_until = 0.0  # monotonic time the phone will have played everything it was sent
        self.played: list[np.ndarray] = []  # the reply audio the phone played (8 kHz)
        self.closed = threading.Event()
        self.send_lock = threading.Lock()
        self.ws = self._open()
        self.reader = threading.Thread(target=self._read, name="phone-call", daemon=True)
        self.reader.start()

    def _open(self) -> Any:
        from websockets.sync.client import connect

        context = None
        if self.stream_url.startswith("wss://"):
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        # Once more if the upgrade goes unanswered: in the whole suite's run (two lanes, several servers and vLLM
        # starting on two cores) a stream's upgrade went unanswered twice in three runs, never alone or beside one
        # lane; a refusal (InvalidStatus) is an answer, and is not tried again.
        from websockets.exceptions import InvalidMessage

        for last in (False, True):
            try:
                return connect(self.stream_url, ssl=context, open_timeout=20, max_size=2**20)
            except (TimeoutError, InvalidMessage):
                if last:
                    raise
        raise AssertionError("unreachable")

    # --- what the provider sends ----------------------------------------------------------------------------
    def send(self, message: dict[str, Any] | str) -> None:
        with self.send_lock:
            self.ws.send(message if isinstance(message, str) else json.dumps(message))

    def start(self, encoding: str | None = None, call_id: str | None = None, provider: str | None = None) -> None:
        """`connected` (Twilio, Telnyx), then `start` as the provider would send it (`call_id`, `provider`: another
        call's or provider's, as a forged stream would)."""
        call_id = call_id or self.call_id
        provider = provider or self.provider
        if provider == "twilio":
            self.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
            self.send({"event": "start", "sequenceNumber": "1", "streamSid": self.stream_id,
                       "start": {"accountSid": "AC" + "0" * 32, "streamSid": self.stream_id, "callSid": call_id,
                                 "tracks": ["inbound"], "customParameters": {"caller": "test"},
                                 "mediaFormat": {"encoding": encoding or "audio/x-mulaw", "sampleRate": 8000,
                                                 "channels": 1}}})
        elif provider == "telnyx":
            self.send({"event": "connected", "version": "1.0.0"})
            self.send({"event": "start", "sequence_number": "1", "stream_id": self.stream_id,
                       "start": {"user_id": "u1", "call_control_id": call_id, "client_state": None,
                                 "media_format": {"encoding": encoding or ("PCMU" if self.law == "ulaw" else "PCMA"),
                                                  "sample_rate": 8000, "channels": 1}}})
        else:
            self.send({"event": "start", "sequenceNumber": 0,
                       "start": {"callId": call_id, "streamId": self.stream_id, "accountId": "1",
                                 "tracks": ["inbound"],
                                 "mediaFormat": {"encoding": encoding or "audio/x-mulaw", "sampleRate": 8000}}})

    def media(self, payload: bytes, chunk: int = 0) -> dict[str, Any]:
        data = base64.b64encode(payload).decode("ascii")
        if self.provider == "twilio":
            return {"event": "media", "sequenceNumber": str(chunk + 2), "streamSid": self.stream_id,
                    "media": {"track": "inbound", "chunk": str(chunk), "timestamp": str(chunk * 20), "payload": data}}
        if self.provider == "telnyx":
            return {"event": "media", "sequence_number": str(chunk + 2), "stream_id": self.stream_id,
                    "media": {"track": "inbound", "chunk": str(chunk), "timestamp": str(chunk * 20),
                              "payload": data}}
        return {"event": "media", "sequenceNumber": chunk + 1, "streamId": self.stream_id,
                "media": {"track": "inbound", "timestamp": str(chunk * 20), "chunk": chunk, "payload": data}}

    def say(self, pcm16k: np.ndarray, realtime: bool = True) -> float:
        """The caller's voice (16 kHz int16), as the line carries it: 8 kHz G.711 in 20 ms media messages, in real
        time. Returns when its last frame was sent (monotonic)."""
        audio = over_phone_line(pcm16k, self.law)
        begun = time.monotonic()
        for k in range(0, len(audio), FRAME):
            if realtime:
                delay = begun + k / RATE - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            self.send(self.media(audio[k:k + FRAME], k // FRAME))
        return time.monotonic()

    def dtmf(self, digit: str) -> None:
        key = {"twilio": "streamSid", "telnyx": "stream_id", "plivo": "streamId"}[self.provider]
        self.send({"event": "dtmf", key: self.stream_id, "dtmf": {"track": "inbound_track", "digit": digit}})

    def hang_up(self) -> None:
        """The caller hangs up: the provider sends stop and closes the stream."""
        key = {"twilio": "streamSid", "telnyx": "stream_id", "plivo": "streamId"}[self.provider]
        with contextlib.suppress(Exception):
            self.send({"event": "stop", key: self.stream_id, "stop": {"callSid": self.call_id}})
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        self.closed.wait(10)

    # --- what the phone hears -------------------------------------------------------------------------------
    def _read(self) -> None:
        try:
            while True:
                message = json.loads(self.ws.recv())
                now = time.monotonic()
                self._play(message, now)
                with self.changed:
                    self.heard.messages.append((now, message))
                    self.changed.notify_all()
        except Exception:
            pass
        finally:
            self.closed.set()
            with self.changed:
                self.changed.notify_all()

    def _play(self, message: dict[str, Any], now: float) -> None:
        event = message.get("event")
        if event in ("media", "playAudio"):
            pcm = g711_decode(base64.b64decode(message["media"]["payload"]), self.law)
            self.played.append(pcm)
            self.played_until = max(self.played_until, now) + len(pcm) / RATE
        elif event in ("clear", "clearAudio"):
            self.played_until = now
        elif event in ("mark", "checkpoint") and self.answer_marks:
            name = message["mark"]["name"] if event == "mark" else message["name"]
            threading.Timer(max(0.0, self.played_until - now), self._answer_mark, args=(name,)).start()

    def _answer_mark(self, name: str) -> None:
        key = {"twilio": "streamSid", "telnyx": "stream_id", "plivo": "streamId"}[self.provider]
        if self.provider == "plivo":
            message = {"event": "playedStream", "streamId": self.stream_id, "name": name}
        else:
            message = {"event": "mark", key: self.stream_id, "mark": {"name": name}}
        with contextlib.suppress(Exception):
            self.send(message)

    def logged_turns(self, server_log: str, state_dir: Path) -> list[dict[str, Any]]:
        """This call's rows of the server's turn log, in turn order: [] until the server's log names the turn log's
        session for the call and the turn log holds its rows (a phone hears no text: this is what it said)."""
        found = re.search(rf"phone call {re.escape(self.call_id)} .*the turn log's session (\w+)", server_log)
        if found is None:
            return []
        try:
            with sqlite3.connect(state_dir / "turns.sqlite3") as db:
                db.row_factory = sqlite3.Row
                return [dict(r) for r in db.execute("SELECT * FROM turns WHERE session = ? ORDER BY turn_id",
                                                    (found.group(1),))]
        except sqlite3.Error:
            return []

    def of(self, *events: str) -> list[tuple[float, dict[str, Any]]]:
        with self.changed:
            return [(at, m) for at, m in self.heard.messages if m.get("event") in events]

    def wait_for(self, *events: str, count: int = 1, timeout: float = 60) -> list[tuple[float, dict[str, Any]]]:
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                found = [(at, m) for at, m in self.heard.messages if m.get("event") in events]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self.closed.is_set():
                    raise TimeoutError(f"{count} of {events} not heard in {timeout} s; heard "
                                       f"{[m.get('event') for _, m in self.heard.messages][-20:]}")
                self.changed.wait(left)

    def reply_audio(self) -> np.ndarray:
        return np.concatenate(self.played) if self.played else np.zeros(0, np.int16)
