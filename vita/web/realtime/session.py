"""``/v1/realtime``: OpenAI's Realtime protocol over a plain WebSocket on the front, beside Socket.IO.

A Realtime client is a session like any other (one seat of --max_users, the idle timeout, the access token, the
same mailbox, turn machine, workers and reply pacing); only its wire differs. Its events are read in order on its
connection's thread, as Socket.IO's are; what the turn machine says back goes through the session's
``RealtimeConversation`` (vita/web/realtime/conversation.py), the Realtime door's serializer of client events.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import soxr

from vita.capacity import CHARS_PER_TOKEN
from vita.client_events import ClientEvent, TurnStarted
from vita.hearing.vad import SAMPLE_RATE
from vita.messages import CameraFrame, ClientTool, ToolOutput
from vita.ops.logs import turn_ids
from vita.rate_budget import RateBudget
from vita.text_cost import FUNCTIONS_SHOWN_TOKENS
from vita.turns.sessions import MIN_TEXT_COST
from vita.turns.turn_control import FRAME_SEND_EVERY_S
from vita.turns.turn_events import InputCommitted, Speech, SpeechDropped, joined
from vita.web.http.web_security import client_address
from vita.web.realtime.audio_buffer import PushToTalkBuffer
from vita.web.realtime.conversation import Item, RealtimeConversation
from vita.web.realtime.items import heard_part, read_message_content
from vita.web.realtime.protocol import (
    EAGER_THRESHOLD,
    FORMATS,
    ProtocolError,
    Settings,
    ToolChoice,
    TurnDetection,
    audio_seconds,
    check_tool_choice,
    decode_audio,
    new_id,
    parse_event,
    read_response_options,
    updated,
)
from vita.web.realtime.settings import choose_tools, first_settings, refuse_push_to_talk, session_summary

if TYPE_CHECKING:
    from vita.web.front_host import SessionHost

log = logging.getLogger("vita.web.realtime.session")
MAX_PENDING_ITEMS = 64  # client items waiting for one response
# Refusals a client draws by sending more than its budgets allow: counted, as on the Socket.IO door, and a client
# that goes on drawing them is closed (App.refused_too_often). A malformed event is answered and not counted: an
# SDK exploring the protocol sends those, and they are rate-limited as events.
UPDATES_PER_S, UPDATES_BURST = 2.0, 20.0
OVER_BUDGET = frozenset({"audio_overrun", "rate_limited", "too_many_items"})


def fixed_prompt(instructions: str, tools: tuple[ClientTool, ...], choice: ToolChoice) -> str:
    """What a turn's prompt opens with, the same every turn: the instructions and the functions offered (both in
    the engine's cached prefix: workers/llm/kit.py)."""
    offered = () if choice.mode == "none" else tools
    return json.dumps([instructions, [[t.name, t.description, t.parameters] for t in offered]], ensure_ascii=False)


class RealtimeSession:
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
            with contextlib.suppress(Exception):
                self.ws.ws.sock.shutdown(socket.SHUT_RDWR)

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
        rtc = self.front.rtc
        peer = rtc.peer(self.sid) if rtc is not None and self.conversation.webrtc else None
        return peer if peer is not None and peer.connected else None

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

    def _hold(self, item: Item) -> None:
        """A client item the next response answers."""
        if len(self.pending) >= MAX_PENDING_ITEMS:
            raise ProtocolError("too_many_items", f"at most {MAX_PENDING_ITEMS} items wait for a response")
        self.pending.append(item)
        self.conversation.add_item(item)

    def on_conversation_item_create(self, event: dict) -> None:
        item = event.get("item")
        if not isinstance(item, dict):
            raise ProtocolError("invalid_value", "item must be an object", "item")
        previous = event.get("previous_item_id")
        items = self.conversation.items
        if previous is not None and (not items or previous != items[-1].id):
            raise ProtocolError("unsupported", "items can only be added at the end of the conversation here",
                                "previous_item_id")
        kind = item.get("type", "message")
        item_id = item.get("id") if isinstance(item.get("id"), str) and 0 < len(item["id"]) <= 64 else new_id("item")
        if self.conversation.item(item_id) is not None:
            raise ProtocolError("invalid_value", f"an item with id {item_id!r} exists already", "item.id")
        if kind == "function_call_output":
            self._tool_output(item, item_id)
        elif kind == "message" and item.get("role") == "user":
            self._user_message(item, item_id)
        else:
            raise ProtocolError("unsupported", "only user messages and function_call_output items can be added here "
                                "(the assistant's items are its own turns)", "item.type")

    def _user_message(self, item: dict, item_id: str) -> None:
        limits = self.front.config.limits
        read = read_message_content(item.get("content"), sum(len(i.images) for i in self.pending),
                                    limits.max_frame_bytes, limits.max_image_pixels, self.session.image_budget)
        kind_in, parts, clips, images = self.settings.input_format, read.parts, read.clips, read.images
        text = read.text
        limit = limits.max_text_chars
        if len(" ".join([*(i.text for i in self.pending), text])) > limit:
            raise ProtocolError("text_too_long", f"text waiting for a response is at most {limit} characters")
        speech = None
        if clips:
            seconds = sum(audio_seconds(clip, kind_in) for clip in clips)
            self.audio.room_for(seconds)
            self._charge_audio(seconds)
            max_bytes = self.front.config.limits.max_frame_bytes
            pcm = np.concatenate([decode_audio(clip, kind_in, max_bytes) for clip in clips])
            pcm = soxr.resample(pcm, FORMATS[kind_in], SAMPLE_RATE).astype(np.int16)  # one stream: no seams
            self.audio.hold(len(pcm))
            now = time.monotonic()
            speech = Speech(pcm.tobytes(), now - len(pcm) / SAMPLE_RATE, now, {"audio_s": len(pcm) / SAMPLE_RATE})
        parts.sort(key=lambda p: p["type"] != "input_audio")  # the heard words first, as the turn joins them
        self._hold(Item(item_id, "message", "user", content=parts, speech=speech, images=tuple(images)))
        now = time.monotonic()
        if images and now - self.session.frame_sent_at >= FRAME_SEND_EVERY_S:  # as the camera's while one speaks
            self.session.frame_sent_at = now  # the newest is analysed now, ready when the response asks about it
            self.front.turns.put("requests", CameraFrame(self.session.sid, images[-1]))

    def _tool_output(self, item: dict, item_id: str) -> None:
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or call_id not in self.conversation.calls:
            raise ProtocolError("invalid_value", "call_id must name a function call this session made", "item.call_id")
        if not isinstance(output, str) or len(output) > self.front.config.limits.max_text_chars * 4:
            raise ProtocolError("invalid_value", "output must be a string (at most "
                                f"{self.front.config.limits.max_text_chars * 4} characters)", "item.output")
        del self.conversation.calls[call_id]
        self._hold(Item(item_id, "function_call_output", call_id=call_id, output=output,
                        tool_output=ToolOutput(call_id, output)))

    def _item(self, event: dict) -> Item:
        item = self.conversation.item(event.get("item_id"))
        if item is None:
            raise ProtocolError("item_not_found", f"no item {str(event.get('item_id'))[:64]!r} in this conversation",
                                "item_id")
        return item

    def on_conversation_item_retrieve(self, event: dict) -> None:
        item = self._item(event)
        self.conversation.send({"type": "conversation.item.retrieved", "item": item.as_json()})

    def on_conversation_item_delete(self, event: dict) -> None:
        item = self._item(event)
        if item in self.pending:  # not asked about after all
            self.pending.remove(item)
            self.audio.release(len(item.speech.pcm) // 2 if item.speech else 0)
        elif item.turn_id is not None:  # its turn's exchange leaves the model's history
            self.front.turns.edit_history(self.session, item.turn_id, None)
        self.conversation.forget(item)

    def on_conversation_item_truncate(self, event: dict) -> None:
        item = self._item(event)
        end_ms = event.get("audio_end_ms")
        if item.role != "assistant" or not item.content or item.content[0].get("type") != "output_audio":
            raise ProtocolError("invalid_value", "only an assistant message with audio can be truncated", "item_id")
        if isinstance(end_ms, bool) or not isinstance(end_ms, int) or not 0 <= end_ms <= item.audio_ms + 1:
            raise ProtocolError("invalid_value", f"audio_end_ms must be from 0 to the item's {item.audio_ms:.0f} ms",
                                "audio_end_ms")
        with self.conversation.lock:  # the reply may still be playing: its text so far
            response = self.conversation.response
            text = response.text if response is not None and response.message is item else \
                item.content[0].get("transcript") or ""
            heard = heard_part(text, end_ms / item.audio_ms if item.audio_ms else 1.0)
            item.content[0]["transcript"] = heard
        if item.turn_id is not None:
            self.front.turns.edit_history(self.session, item.turn_id, heard)
        self.conversation.send({"type": "conversation.item.truncated", "item_id": item.id, "content_index": 0,
                                "audio_end_ms": end_ms})

    def on_response_create(self, event: dict) -> None:
        asked = read_response_options(event.get("response"), self.front.config.llm.max_tokens)
        audio, override = asked.audio, asked.instructions  # this response's, else the session's
        limit = self.settings.max_output_tokens if asked.max_tokens is None else asked.max_tokens
        choice, tools = asked.tool_choice, self.settings.tools
        if choice is not None:
            check_tool_choice(choice, tools, "response.tool_choice")
        if self.requested or self.conversation.active():
            raise ProtocolError("conversation_already_has_active_response",
                                "a response is in progress; cancel it or wait for response.done")
        items = self.pending
        speeches = [i.speech for i in items if i.speech is not None]
        text = " ".join(t for t in (i.text for i in items) if t)
        outputs = tuple(i.tool_output for i in items if i.tool_output is not None)
        if not speeches and not text and not outputs:
            raise ProtocolError("no_input", "nothing new to respond to: add a user item, commit audio, or give a "
                                "function call's output first")
        # The prompt's fixed part: the instructions and the functions (workers/llm/kit.py puts both in the cached
        # prefix). A new one costs at most a whole burst: a client whose long prompt never changes pays once and is
        # not locked out for minutes, and one that changes a long prompt each time gets one response a burst.
        prompt = fixed_prompt(override or self.settings.instructions, tools, choice or self.settings.tool_choice)
        # Its texts, a new fixed prompt (at most a burst), and the functions shown beside its question: never
        # cached, read again each response (vita/text_cost.FUNCTIONS_SHOWN_TOKENS).
        texts: list[tuple[str, float | None]] = [(text, None), *((o.output, None) for o in outputs)]
        if prompt != self.prompted:
            texts.append((prompt, self.session.text_budget.burst))
        # (a whole section's worth, whatever their size: what the worker may show, in the template's words; none
        # beside a turn that brings the client's results: the worker shows none there)
        shown = FUNCTIONS_SHOWN_TOKENS * CHARS_PER_TOKEN if tools and not outputs and (
            choice or self.settings.tool_choice).mode != "none" else 0.0
        self._charge_text(texts, shown)
        # (joined only once charged: a refused response, sent again and again, must cost nothing more)
        speech = functools.reduce(joined, speeches) if speeches else None
        self.prompted, self.pending = prompt, []
        self.audio.release(sum(len(s.pcm) // 2 for s in speeches))
        self.requested = True
        with self.conversation.lock:
            self.conversation.claimed, self.conversation.claimed_audio = items, audio
            self.conversation.claimed_max_tokens = limit
        session = self.session

        images = [image for i in items for image in i.images]
        for item in items:  # (their audio and pictures kept no longer than this: the conversation keeps hundreds of
            item.images, item.speech = (), None  # items, and 300 responses of 30 s clips kept 288 MB)

        def begin() -> None:  # on the session's thread, right before the turn starts: its own outputs, instructions
            session.tool_outputs = outputs
            for image in images:  # the items' pictures are what the camera shows this turn
                session.frames.add(image, time.monotonic())
            if override:
                session.instructions = override
            if audio is not None:  # a text-only answer in a voice session synthesizes no voice (and the reverse)
                session.output_audio = audio
            session.max_tokens = limit
            if choice is not None:
                choose_tools(session, choice, tools)

        def end() -> None:  # after the turn has started: the session's own settings again
            session.instructions = self.settings.instructions or None
            session.output_audio = self.settings.audio_out
            session.max_tokens = self.settings.max_output_tokens
            choose_tools(session, self.settings.tool_choice, self.settings.tools)

        session.actor.call(begin)
        self.front.turns.post(session, InputCommitted(time.monotonic(), speech, text))
        if override or audio is not None or limit != self.settings.max_output_tokens or choice is not None:
            session.actor.call(end)

    def _charge_text(self, texts: list[tuple[str, float | None]], extra: float = 0.0) -> None:
        """A response starts a turn, as a typed Socket.IO message does: the text it brings the prompt (typed items,
        tool results, its instructions and functions when they are new; unchanged ones are the engine's cached
        prefix) is charged to the same budget, in the model's tokens (vita/text_cost.py), at the same least
        cost; (text, cap): a text charged at most its cap."""
        budget = self.session.text_budget
        if not self.session.charge_texts(texts, self.front.text_cost, time.monotonic(), whole=True,
                                         least=MIN_TEXT_COST, extra=extra):
            raise ProtocolError("rate_limited", f"new text for the model (typed items, function results, new "
                                f"instructions or functions) may come at {budget.rate:g} characters a second "
                                f"({budget.burst:g} at once, counted four to a token; a response costs at least "
                                f"{MIN_TEXT_COST}): wait a moment")

    def on_response_cancel(self, _event: dict) -> None:
        if not self.conversation.active() and not self.requested:
            raise ProtocolError("response_cancel_not_active", "there is no response in progress to cancel")
        self.front.turns.interrupt(self.session, "client_cancelled")

    def on_output_audio_buffer_clear(self, _event: dict) -> None:
        """A call's client stops the reply it hears (the track is emptied: output_audio_buffer.cleared)."""
        if not self.conversation.webrtc:
            raise ProtocolError("unsupported", "output_audio_buffer.clear is for WebRTC calls: over a WebSocket the "
                                "client holds the audio it was sent (use response.cancel)", "type")
        self.front.turns.interrupt(self.session, "client_cancelled")

    def on_transcription_session_update(self, _event: dict) -> None:
        raise ProtocolError("unsupported", "transcription-only sessions are not served here", "type")

    def _session_json(self) -> dict[str, Any]:
        return session_summary(self.front, self.settings, self.sid)
