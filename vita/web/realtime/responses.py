"""A Realtime session's conversation items and responses: the client's items (messages, audio, function results)
held for the next response, read back, deleted and truncated, and ``response.create`` / ``response.cancel``.

A part of RealtimeSession (vita/web/realtime/session.py): its methods run on the connection's thread, with the
session's own (``front``, ``session``, ``settings``, ``conversation``, ``pending``, ``_charge_settings``…).
"""

from __future__ import annotations

import functools
import json
import logging
import time

import numpy as np
import soxr

from vita.capacity import CHARS_PER_TOKEN
from vita.hearing.vad import SAMPLE_RATE
from vita.messages import CameraFrame, ClientTool, ToolOutput
from vita.text_cost import FUNCTIONS_SHOWN_TOKENS
from vita.turns.sessions import MIN_TEXT_COST
from vita.turns.turn_control import FRAME_SEND_EVERY_S
from vita.turns.turn_events import InputCommitted, Speech, joined
from vita.web.realtime.conversation import Item
from vita.web.realtime.items import heard_part, read_message_content
from vita.web.realtime.protocol import (
    FORMATS,
    ProtocolError,
    ToolChoice,
    audio_seconds,
    check_tool_choice,
    decode_audio,
    new_id,
    read_response_options,
)
from vita.web.realtime.settings import choose_tools

log = logging.getLogger("vita.web.realtime.session")
MAX_PENDING_ITEMS = 64  # client items waiting for one response


def fixed_prompt(instructions: str, tools: tuple[ClientTool, ...], choice: ToolChoice) -> str:
    """What a turn's prompt opens with, the same every turn: the instructions and the functions offered (both in
    the engine's cached prefix: workers/llm/kit.py)."""
    offered = () if choice.mode == "none" else tools
    return json.dumps([instructions, [[t.name, t.description, t.parameters] for t in offered]], ensure_ascii=False)


class ItemsAndResponses:
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
