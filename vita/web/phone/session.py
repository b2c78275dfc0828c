"""One phone call: a media stream from Twilio, Telnyx or Plivo, seated like any client (a seat of --max_users, the
idle timeout, the same turn machine and workers) and reached through its ``Channel``: the caller's 8 kHz G.711 goes
to the session's VAD; the reply, resampled to 8 kHz and encoded as the call's law, goes back as the provider's
media messages, a mark after each reply (what the phone has actually played), a clear on barge-in. Keypad digits
reach the turn as text. When the server ends the call (idle, shutting down, refused too often) it closes the stream
and hangs the call up through the provider's REST API.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import soxr

from vita.client_events import ClientEvent, OutOfTime, ReplyAudio, StateChanged, StopSpeaking
from vita.ops.logs import turn_ids
from vita.turns.sessions import MIN_TEXT_COST
from vita.turns.turn_events import TextTyped
from vita.web.codecs import G711_RATE, g711_decode, g711_encode
from vita.web.http.web_security import client_address
from vita.web.phone.wire import (
    CallAudio,
    CallStarted,
    CallStopped,
    HangUp,
    KeyPressed,
    MarkPlayed,
    Provider,
    StreamConnected,
    WireError,
    parse,
)

if TYPE_CHECKING:
    from vita.turns.sessions import Session
    from vita.web.front_host import FrontHost

log = logging.getLogger("vita.web.phone")
REPLY_RATE = 24000  # the TTS worker's (ReplyAudio)
START_WITHIN_S = 10.0  # a stream that has not said which call it carries by then is closed
BEFORE_START = 4  # messages a stream may send before its start (a `connected`, and a little slack)
MAX_WIRE_ERRORS = 20  # unreadable messages a call may send before its stream is closed
DIGITS_WITHIN_S = 1.2  # keypad digits pressed this close together are one entry ("#" ends one at once)
HANG_UP_TIMEOUT_S = 10.0
FRAME = G711_RATE // 50  # 20 ms


class PhoneSession:
    """One call's stream: read on its connection's thread; told by the turn machine on the session's."""

    door = "phone"

    def __init__(self, front: FrontHost, ws: Any, environ: dict, expected: type[Provider],
                 admitted: Callable[[str], bool | None], credentials: Mapping[str, str],
                 caller: Callable[[str], str | None] = lambda _call_id: None):
        """expected: the provider the stream's URL names; admitted(call_id): its token spent for that call (True:
        the webhook named this call, so the server may hang it up; False: it named none; None: refused);
        credentials: the providers' account settings (from the environment); caller(call_id): the memory key of
        the number that called, when its webhook was vouched for (None: nobody known)."""
        self.front, self.ws, self.environ = front, ws, environ
        self.expected, self.admitted, self.credentials, self.caller = expected, admitted, credentials, caller
        self.user_key: str | None = None
        self.may_hang_up = False
        self.provider: Provider | None = None
        self.call: CallStarted | None = None
        self.session: Session | None = None
        self.sid = ""
        self.closed = self.ended = False
        self.ended_by_server = False
        self.send_lock = threading.Lock()
        self.wire_errors = 0
        self.resampler: Any = None  # the reply's, 24 kHz → 8 kHz (a stream: no seam between chunks)
        self.reply_rest = np.zeros(0, np.int16)  # ...and what it gave past the last whole 20 ms frame
        self.speaking_turn: int | None = None  # the turn whose reply is going out now
        self.cut = False  # ...and it was cut short (a barge-in's clear)
        self.marks: dict[str, float] = {}  # marks sent and not yet played back: when each was sent
        self.digits = ""
        self.digits_entry = 0  # which entry the pending timer is for (a later digit starts another)
        self.digits_timer: threading.Timer | None = None

    # --- the stream ---------------------------------------------------------------------------------------------
    def serve(self) -> None:
        """The stream's life: its start (the call, the token, a seat), then its messages until it ends."""
        started = threading.Timer(START_WITHIN_S, self._not_started)
        started.daemon = True
        started.start()
        try:
            if self._start():
                while (data := self.ws.wait()) is not None and not self.closed:
                    if self.front.sessions.get(self.sid) is None:
                        break
                    self.receive(data)
        finally:
            started.cancel()
            self.end()

    def _not_started(self) -> None:
        if self.call is None:
            log.info("a phone stream named no call within %g s: closed", START_WITHIN_S)
            self._close_stream()

    def _start(self) -> bool:
        """Read up to the stream's start; seat its call. False (the stream closed) for anything else."""
        for _ in range(BEFORE_START + 1):
            data = self.ws.wait()
            if data is None or self.closed:
                return False
            try:
                message = parse(data)
                provider = Provider.recognise(message)
                if provider is None:
                    if message["event"] == "connected":
                        continue
                    raise WireError(f"a stream begins with start, not {message['event'][:32]!r}")
                if not isinstance(provider, self.expected):
                    raise WireError(f"a {provider.name} stream on the {self.expected.name} stream URL")
                call = provider.started(message)
            except WireError as exc:
                log.info("phone stream refused: %s", exc)
                self._close_stream()
                return False
            admitted = self.admitted(call.call_id)
            if admitted is None:
                log.info("a %s stream whose token is spent, expired or another call's: closed", provider.name)
                self._close_stream()
                return False
            self.provider, self.call, self.may_hang_up = provider, call, admitted
            self.user_key = self.caller(call.call_id) if admitted else None  # (only a vouched-for call's)
            return self._seat()
        log.info("phone stream sent %d messages and no start: closed", BEFORE_START + 1)
        self._close_stream()
        return False

    def _seat(self) -> bool:
        front, call, provider = self.front, self.call, self.provider
        assert call is not None and provider is not None
        self.sid = "ph" + secrets.token_hex(8)
        session = front.doorway.open(self.sid, client_address(self.environ))
        if session is None:
            front.metrics.sessions_refused.inc()
            log.info("phone call %s turned away: the server is full (%d users)", call.call_id,
                     front.sessions.max_users)
            self.ended_by_server = True
            self._close_stream()
            return False
        self.session = session
        session.user_key = self.user_key
        try:
            front.doorway.attach(session, self)
        except Exception:
            self.end()
            raise
        log.info("phone call %s on %s (stream %s; the turn log's session %s)", call.call_id, provider.name,
                 call.stream_id, front.turn_log.pseudonym(self.sid), extra=turn_ids(self.sid))
        front.doorway.connected(session)
        return True

    def receive(self, data: str | bytes) -> None:
        """One message of the started stream."""
        assert self.provider is not None and self.session is not None
        try:
            event = self.provider.read(parse(data))
        except WireError as exc:
            self.wire_errors += 1
            log.info("phone stream message refused (%s)", exc, extra=turn_ids(self.sid))
            if self.wire_errors >= MAX_WIRE_ERRORS:
                log.info("phone stream closed after %d unreadable messages", self.wire_errors, extra=turn_ids(self.sid))
                self._close_stream()
            return
        if isinstance(event, CallAudio):
            assert self.call is not None
            if event.payload:
                self.front.admit_audio(self.session, g711_decode(event.payload, self.call.law), G711_RATE)
        elif isinstance(event, KeyPressed):
            self._pressed(event.digit)
        elif isinstance(event, MarkPlayed):
            with self.send_lock:
                sent = self.marks.pop(event.name, None)
            if sent is not None:
                log.info("the caller heard %s (%.2f s after it was sent)", event.name, time.monotonic() - sent,
                         extra=turn_ids(self.sid))
        elif isinstance(event, CallStopped):
            log.info("phone call ended by the caller", extra=turn_ids(self.sid))
            self.closed = True
        elif isinstance(event, StreamConnected):
            return

    def _pressed(self, digit: str) -> None:
        """Keypad digits: gathered while they come close together, then told to the turn as text."""
        with self.send_lock:
            self.digits += digit
            self.digits_entry += 1  # (a timer already firing for the entry so far finds it went on)
            if self.digits_timer is not None:
                self.digits_timer.cancel()
                self.digits_timer = None
            if digit == "#" or len(self.digits) >= 32:
                self._digits_entered()
                return
            self.digits_timer = threading.Timer(DIGITS_WITHIN_S, self._digits_due, args=(self.digits_entry,))
            self.digits_timer.daemon = True
            self.digits_timer.start()

    def _digits_due(self, entry: int) -> None:
        with self.send_lock:
            if entry != self.digits_entry:
                return
            self.digits_timer = None
            self._digits_entered()

    def _digits_entered(self) -> None:
        """(under send_lock) The digits entered, as the caller's words."""
        digits, self.digits = self.digits, ""
        session = self.session
        if not digits or session is None or self.closed:
            return
        keys = " ".join(digits)
        text = f"(The caller pressed {keys} on the phone's keypad.)"
        if not session.charge_texts([(text, None)], self.front.text_cost, time.monotonic(), least=MIN_TEXT_COST):
            log.info("keypad entry dropped: over the call's text budget", extra=turn_ids(self.sid))
            return
        self.front.turns.post(session, TextTyped(time.monotonic(), text))

    def end(self) -> None:
        """The stream closed, the seat back and the turn machine detached (once); a call the server ended is hung
        up through the provider."""
        if self.ended:
            return
        self.ended = True
        self._close_stream()
        timer = self.digits_timer
        if timer is not None:
            timer.cancel()
        if self.session is not None:
            self.front.doorway.detach(self.sid)
        if self.ended_by_server:
            self._hang_up()

    def _close_stream(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self.ws.close()

    def _hang_up(self) -> None:
        """The provider's REST request that ends the call, on a thread of its own (a call already over is no
        error); without the account's credentials only the stream is closed, and the provider ends the call."""
        if self.provider is None or self.call is None:
            return
        if not self.may_hang_up:  # (its webhook named no call: the provider ends it as the stream closes)
            log.info("the stream is closed; the provider ends the call", extra=turn_ids(self.sid))
            return
        request = self.provider.hang_up(self.call.call_id, self.credentials)
        if request is None:
            log.info("no %s credentials: the stream is closed, the provider ends the call", self.provider.name,
                     extra=turn_ids(self.sid))
            return
        threading.Thread(target=_send_hang_up, args=(request, self.sid), name="phone-hang-up", daemon=True).start()

    def _send(self, message: dict[str, Any]) -> None:
        """(under send_lock) A message to the provider; a stream that cannot take it is closed."""
        if self.closed:
            return
        try:
            self.ws.send(json.dumps(message))
        except Exception:  # a provider that stopped reading: its socket shut at once, its reader ends the session
            self.closed = True
            self.ws.cut()

    # --- its channel: what the front and the turn machine tell this call ----------------------------------------------
    def tell(self, event: ClientEvent) -> None:
        provider = self.provider
        if provider is None:
            return
        with self.send_lock:
            if isinstance(event, ReplyAudio):
                self._reply_audio(provider, event.pcm)
            elif isinstance(event, StopSpeaking):
                self.resampler, self.reply_rest = None, np.zeros(0, np.int16)
                self.cut = self.speaking_turn is not None
                self._send(provider.clear())
            elif isinstance(event, StateChanged):
                if event.state == "speaking":
                    self.speaking_turn, self.cut = event.turn_id, False
                elif self.speaking_turn is not None:  # the reply is over (said, or cut): where the phone has got to
                    self._flush_reply(provider)
                    name = f"reply-{self.speaking_turn}" + ("-cut-short" if self.cut else "")
                    self.speaking_turn = None
                    self.marks[name] = time.monotonic()
                    if len(self.marks) > 64:  # (a phone that never answers marks: the oldest are forgotten)
                        self.marks.pop(next(iter(self.marks)))
                    self._send(provider.mark(name))
            elif isinstance(event, OutOfTime):
                log.info("phone call idle past the timeout: hung up", extra=turn_ids(self.sid))

    def _reply_audio(self, provider: Provider, pcm: bytes) -> None:
        """The reply's audio in whole 20 ms frames (Telnyx takes no shorter media); the rest waits for more."""
        if self.resampler is None:
            self.resampler = soxr.ResampleStream(REPLY_RATE, G711_RATE, 1, dtype="int16")
        samples = self.resampler.resample_chunk(np.frombuffer(pcm, dtype=np.int16))
        self._send_frames(provider, np.concatenate([self.reply_rest, samples]))

    def _send_frames(self, provider: Provider, samples: np.ndarray) -> None:
        whole = samples.size - samples.size % FRAME
        self.reply_rest = samples[whole:]
        if whole:
            assert self.call is not None
            self._send(provider.media(g711_encode(samples[:whole], self.call.reply_law)))

    def _flush_reply(self, provider: Provider) -> None:
        """The reply's last samples, padded to a whole 20 ms frame."""
        if self.resampler is not None:
            tail = np.concatenate([self.reply_rest, self.resampler.resample_chunk(np.zeros(0, np.int16), last=True)])
            self.resampler = None
            self._send_frames(provider, np.concatenate([tail, np.zeros(-tail.size % FRAME, np.int16)]))

    def close(self) -> None:
        """The server ends the call (idle, refused too often, shutting down): the stream closes, the reader ends
        the session, and the call is hung up."""
        self.ended_by_server = True
        self._close_stream()

    def hears_echo(self, turn: Any) -> bool:
        return turn.speaker_echo_realtime  # a speakerphone's echo, or the line's own, may come back

    def track(self) -> Any:
        return None  # the reply goes out as paced ReplyAudio, as media messages


def _send_hang_up(hang_up: HangUp, sid: str) -> None:
    request = urllib.request.Request(hang_up.url, data=hang_up.body, headers=dict(hang_up.headers),
                                     method=hang_up.method)
    try:
        with urllib.request.urlopen(request, timeout=HANG_UP_TIMEOUT_S) as answer:
            log.info("call hung up (%s %d)", hang_up.method, answer.status, extra=turn_ids(sid))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            log.info("call was over already (404)", extra=turn_ids(sid))
        else:
            log.warning("hanging up the call failed: HTTP %d", exc.code, extra=turn_ids(sid))
    except (OSError, ValueError) as exc:
        log.warning("hanging up the call failed: %s", exc, extra=turn_ids(sid))
