"""What one Realtime client may make the server do: its own audio (push-to-talk, audio items) within the session's
real-time budget and an utterance's length, a response's text within the typed-text budget, items of a bounded
number of parts, events of a bounded depth. A RealtimeSession on a stand-in front: no model, no server."""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from types import SimpleNamespace

import numpy as np
import pytest

import vita.web.realtime.responses as responses
import vita.web.realtime.session as realtime
from vita.client_events import StateChanged, TurnStarted
from vita.config import Config
from vita.rate_budget import RateBudget
from vita.text_cost import TextCost, local_tokenizer_file
from vita.turns.sessions import Session
from vita.turns.turn_events import InputCommitted
from vita.web.realtime.protocol import (
    MAX_CONTENT_PARTS,
    MAX_INSTRUCTIONS_CHARS,
    MAX_JSON_CONTAINERS,
    MAX_JSON_DEPTH,
    json_shape,
)
from vita.web.realtime.session import RealtimeSession

pytestmark = pytest.mark.fast


class Counter:
    def __init__(self):
        self.value = 0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def labels(self, *_values: str) -> Counter:
        return self


class Front:
    """What a RealtimeSession uses of its SessionHost; the session's thread is not run (its calls are only kept)."""

    def __init__(self):
        self.config = Config()
        self.voices, self.llm_choice = ["joe-us"], {"model": "vita"}
        self.metrics = SimpleNamespace(audio_dropped=Counter())
        self.turns = SimpleNamespace(posted=[], post=lambda _session, event: self.turns.posted.append(event),
                                     interrupt=lambda _session, _reason: None, put=lambda _queue, _message: None)
        self.heard: list[np.ndarray] = []
        self.text_cost = TextCost(local_tokenizer_file(self.config))
        self.refusals = 0
        self.rtc = None

    def session_allows_event(self, _session) -> bool:
        return True

    def refused_too_often(self, _session) -> bool:
        self.refusals += 1
        return False

    def admit_audio(self, _session, pcm, _rate) -> bool:
        self.heard.append(pcm)
        return True


class Client:
    """A RealtimeSession and what it sent back."""

    def __init__(self, push_to_talk: bool = False):
        self.front, self.sent = Front(), []
        self.rt = RealtimeSession(self.front, SimpleNamespace(send=lambda text: self.sent.append(json.loads(text))),
                                  "gpt-realtime", {})
        self.rt.session = Session(self.rt.sid, actor=SimpleNamespace(call=lambda _fn: None))
        if push_to_talk:
            update = {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}
            assert self.send(update) == [] and self.rt.settings.turn_detection is None

    def send(self, event: dict | str | bytes) -> list[dict]:
        """The event, and the errors it was answered with."""
        before = len(self.sent)
        self.rt.receive(event if isinstance(event, str | bytes) else json.dumps(event))
        return [e["error"] for e in self.sent[before:] if e["type"] == "error"]

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.sent if e["type"] == kind]


def clip(seconds: float, rate: int = 24000) -> str:
    """That much audio/pcm, base64 (a quiet tone)."""
    t = np.arange(int(seconds * rate)) / rate
    return base64.b64encode((1000 * np.sin(2 * np.pi * 220 * t)).astype("<i2").tobytes()).decode("ascii")


def audio_item(*seconds: float) -> dict:
    return {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_audio", "audio": clip(s)} for s in seconds]}}


def text_item(text: str) -> dict:
    return {"type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}


def answered(c: Client, turn_id: int) -> None:
    """The turn machine starts the response's turn and ends it (what the front would emit)."""
    c.rt.tell(TurnStarted(turn_id=turn_id, source="text"))
    c.rt.tell(StateChanged(state="listening", turn_id=turn_id))
    assert not c.rt.conversation.active()


def test_admit_takes_a_whole_clip_from_a_full_budget_then_the_debt_is_paid_first():
    budget = RateBudget(rate=1.5, burst=3.0, now=0.0)
    assert budget.admit(2.0, 0.0) and not budget.admit(2.0, 0.0)  # within the burst: as take
    assert not budget.admit(20.0, 1.0)  # more than a burst: only from a full budget
    assert budget.admit(20.0, 10.0)
    assert not budget.admit(0.1, 20.0)  # 17 s of debt: paid off at 1.5 s a second, about 11 s
    assert budget.admit(0.1, 22.0)


def test_push_to_talk_appends_are_charged_to_the_sessions_audio_budget():
    c = Client(push_to_talk=True)
    assert c.send({"type": "input_audio_buffer.append", "audio": clip(2.5), "event_id": "a1"}) == []
    (error,) = c.send({"type": "input_audio_buffer.append", "audio": clip(2.5), "event_id": "a2"})
    assert error["code"] == "audio_overrun" and error["event_id"] == "a2" and error["type"] == "invalid_request_error"
    assert c.front.metrics.audio_dropped.value == 1
    assert c.front.refusals == 1  # counted: a client that goes on drawing refusals is closed
    assert c.rt.audio.waiting / 16000 == pytest.approx(2.5, abs=0.05)  # the refused audio is not in the buffer
    assert c.send({"type": "input_audio_buffer.commit"}) == []
    assert c.of("input_audio_buffer.committed")


def test_a_recorded_clip_comes_at_once_up_to_the_utterance_cap_and_is_paid_off_after():
    c = Client(push_to_talk=True)
    cap = c.front.config.vad.max_utterance_s
    (error,) = c.send({"type": "input_audio_buffer.append", "audio": clip(cap + 1)})
    assert error["code"] == "input_audio_buffer_full" and f"at most {cap:g} s" in error["message"]
    assert c.send({"type": "input_audio_buffer.append", "audio": clip(cap - 5)}) == []  # the refusal cost nothing
    (full,) = c.send({"type": "input_audio_buffer.append", "audio": clip(6)})
    assert full["code"] == "input_audio_buffer_full"
    (over,) = c.send({"type": "input_audio_buffer.append", "audio": clip(0.5)})  # within the cap, not the budget
    assert over["code"] == "audio_overrun"
    assert c.send({"type": "input_audio_buffer.commit"}) == []
    (item,) = c.of("conversation.item.added")
    assert c.rt.pending[0].speech.details["audio_s"] == pytest.approx(cap - 5, abs=0.05)
    assert item["item"]["id"] == c.rt.pending[0].id


def test_an_items_audio_is_counted_capped_and_charged_before_it_is_decoded(monkeypatch):
    decoded = []
    decode = responses.decode_audio
    monkeypatch.setattr(responses, "decode_audio", lambda *args: decoded.append(args) or decode(*args))
    c = Client()
    (parts,) = c.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_audio", "audio": "AAA="}] * (MAX_CONTENT_PARTS + 1)}})
    assert parts["code"] == "too_many_parts" and parts["param"] == "item.content"
    cap = c.front.config.vad.max_utterance_s
    (long,) = c.send(audio_item(cap / 2 + 0.5, cap / 2 + 0.5))
    assert long["code"] == "input_audio_buffer_full" and f"at most {cap:g} s" in long["message"]
    assert decoded == []  # neither was decoded
    assert c.send(audio_item(1.0, 1.5)) == []
    (over,) = c.send(audio_item(2.5))
    assert over["code"] == "audio_overrun"
    assert len(decoded) == 2  # the accepted item's two parts only
    (item,) = c.of("conversation.item.added")
    assert len(c.rt.pending) == 1 and c.rt.pending[0].speech.details["audio_s"] == pytest.approx(2.5, abs=0.01)
    assert item["item"]["content"] == [{"type": "input_audio", "transcript": None}] * 2


def test_a_response_is_charged_the_text_it_brings_and_new_instructions_with_it():
    c = Client()
    prompt = "Answer in French. " * 160  # 2,880 characters
    c.send(text_item("Hello"))
    assert c.send({"type": "response.create", "response": {"instructions": prompt}}) == []
    answered(c, 1)
    c.send(text_item("Again"))
    assert c.send({"type": "response.create", "response": {"instructions": prompt}}) == []  # unchanged: the text
    answered(c, 2)
    c.send(text_item("Once more"))
    (error,) = c.send({"type": "response.create", "response": {"instructions": prompt.upper()}, "event_id": "r3"})
    assert error["code"] == "rate_limited" and error["event_id"] == "r3"
    assert len(c.rt.pending) == 1  # the item still waits for a response
    assert [type(e) for e in c.front.turns.posted] == [InputCommitted, InputCommitted]


def test_a_sessions_functions_are_charged_when_they_change_and_what_is_shown_beside_a_question_each_time():
    """They are part of the prompt's cached prefix (workers/llm/kit.py): paid for once, again only when changed;
    those shown beside a question are read again each response: charged each time, a whole section's worth."""
    from vita.text_cost import FUNCTIONS_SHOWN_TOKENS

    def functions(description: str) -> dict:
        return {"type": "session.update", "session": {"tools": [
            {"type": "function", "name": f"tool_{n}", "description": description,
             "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}} for n in range(3)]}}

    c = Client()
    budget = c.rt.session.text_budget
    budget.burst = budget.left = 100_000.0  # (room to see each charge)

    def spent_by(event: dict) -> float:
        before = budget.available(time.monotonic())
        assert c.send(event) == []
        return before - budget.available(time.monotonic())

    assert spent_by(functions("Looks something up in the shop's records. " * 20)) > 2000  # ~2,600 characters
    beside = FUNCTIONS_SHOWN_TOKENS * 4
    c.send(text_item("Hello"))
    assert spent_by({"type": "response.create"}) == pytest.approx(len("Hello") + beside, abs=5)
    answered(c, 1)
    c.send(text_item("Again"))
    assert spent_by({"type": "response.create"}) == pytest.approx(len("Again") + beside, abs=5)  # no new prompt
    answered(c, 2)
    c.send(text_item("And without them"))
    assert spent_by({"type": "response.create", "response": {"tool_choice": "none"}}) < 200 + 5  # (the
    # functions are not shown: the prompt without them is a new one, but shorter than the least cost)
    answered(c, 3)
    assert spent_by(functions("Looks something else up in the shop's records. " * 20)) > 2000  # changed


def test_new_instructions_or_functions_are_charged_when_set_for_the_turns_the_vad_starts():
    """A turn the server's VAD starts has no response.create to charge: a session.update that changes the prompt's
    fixed part pays for it, leaving room for one response right after."""
    c = Client()
    assert c.send({"type": "session.update", "session": {"instructions": "Answer in French. " * 250}}) == []
    c.send(text_item("Hello"))
    assert c.send({"type": "response.create"}) == []  # the update's charge left room for it
    answered(c, 1)
    (error,) = c.send({"type": "session.update", "session": {"instructions": "Answer in German. " * 250}})
    assert error["code"] == "rate_limited"
    assert c.rt.settings.instructions.startswith("Answer in French.")  # refused: nothing of it applied


def tiny_jpeg() -> bytes:
    import cv2

    ok, data = cv2.imencode(".jpg", np.full((48, 64, 3), 120, np.uint8))
    assert ok
    return data.tobytes()


def test_a_responses_audio_and_pictures_are_not_kept_with_its_items_and_an_images_detail_is_checked():
    c = Client()
    jpeg = "data:image/jpeg;base64," + base64.b64encode(tiny_jpeg()).decode()
    (error,) = c.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": jpeg, "detail": "x" * 100_000}]}})
    assert error["code"] == "invalid_value" and error["param"] == "item.content[0].detail"
    assert c.send(audio_item(1.0)) == []
    assert c.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": jpeg, "detail": "low"}]}}) == []
    items = list(c.rt.pending)
    assert items[0].speech is not None and items[1].images
    assert c.send({"type": "response.create"}) == []
    assert all(i.speech is None and not i.images for i in items)


def test_a_response_with_the_longest_instructions_is_taken_once_then_paid_for():
    c = Client()
    c.send(text_item("Hello"))
    (error,) = c.send({"type": "response.create", "response": {"instructions": "x" * (MAX_INSTRUCTIONS_CHARS + 1)}})
    assert error["code"] == "invalid_value" and error["param"] == "response.instructions"
    assert c.send({"type": "response.create", "response": {"instructions": "x" * MAX_INSTRUCTIONS_CHARS}}) == []
    answered(c, 1)
    c.send(text_item("Hello again"))
    (error,) = c.send({"type": "response.create", "response": {"instructions": "x" * MAX_INSTRUCTIONS_CHARS}})
    assert error["code"] == "rate_limited"  # unchanged instructions, yet the debt of the first is not paid off


def test_json_shape_does_not_count_the_brackets_of_strings():
    assert json_shape(b'{"a": [1, {"b": []}]}') == (4, 4)
    assert json_shape(b'{"a": "[[[[{{{{", "b": "\\"[[[", "c": "\\\\"}') == (1, 1)
    assert json_shape(b"[" * 100 + b"]" * 100) == (100, 100)
    assert json_shape(b'"\\"' * 200_000) == (0, 0)  # an unterminated string of escapes: still one linear pass


def test_an_event_of_tens_of_thousands_of_tiny_objects_is_refused_before_it_is_parsed(monkeypatch):
    c = Client()
    built = []  # what the protocol module's json.loads was given
    monkeypatch.setattr("vita.web.realtime.protocol.json", SimpleNamespace(
        loads=lambda data: built.append(len(data)) or json.loads(data), dumps=json.dumps))
    parts = [{"type": "input_audio", "audio": "AAAAAA=="}] * 40_000  # 2 MB of empty parts
    (error,) = c.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": parts}}))
    assert error["code"] == "invalid_json" and f"at most {MAX_JSON_CONTAINERS}" in error["message"], error
    assert max(built, default=0) < 100_000  # the item never reached the parser
    tools = [{"type": "function", "name": f"tool_{i}", "parameters": {"type": "object", "properties": {
        f"p{j}": {"type": "string", "description": "[not a bracket that counts]"} for j in range(12)}}}
        for i in range(64)]  # the most tools a session may have, each with a dozen parameters: ~900 objects
    assert c.send({"type": "session.update", "session": {"type": "realtime", "tools": tools}}) == [] or all(
        e.get("code") != "invalid_json" for e in c.of("error"))


def test_over_deep_json_is_refused_cleanly_and_legitimate_nesting_is_not(caplog):
    c = Client()
    with caplog.at_level(logging.ERROR, logger="vita.web.realtime.session"):
        for deep in ("[" * 100_000 + "]" * 100_000,
                     json.dumps({"type": "session.update", "session": {"metadata": nest(MAX_JSON_DEPTH)}})):
            (error,) = c.send(deep)
            assert error["code"] == "invalid_json" and error["type"] == "invalid_request_error", error
            assert f"deeper than {MAX_JSON_DEPTH}" in error["message"]
        # Bytes are UTF-8: in UTF-16 a character such as "\u2200" would read as a quote to the bounds' scan.
        foreign = json.dumps({"type": "session.update", "session": {"metadata": {"k": "\u2200"}},
                              "hidden": [{}] * 5000}, ensure_ascii=False)  # past the quote it reads: 5,000 objects
        (error,) = c.send(foreign.encode("utf-16-le"))
        assert error["code"] == "invalid_json", error
    assert "Realtime event failed" not in caplog.text and "Traceback" not in caplog.text
    # Brackets in text are no nesting, and a tool's nested schema is within the limit.
    assert c.send(text_item("[" * 500 + "{" * 500)) == []
    schema = {"type": "object", "properties": {"a": nest(MAX_JSON_DEPTH - 8)}}
    assert c.send({"type": "session.update", "session": {"tools": [{"type": "function", "name": "f",
                                                                    "parameters": schema}]}}) == []


def nest(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_images_waiting_for_a_response_are_bounded_sent_once_and_not_kept():
    """input_image parts: at most four wait for one response; the newest goes to the vision stage at once (at most
    about once a second); once a response takes them, no item keeps them (the conversation keeps hundreds)."""
    import cv2

    ok, data = cv2.imencode(".jpg", np.full((48, 64, 3), 120, np.uint8))
    url = "data:image/jpeg;base64," + base64.b64encode(data.tobytes()).decode()
    client = Client()
    put = []
    client.front.turns.put = lambda queue, message: put.append(message) or True

    def item(images: int) -> dict:
        return {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is this?"}, *[{"type": "input_image", "image_url": url}] * images]}}

    assert client.send(item(3)) == []
    assert len(put) == 1 and put[0].picture.image == data.tobytes()
    assert [e["code"] for e in client.send(item(2))] == ["too_many_images"]  # 3 + 2 > 4
    assert client.send(item(1)) == []
    assert len(put) == 1  # within the second: analysed when the response starts
    assert [e["code"] for e in client.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "https://x.test/a.jpg"}]}})
    ] == ["unsupported"]
    assert client.send({"type": "response.create"}) == []
    assert all(not i.images for i in client.rt.conversation.items)
    assert client.send(item(4)) == []  # the next response's pictures


def test_a_responses_own_modality_and_token_cap_apply_to_its_turn_only():
    c = Client()
    c.rt.session.actor = SimpleNamespace(call=lambda fn: fn())  # the session's thread, at once
    seen = []
    c.front.turns.post = lambda session, _event: seen.append((session.output_audio, session.max_tokens))
    c.send(text_item("Hello"))
    asked = {"output_modalities": ["text"], "max_output_tokens": 12}
    assert c.send({"type": "response.create", "response": asked}) == []
    assert seen == [(False, 12)]  # what the turn is asked with
    assert (c.rt.session.output_audio, c.rt.session.max_tokens) == (True, None)  # then the session's own again
    answered(c, 1)
    done = c.of("response.done")[-1]["response"]
    assert done["output_modalities"] == ["text"] and done["max_output_tokens"] == 12
    c.send(text_item("Again"))
    assert c.send({"type": "response.create", "response": {"max_output_tokens": "inf"}}) == []
    assert seen[-1] == (True, c.front.config.llm.max_tokens)  # "inf": the server's own cap, said as it is
    answered(c, 2)
    assert c.of("response.done")[-1]["response"]["max_output_tokens"] == c.front.config.llm.max_tokens
    for bad in (0, 5000, "many", True, 1.5):
        (error,) = c.send({"type": "response.create", "response": {"max_output_tokens": bad}})
        assert error["code"] == "invalid_value" and error["param"] == "response.max_output_tokens"
    assert c.send({"type": "session.update", "session": {"max_output_tokens": 40}}) == []
    assert c.of("session.updated")[-1]["session"]["max_output_tokens"] == 40 and c.rt.session.max_tokens == 40
    (error,) = c.send({"type": "session.update", "session": {"max_output_tokens": -1}})
    assert error["param"] == "session.max_output_tokens"


def test_a_malformed_event_is_answered_but_not_counted_as_a_refusal():
    c = Client()
    (error,) = c.send({"type": "no.such.event"})
    assert error["code"] == "invalid_event" and c.front.refusals == 0


class Channel:
    """What DataChannelWire uses of an aiortc data channel: its label, its handlers, close."""

    label, readyState, bufferedAmount = "oai-events", "open", 0

    def __init__(self):
        self.handlers, self.closed = {}, False

    def on(self, name):
        def register(handler):
            self.handlers[name] = handler
            return handler
        return register

    def close(self) -> None:
        self.closed = True


def test_a_calls_events_are_paced_in_bytes_and_a_caller_that_floods_on_is_hung_up():
    """The data channel is a WebSocket's equal: the same bytes a second; past them events are dropped, and a caller
    that goes on sending that fast is hung up (each message was decrypted on the loop that carries every call)."""
    from vita.web.realtime.call import DROPS_BEFORE_HANG_UP, DataChannelWire

    wire, channel = DataChannelWire(None, lambda: None, 10**6, 1.0, bytes_per_s=1000), Channel()
    wire.attach(channel)
    for _ in range(2 + DROPS_BEFORE_HANG_UP):
        channel.handlers["message"]("x" * 1000)
    assert [wire.inbox.get_nowait() for _ in range(2)] == ["x" * 1000] * 2  # the burst: two seconds' worth
    assert channel.closed and wire.inbox.get_nowait() is None  # then hung up: the session's reader sees the end


def test_instructions_and_functions_that_read_the_same_run_together_are_still_a_change():
    """Moved from a function into the instructions, the same characters make another prompt: charged."""
    c = Client()
    words = "Looks up the shop's records. " * 50  # 1,450 characters
    function = {"type": "function", "name": "f", "description": words, "parameters": {"type": "object"}}
    as_function = {"type": "session.update", "session": {"instructions": "", "tools": [function]}}
    as_instructions = {"type": "session.update", "session": {
        "instructions": "f" + words + json.dumps({"type": "object"}), "tools": []}}
    assert c.send(as_function) == [] and c.send(as_instructions) == []
    (error,) = c.send(as_function)
    assert error["code"] == "rate_limited"


def test_a_client_keys_instructions_are_charged_when_its_session_opens():
    """Settings bound at the start (a client key's, a call's offer) are what the VAD's turns use: charged as a
    session.update would be, and a client in debt cannot open sessions with new ones for free."""
    import dataclasses

    from vita.turns.sessions import SessionRegistry
    from vita.web.doors import Doorway
    from vita.web.realtime.protocol import ProtocolError
    from vita.web.realtime.settings import first_settings

    front = Front()
    front.sessions = SessionRegistry(max_users=4)
    front.metrics = SimpleNamespace(audio_dropped=Counter(), sessions_opened=Counter(), sessions_refused=Counter())
    front.turns.attach = lambda session: setattr(session, "actor", SimpleNamespace(call=lambda _fn: None))
    front.turns.detach = lambda _session: None
    front.doorway = Doorway(front)  # the real lifecycle, over this fake front
    environ = {"REMOTE_ADDR": "10.0.0.9"}

    def keyed(instructions: str) -> RealtimeSession:
        bound = dataclasses.replace(first_settings(front), instructions=instructions)
        return RealtimeSession(front, SimpleNamespace(send=lambda _text: None), "gpt-realtime", environ, bound)

    first = keyed("Answer in French. " * 200)  # 3,600 characters
    assert first.open() and first.session.text_budget.available(time.monotonic()) < 1000
    first.session.text_budget.spend(2000, time.monotonic())
    first.end()
    with pytest.raises(ProtocolError, match="wait a moment"):
        keyed("Answer in German. " * 200).open()
    assert len(front.sessions) == 0  # the seat given back


def test_a_responses_text_is_charged_in_the_models_tokens_not_its_characters():
    """300 private-use characters are 1,200 tokens: charged as 4,800 of the budget's characters, not 300."""
    c = Client()
    dense = chr(0xF0000) * 300
    assert c.front.text_cost(dense) == 300 * 16
    c.send(text_item(dense))
    assert c.send({"type": "response.create"}) == []  # (over a burst: taken from a full budget, then paid off)
    answered(c, 1)
    c.send(text_item("Hello"))
    (error,) = c.send({"type": "response.create"})
    assert error["code"] == "rate_limited"


def test_a_refused_response_does_not_join_its_pending_audio(monkeypatch):
    """Joining many items' audio is quadratic in their number: done only once the response is charged, so a
    response refused again and again costs nothing more."""
    joins = []
    monkeypatch.setattr(responses, "joined", lambda a, b: joins.append(1) or a)
    c = Client()
    for _ in range(3):
        assert c.send(audio_item(0.5)) == []
    c.rt.session.text_budget.spend(10_000, time.monotonic())  # in debt
    (error,) = c.send({"type": "response.create"})
    assert error["code"] == "rate_limited" and joins == []
    c.rt.session.text_budget.left = c.rt.session.text_budget.burst
    assert c.send({"type": "response.create"}) == [] and len(joins) == 2


def test_session_updates_are_paced_and_the_refusals_counted():
    """Each is read, checked, applied and its whole session sent back: a client may not send hundreds a second."""
    from vita.web.realtime.session import UPDATES_BURST

    c = Client()
    refused = [c.send({"type": "session.update", "session": {}}) for _ in range(int(UPDATES_BURST) + 5)]
    assert all(r == [] for r in refused[:int(UPDATES_BURST)])
    assert all(r and r[0]["code"] == "rate_limited" for r in refused[int(UPDATES_BURST):])
    assert c.front.refusals == 5  # counted towards closing a client that ignores them


def test_a_text_part_is_kept_as_the_model_reads_it_not_with_its_padding():
    """Its length is checked as the model reads it (stripped): kept so too, or 512 items of 1.9 MB of spaces
    around one letter were ~1 GB of the front's memory, and a retrieve sent each back whole."""
    c = Client()
    assert c.send(text_item(" " * 100_000 + "a" + "\n" * 100_000)) == []
    (item,) = c.rt.pending
    assert item.content == [{"type": "input_text", "text": "a"}] and item.text == "a"


def test_a_response_that_brings_function_results_is_not_charged_the_functions_section():
    """The worker shows no functions beside a turn that brings the client's results: a call's round trip (an
    update, the question, the result) fits the budget at once."""
    c = Client()
    function = {"type": "function", "name": "get_order_status", "description": "Where an order is.",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}
    assert c.send({"type": "session.update", "session": {"instructions": "You are a shop. " * 30,
                                                         "tools": [function]}}) == []
    c.send(text_item("Where is my order 4512?"))
    assert c.send({"type": "response.create"}) == []
    answered(c, 1)
    budget = c.rt.session.text_budget
    before = budget.available(time.monotonic())
    c.rt.pending.append(responses.Item("item_x", "function_call_output", tool_output=responses.ToolOutput(
        "call_1", "Shipped; it arrives on Friday.")))
    assert c.send({"type": "response.create"}) == []
    assert before - budget.available(time.monotonic()) == pytest.approx(200, abs=5)  # the least cost only


@pytest.mark.parametrize("message", ["x" * 2001, b"x" * 2001, "é" * 1001], ids=["text", "binary", "utf-8"])
def test_a_caller_sending_oversized_events_is_charged_for_them_and_hung_up_as_a_flooder_is(message):
    """A message over the size limit is dropped unread, but it was decrypted and reassembled on the loop that
    carries every call: it counts as a drop and against the byte budget, so such a caller is hung up too."""
    from vita.web.realtime.call import DROPS_BEFORE_HANG_UP, DataChannelWire

    wire, channel = DataChannelWire(None, lambda: None, 2000, 1.0, bytes_per_s=10**6), Channel()
    wire.attach(channel)
    for _ in range(DROPS_BEFORE_HANG_UP - 1):
        channel.handlers["message"](message)
    assert wire.inbox.empty() and not channel.closed and wire.budget.left < 2 * 10**6 - 60 * 2000
    channel.handlers["message"](message)
    assert channel.closed and wire.inbox.get_nowait() is None
    unpaced = DataChannelWire(None, lambda: None, 2000, 1.0)  # no byte budget: the drops alone count
    unpaced.attach(other := Channel())
    for _ in range(DROPS_BEFORE_HANG_UP):
        other.handlers["message"](message)
    assert other.closed


FUZZ_EXAMPLES = int(os.environ.get("VITA_FUZZ_EXAMPLES", "120"))  # a longer run: VITA_FUZZ_EXAMPLES=5000
EVENT_TYPES = ["session.update", "input_audio_buffer.append", "input_audio_buffer.commit",
               "input_audio_buffer.clear", "conversation.item.create", "conversation.item.retrieve",
               "conversation.item.delete", "conversation.item.truncate", "response.create", "response.cancel",
               "output_audio_buffer.clear", "transcription_session.update"]
FIELDS = ["session", "item", "audio", "item_id", "content_index", "audio_end_ms", "response", "event_id", "type",
          "content", "role", "text", "instructions", "tools", "tool_choice", "turn_detection", "voice", "modalities",
          "output_modalities", "max_output_tokens", "input", "output", "format", "call_id", "output_index", "name",
          "arguments", "image_url", "detail", "previous_item_id", "conversation", "metadata"]


def _json_values():
    from hypothesis import strategies as st

    leaves = (st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
              | st.text(max_size=40) | st.sampled_from(EVENT_TYPES + FIELDS + ["", "audio/pcm", "pcm16", "user",
                                                                               "message", "input_text", "auto"]))
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=5),
                        max_leaves=20)


def _events():
    from hypothesis import strategies as st

    shaped = st.builds(lambda kind, fields: json.dumps({"type": kind, **fields}), st.sampled_from(EVENT_TYPES),
                       st.dictionaries(st.sampled_from(FIELDS), _json_values(), max_size=5))
    mutated = st.tuples(shaped, st.integers(0, 400), st.binary(max_size=8)).map(
        lambda t: t[0].encode()[:t[1]] + t[2] + t[0].encode()[t[1]:])
    return shaped | mutated | st.binary(max_size=64) | st.text(max_size=64) | _json_values().map(json.dumps)


def test_random_and_mutated_client_events_get_a_clear_error_never_a_server_error(caplog):
    """Any bytes a Realtime client sends (WebSocket or data channel: the same `receive`) are answered as the
    protocol says, or with an error naming what is wrong; none reaches the catch-all that logs a bug."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(events=st_lists_of_events())
    def run(events: list) -> None:
        c = Client()
        for event in events:
            for error in c.send(event):
                assert error["code"] != "server_error" and error["message"], (event, error)

    with caplog.at_level(logging.ERROR, logger=realtime.log.name):
        run()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.records[:3]


def st_lists_of_events():
    from hypothesis import strategies as st

    return st.lists(_events(), min_size=1, max_size=4)
