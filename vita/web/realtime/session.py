"""``/v1/realtime``: OpenAI's Realtime protocol over a plain WebSocket on the front, beside Socket.IO.

A Realtime client is a session like any other (one seat of --max_users, the idle timeout, the access token, the
same mailbox, turn machine, workers and reply pacing); only its wire differs. Its events are read in order on its
connection's thread, as Socket.IO's are; what the turn machine says back goes through the session's
``RealtimeConversation`` (vita/web/realtime/conversation.py), the Realtime door's serializer of client events.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from vita.client_events import ClientEvent, TurnStarted
from vita.ops.logs import turn_ids
from vita.rate_budget import RateBudget
from vita.turns.sessions import MIN_TEXT_COST
from vita.turns.turn_events import SpeechDropped
from vita.web.doors import connected_track
from vita.web.http.web_security import client_address
from vita.web.realtime.audio_buffer import PushToTalkBuffer
from vita.web.realtime.client_keys import MEMORY_USER
from vita.web.realtime.conversation import Item, RealtimeConversation
from vita.web.realtime.protocol import (
    EAGER_THRESHOLD,
    FORMATS,
    ProtocolError,
    Settings,
    ToolChoice,
    TurnDetection,
    audio_seconds,
    decode_audio,
    new_id,
    parse_event,
    updated,
)
from vita.web.realtime.responses import ItemsAndResponses, fixed_prompt
from vita.web.realtime.settings import choose_tools, first_settings, refuse_push_to_talk, session_summary

if TYPE_CHECKING:
    from vita.web.front_host import SessionHost

log = logging.getLogger("vita.web.realtime.session")
# Refusals a client draws by sending more than its budgets allow: counted, as on the Socket.IO door, and a client
# that goes on drawing them is closed (App.refused_too_often). A malformed event is answered and not counted: an
# SDK exploring the protocol sends those, and they are rate-limited as events.
UPDATES_PER_S, UPDATES_BURST = 2.0, 20.0
OVER_BUDGET = frozenset({"audio_overrun", "rate_limited", "too_many_items"})


class RealtimeSession(ItemsAndResponses):
    """One Realtime connection: its settings, its push-to-talk buffer, the items its next response answers, and
    its client events (read in order on the connection's thread)."""

    def __init__(self, front: SessionHost, ws: Any, model: str, environ: dict, bound: Settings | None = None):
        """bound: the settings the session opens with (a client key's, a call's), checked already."""
        self.front, self.ws, self.requested_model = front, ws, model
        config = front.config
        self.settings = first_settings(front)
        self.bound = bound
        self.environ = environ
        self.sid = new_id("rt")
        self.received_ms = 0  # input audio received so far (the VAD events' audio_start_ms / audio_end_ms)
        self.conversation = RealtimeConversation(self._write, lambda: self.settings, lambda: self.received_ms,
                                                 config.llm.max_tokens)
        self.audio = PushToTalkBuffer(config.vad.max_utterance_s)  # and the cap on what one response hears
        # The instructions and functions last charged (fixed_prompt): unchanged ones cost no text budget again.
        self.prompted = fixed_prompt("", (), ToolChoice())
        # session.update: each is read whole, checked, applied and its whole session (64 functions' schemas) sent
        # back, ~1 ms and up to 50 KB for a 38-byte event; an app updates now and then, not hundreds of times a second.
        self.updates = RateBudget(UPDATES_PER_S, UPDATES_BURST, time.monotonic())
        self.pending: list[Item] = []  # the client's items (speech, text, tool results) the next response answers
        self.requested = False  # response.create sent, its turn not yet begun
        self.closed = False
        self.session: Any = None

    # --- the connection -------------------------------------------------------------------------------------
    def _write(self, event: dict[str, Any]) -> None:
        """The raw write (RealtimeConversation.send serializes every writer through its lock). A client that
        stops reading fails a send at the socket's write deadline; its connection is then cut, which ends the
        session (its reader wakes)."""
        if self.closed:
            return
        try:
            self.ws.send(json.dumps(event, ensure_ascii=False))
        except Exception:
            self.closed = True
            self.ws.cut()

    def close(self) -> None:
        """The server ends the session (idle timeout): a last word has been sent; the client's reader ends it."""
        self.closed = True
        with contextlib.suppress(Exception):
            self.ws.close()

    def serve(self) -> None:
        """A WebSocket client: its seat (or `too_many_users` on its own wire), then its events until it goes."""
        try:
            opened = self.open()
        except ProtocolError as exc:  # its client key's prompt, over what its address may still spend
            self.conversation.error(exc.code, exc.message, exc.param, kind=exc.kind)
            self.close()
            return
        if not opened:
            self.conversation.error("too_many_users", f"The server is full ({self.front.sessions.max_users} users); "
                                    "try again later.", kind="server_error")
            self.close()
            return
        self.run()

    def open(self) -> bool:
        """Take a seat of --max_users; False when there is none. ProtocolError (rate_limited, the seat given back)
        when the settings it is bound to bring a prompt its client's text budget cannot pay for."""
        front = self.front
        session = front.doorway.open(self.sid, client_address(self.environ))
        if session is None:
            front.metrics.sessions_refused.inc()
            return False
        self.session = session
        session.voice = self.settings.voice
        user = self.environ.get(MEMORY_USER)  # an app's user, named when its backend minted the client key
        if user and front.user_keys is not None:
            session.user_key = front.user_keys.key("realtime", user)
        try:
            front.doorway.attach(session, self)
            if self.bound is not None:  # the client key's settings, before anything of the session happens
                bound = self.bound
                self._charge_settings(bound)  # as a session.update would be (its VAD turns use them)
                before, self.settings = self.settings, bound
                self._apply(before, bound)
        except Exception:
            self.end()
            raise
        return True

    def run(self) -> None:
        """The open session's life: session.created, then the client's events in order until it goes."""
        front = self.front
        try:
            log.info("Realtime session opened (model %r asked)", self.requested_model, extra=turn_ids(self.sid))
            self.conversation.send({"type": "session.created", "session": self._session_json()})
            front.doorway.connected(self.session)
            while (data := self.ws.wait()) is not None:
                if front.sessions.get(self.sid) is None or self.closed:
                    break
                self.receive(data)
        finally:
            self.end()

    def end(self) -> None:
        """The seat back, the turn machine detached (whichever way the session ended; once)."""
        self.closed = True
        if self.session is not None:
            self.front.doorway.detach(self.sid)

    def count_audio(self, samples: int, rate: int) -> None:
        """Input audio received (an append's, or a call's track): the VAD events' audio_start_ms / audio_end_ms."""
        self.received_ms += 1000 * samples // rate

    # --- its channel: what the front and the turn machine tell this session ------------------------------------
    @property
    def door(self) -> str:
        return "call" if self.conversation.webrtc else "realtime"

    def hears_echo(self, turn: Any) -> bool:
        return turn.speaker_echo_realtime  # apps on a laptop's or a kiosk's speaker often cancel no echo

    def track(self) -> Any:
        """A call's WebRTC peer, once connected (its replies go on the Opus track); a WebSocket has none."""
        return connected_track(self.front.rtc, self.sid) if self.conversation.webrtc else None

    def tell(self, event: ClientEvent) -> None:
        self.conversation.tell(event)
        if isinstance(event, TurnStarted):
            self.requested = False  # after its response exists: a second response.create is refused throughout

    # --- client events ---------------------------------------------------------------------------------------
    def receive(self, data: str | bytes) -> None:
        event_id = None
        try:
            if not self.front.session_allows_event(self.session):
                return
            event = parse_event(data)
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise ProtocolError("invalid_event", "an event is a JSON object with a string type")
            given = event.get("event_id")
            event_id = given if isinstance(given, str) and len(given) <= 512 else None
            event["event_id"] = event_id  # what an error names it by: the client's own id, or none
            handler = getattr(self, "on_" + event["type"].replace(".", "_"), None)
            if handler is None:
                raise ProtocolError("invalid_event", f"unknown or unsupported event type {event['type'][:64]!r}",
                                    "type")
            handler(event)
        except ProtocolError as exc:
            if exc.code in OVER_BUDGET and self.front.refused_too_often(self.session):
                return
            self.conversation.error(exc.code, exc.message, exc.param, event_id, exc.kind)
        except (ValueError, UnicodeDecodeError):
            self.conversation.error("invalid_json", "the event is not valid JSON", None, event_id)
        except Exception:  # a bug must cost this event, never the session or the front
            log.exception("Realtime event failed", extra=turn_ids(self.sid))
            self.conversation.error("server_error", "The server could not handle this event.", None, event_id,
                                    "server_error")

    def on_session_update(self, event: dict) -> None:
        if not self.updates.take(1.0, time.monotonic()):
            raise ProtocolError("rate_limited", f"session.update may come {UPDATES_PER_S:g} times a second "
                                f"({UPDATES_BURST:g} at once): wait a moment")
        before = self.settings
        after = updated(before, event.get("session"), self.front.voices)
        if self.conversation.webrtc:
            refuse_push_to_talk(after)
        self._charge_settings(after)
        self.settings = after
        self._apply(before, after)
        self.conversation.send({"type": "session.updated", "session": self._session_json()})

    def _charge_settings(self, settings: Settings) -> None:
        """New instructions or functions are charged when they are set: a turn the server's VAD starts uses them
        with no response.create to charge (leaving room for one least response after, as a client updates then
        asks). ProtocolError (rate_limited) when the budget cannot pay."""
        prompt = fixed_prompt(settings.instructions, settings.tools, settings.tool_choice)
        if prompt != self.prompted:
            self._charge_text([(prompt, self.session.text_budget.burst - MIN_TEXT_COST)])
            self.prompted = prompt

    def _apply(self, before: Settings, after: Settings) -> None:
        """New settings, to the session (on its thread, in order with the turns it starts) and its ears."""
        session = self.session

        def apply() -> None:  # on the session's thread, in order with the turns it starts
            session.voice, session.output_audio = after.voice, after.audio_out
            session.instructions = after.instructions or None
            choose_tools(session, after.tool_choice, after.tools)
            session.max_tokens = after.max_output_tokens

        session.actor.call(apply)
        if after.input_format != before.input_format:
            self.audio.flush()  # the buffer so far was resampled from the old format's rate
        if after.turn_detection != before.turn_detection:
            self._retune(before.turn_detection, after.turn_detection)

    def _retune(self, before: TurnDetection | None, after: TurnDetection | None) -> None:
        session, config = self.session, self.front.config

        def apply() -> None:
            if after is not None:
                session.listener.segmenter.tune(after.threshold, after.silence_duration_ms, after.prefix_padding_ms)
                threshold = EAGER_THRESHOLD.get(after.eagerness) if after.type == "semantic_vad" else None
                session.turns.rules = dataclasses.replace(
                    session.turns.rules, complete_threshold=threshold or config.turn.complete_threshold)
            if (before is None) != (after is None):  # to or from push-to-talk: what was half heard is dropped
                self._drop_half_heard()

        session.actor.call(apply)
        self.audio.clear()

    def _charge_audio(self, seconds: float) -> None:
        """The client's own audio (push-to-talk appends, input_audio parts) against the session's real-time budget,
        as the microphone's is, before it is decoded. A recorded clip may come at once (RateBudget.admit)."""
        budget = self.session.audio_budget
        if not budget.admit(seconds, time.monotonic()):
            self.front.metrics.audio_dropped.inc()
            raise ProtocolError("audio_overrun", f"audio may come at most {budget.rate:g} times as fast as real time "
                                f"(a longer clip, up to {self.audio.max_audio_s:g} s, in one event once the budget is "
                                f"full again); these {seconds:.2f} s were refused: wait a moment")

    def on_input_audio_buffer_append(self, event: dict) -> None:
        kind, audio = self.settings.input_format, event.get("audio")
        if self.settings.turn_detection is None:  # (the VAD's audio is charged by admit_audio)
            seconds = audio_seconds(audio, kind)
            self.audio.room_for(seconds)
            self._charge_audio(seconds)
        pcm = decode_audio(audio, kind, self.front.config.limits.max_frame_bytes)
        rate = FORMATS[kind]
        self.count_audio(len(pcm), rate)
        if self.settings.turn_detection is not None:
            self.front.admit_audio(self.session, pcm, rate)
            return
        self.audio.append(pcm, rate)

    def on_input_audio_buffer_commit(self, event: dict) -> None:
        if self.settings.turn_detection is not None:
            session = self.session

            def end_now() -> None:
                heard = session.listener.end_now(time.monotonic()) if session.turns.user_speaking else []
                if not heard:
                    self.conversation.error("input_audio_buffer_commit_empty", "there is no speech to commit",
                                            None, event.get("event_id"))
                for e in heard:
                    session.actor.follow(e)

            session.actor.call(end_now)
            return
        speech = self.audio.commit()
        item = Item(new_id("item"), "message", "user", content=[{"type": "input_audio", "transcript": None}],
                    speech=speech)
        previous = self.conversation.items[-1].id if self.conversation.items else None
        self.conversation.send({"type": "input_audio_buffer.committed", "previous_item_id": previous,
                                "item_id": item.id})
        self._hold(item)

    def on_input_audio_buffer_clear(self, _event: dict) -> None:
        self.audio.clear()
        if self.settings.turn_detection is not None:
            self.session.actor.call(self._drop_half_heard)
        self.conversation.send({"type": "input_audio_buffer.cleared"})

    def _drop_half_heard(self) -> None:
        """On the session's thread: the VAD starts afresh, and the turn machine forgets speech it was hearing."""
        session = self.session
        session.listener.reset()
        if session.turns.user_speaking:
            session.actor.follow(SpeechDropped(time.monotonic()))

    def on_transcription_session_update(self, _event: dict) -> None:
        raise ProtocolError("unsupported", "transcription-only sessions are not served here", "type")

    def _session_json(self) -> dict[str, Any]:
        return session_summary(self.front, self.settings, self.sid)
