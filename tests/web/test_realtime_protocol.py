"""The Realtime protocol's pure parts: session settings and their checks, audio formats, the conversation's
translation of the front's events into Realtime server events. No model, no server."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from vita.client_events import (
    ClientEvent,
    FunctionCall,
    ReplyAudio,
    ReplyDelta,
    ResponseText,
    StateChanged,
    Transcript,
    TurnCancelled,
    TurnStarted,
    VadChanged,
)
from vita.messages import ClientTool
from vita.web.codecs import ALAW_DECODE, ULAW_DECODE
from vita.web.realtime.conversation import RealtimeConversation
from vita.web.realtime.items import heard_part
from vita.web.realtime.protocol import (
    ProtocolError,
    Settings,
    decode_audio,
    encode_g711,
    read_response_options,
    session_json,
    updated,
)

pytestmark = pytest.mark.fast

VOICES = ["joe-us", "hibari"]


def refused(session: object) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        updated(Settings(voice="joe-us"), session, VOICES)
    return caught.value


def test_an_update_takes_what_it_names_and_keeps_the_rest():
    s = updated(Settings(voice="joe-us"), {"type": "realtime", "instructions": "Be brief.",
                                           "output_modalities": ["text"],
                                           "audio": {"output": {"voice": "hibari", "format": {"type": "audio/pcmu"}}}},
                VOICES)
    assert (s.instructions, s.output_modalities, s.voice, s.output_format) == ("Be brief.", ("text",), "hibari",
                                                                                 "audio/pcmu")
    assert s.input_format == "audio/pcm" and s.turn_detection is not None and not s.audio_out
    again = updated(s, {"audio": {"output": {"voice": "alloy"}}}, VOICES)  # OpenAI's voice: ours stays, shown as is
    assert again.voice == "hibari"
    assert updated(s, {"input_audio_format": "g711_alaw"}, VOICES).input_format == "audio/pcma"  # the beta's names


def test_turn_detection_null_is_push_to_talk_and_vad_settings_are_checked():
    assert updated(Settings(), {"audio": {"input": {"turn_detection": None}}}, VOICES).turn_detection is None
    vad = updated(Settings(), {"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 0.6,
                                                                      "silence_duration_ms": 700}}}}, VOICES)
    assert (vad.turn_detection.type, vad.turn_detection.threshold, vad.turn_detection.silence_duration_ms) == (
        "server_vad", 0.6, 700)
    semantic = updated(vad, {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}},
                       VOICES)
    assert semantic.turn_detection.eagerness == "high"
    assert refused({"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 2}}}}).param.endswith(
        "threshold")
    assert refused({"audio": {"input": {"turn_detection": {"type": "server_vad",
                                                           "interrupt_response": False}}}}).code == "unsupported"
    assert refused({"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "max"}}}}).code == (
        "invalid_value")


@pytest.mark.parametrize("session, code", [
    ("not an object", "invalid_value"),
    ({"type": "transcription"}, "unsupported"),
    ({"instructions": 5}, "invalid_value"),
    ({"instructions": "x" * 20_000}, "invalid_value"),
    ({"output_modalities": ["video"]}, "invalid_value"),
    ({"output_modalities": []}, "invalid_value"),
    ({"audio": {"input": {"format": {"type": "audio/opus"}}}}, "invalid_value"),
    ({"audio": {"output": {"format": {"type": "audio/pcm", "rate": 48000}}}}, "invalid_value"),
    ({"audio": []}, "invalid_value"),
    ({"tools": {"name": "x"}}, "invalid_value"),
    ({"tools": [{"type": "function", "name": "no spaces allowed"}]}, "invalid_value"),
    ({"tools": [{"type": "function", "name": "big", "parameters": {"d": "x" * 40_000}}]}, "invalid_value"),
    ({"tools": [{"type": "function", "name": f"f{n}", "description": "x" * 9_000} for n in range(4)]},
     "invalid_value"),  # the budget is for all of them
    ({"tools": [{"type": "function", "name": "naïve"}]}, "invalid_value"),
    ({"output_modalities": [{}]}, "invalid_value"),
    ({"audio": {"input": {"format": {"type": [1]}}}}, "invalid_value"),
    ({"tools": [{"type": "mcp", "server_url": "https://example.com"}]}, "unsupported"),
    ({"tools": [{"type": "function", "name": f"t{n}"} for n in range(65)]}, "invalid_value"),
    ({"tool_choice": "required"}, "invalid_value"),  # with no function to call
    ({"tool_choice": {"type": "function", "name": "nowhere"}}, "invalid_value"),
    ({"tool_choice": {"type": "function"}}, "invalid_value"),
    ({"tool_choice": {"type": "mcp", "server_label": "x"}}, "unsupported"),
    ({"tool_choice": "always"}, "invalid_value"),
    ({"tools": [{"type": "function", "name": "lookup"}], "tool_choice": {"type": "function", "name": "look"}},
     "invalid_value"),
])
def test_a_bad_update_is_refused_whole(session, code):
    assert refused(session).code == code


LOOKUP = {"type": "function", "name": "lookup",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
WEATHER = {"type": "function", "name": "weather"}


def test_tool_choice_required_or_named_says_what_each_reply_must_call_and_shows_as_given():
    tools = updated(Settings(), {"tools": [LOOKUP, WEATHER]}, VOICES)
    assert tools.tool_choice.must_call(tools.tools) == ()  # auto: the model decides
    required = updated(tools, {"tool_choice": "required"}, VOICES)
    assert required.tool_choice.must_call(required.tools) == ("lookup", "weather")
    assert session_json(required, "rt_1", "qwen", "whisper-base", 48, 60)["tool_choice"] == "required"
    named = updated(tools, {"tool_choice": {"type": "function", "name": "weather"}}, VOICES)
    assert named.tool_choice.must_call(named.tools) == ("weather",)
    assert session_json(named, "rt_1", "qwen", "whisper-base", 48, 60)["tool_choice"] == {"type": "function",
                                                                                         "name": "weather"}
    chat_shape = updated(tools, {"tool_choice": {"type": "function", "function": {"name": "lookup"}}}, VOICES)
    assert chat_shape.tool_choice.must_call(chat_shape.tools) == ("lookup",)
    # Taking the named function away while it is required is refused, and the settings stay as they were.
    with pytest.raises(ProtocolError) as caught:
        updated(named, {"tools": [LOOKUP]}, VOICES)
    assert caught.value.param == "session.tool_choice"


def test_a_response_may_choose_its_own_tool_choice():
    options = read_response_options({"tool_choice": {"type": "function", "name": "lookup"}}, 48)
    assert options.tool_choice.must_call(()) == ("lookup",)
    assert read_response_options({}, 48).tool_choice is None
    with pytest.raises(ProtocolError) as caught:
        read_response_options({"tool_choice": 3}, 48)
    assert caught.value.param == "response.tool_choice"


def test_client_tools_keep_their_schema_as_json_and_show_in_the_session():
    s = updated(Settings(), {"tools": [{"type": "function", "name": "lookup", "description": "Find it.",
                                        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]},
                VOICES)
    assert s.tools == (ClientTool("lookup", "Find it.", json.dumps({"type": "object",
                                                                     "properties": {"q": {"type": "string"}}})),)
    shown = session_json(s, "rt_1", "qwen", "whisper-base", 48, 60)
    assert shown["tools"][0]["parameters"]["properties"] == {"q": {"type": "string"}}
    assert shown["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert shown["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}


def test_pcm_is_little_endian_16_bit_and_checked():
    samples = np.array([0, 1, -2, 32767, -32768], dtype=np.int16)
    b64 = base64.b64encode(samples.astype("<i2").tobytes()).decode()
    assert np.array_equal(decode_audio(b64, "audio/pcm", 1000), samples)
    for bad in ("***", 17, base64.b64encode(b"abc").decode()):
        with pytest.raises(ProtocolError):
            decode_audio(bad, "audio/pcm", 1000)
    with pytest.raises(ProtocolError) as caught:
        decode_audio(base64.b64encode(bytes(4000)).decode(), "audio/pcm", 1000)
    assert caught.value.code == "audio_too_large"


@pytest.mark.parametrize("kind, table", [("audio/pcmu", ULAW_DECODE), ("audio/pcma", ALAW_DECODE)])
def test_g711_round_trips_within_its_step_and_every_code_decodes_to_itself(kind, table):
    codes = np.frombuffer(encode_g711(table, kind), np.uint8)
    assert np.array_equal(table[codes], table)  # a decoded level encodes back to a code of that level
    ramp = np.linspace(-30000, 30000, 4001).astype(np.int16)
    back = table[np.frombuffer(encode_g711(ramp, kind), np.uint8)].astype(np.int32)
    error = np.abs(back - ramp)
    assert np.all(error <= np.maximum(16, np.abs(ramp.astype(np.int32)) // 16))  # G.711's ~4 % step, at most
    b64 = base64.b64encode(encode_g711(ramp, kind)).decode()
    assert np.array_equal(decode_audio(b64, kind, 10_000), back.astype(np.int16))


def test_heard_part_keeps_whole_words_up_to_the_audio_played():
    text = "The capital of France is Paris."
    assert heard_part(text, 1.0) == text
    assert heard_part(text, 0.0) == ""
    assert heard_part(text, 0.5) == "The capital of"  # "France" was being said: not kept
    assert text.startswith(heard_part(text, 0.8))


# --- the conversation: the front's events as Realtime server events --------------------------------------------
class Wire:
    def __init__(self, settings: Settings | None = None):
        self.sent: list[dict] = []
        self.settings = settings or Settings(voice="joe-us")
        self.conversation = RealtimeConversation(self.sent.append, lambda: self.settings)

    def types(self) -> list[str]:
        return [e["type"] for e in self.sent]

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.sent if e["type"] == kind]

    def tell(self, event: ClientEvent) -> None:
        self.conversation.tell(event)


def spoken_reply(w: Wire, turn: int = 1) -> None:
    w.tell(VadChanged(speaking=True))
    w.tell(VadChanged(speaking=False))
    w.tell(TurnStarted(turn_id=turn, source="speech", text=""))
    w.tell(Transcript(turn_id=turn, text="What is the capital of France?"))
    w.tell(ReplyAudio(bytes(4800)))
    w.tell(ReplyDelta(turn_id=turn, text="Paris."))
    w.tell(ResponseText(turn_id=turn, text="Paris."))
    w.tell(ReplyAudio(bytes(4800)))


def test_a_spoken_turn_is_a_user_item_and_a_response_in_the_protocols_order():
    w = Wire()
    spoken_reply(w)
    w.tell(StateChanged(state="listening", turn_id=1))
    assert w.types() == [
        "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", "input_audio_buffer.committed",
        "conversation.item.added", "conversation.item.done", "response.created",
        "conversation.item.input_audio_transcription.delta", "conversation.item.input_audio_transcription.completed",
        "response.output_item.added", "conversation.item.added", "response.content_part.added",
        "response.output_audio.delta", "response.output_audio_transcript.delta", "response.output_audio.delta",
        "response.output_audio.done", "response.output_audio_transcript.done", "response.content_part.done",
        "response.output_item.done", "conversation.item.done", "response.done"]
    started, committed = w.of("input_audio_buffer.speech_started")[0], w.of("input_audio_buffer.committed")[0]
    assert started["item_id"] == committed["item_id"] == w.of("conversation.item.added")[0]["item"]["id"]
    done = w.of("response.done")[0]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0] == {"type": "output_audio",
                                                                                 "transcript": "Paris."}
    assert w.of("response.content_part.added")[0]["part"]["type"] == "audio"  # parts name it without output_
    (message,) = [i for i in w.conversation.items if i.role == "assistant"]
    assert message.audio_ms == pytest.approx(200.0)  # two chunks of 2400 samples at 24 kHz
    assert len({e["event_id"] for e in w.sent}) == len(w.sent)


def test_a_playing_reply_is_an_item_already_and_a_server_side_cancel_is_a_failure():
    w = Wire()
    spoken_reply(w)
    (message,) = [i for i in w.conversation.items if i.role == "assistant"]  # truncatable before response.done
    assert message.status == "in_progress"
    w.tell(TurnCancelled(turn_id=1, reason="worker failed"))
    done = w.of("response.done")[0]["response"]
    assert done["status"] == "failed" and done["status_details"]["error"]["code"] == "worker_failed"


@pytest.mark.parametrize("reason, expected", [("barge-in", "turn_detected"), ("client_cancelled", "client_cancelled"),
                                              ("extended", "turn_detected"), ("echo", "turn_detected")])
def test_a_cancelled_turn_is_a_cancelled_response(reason, expected):
    w = Wire()
    spoken_reply(w)
    w.tell(TurnCancelled(turn_id=1, reason=reason))
    w.tell(StateChanged(state="listening", turn_id=1, reason=reason))  # after the cancel: nothing more
    (done,) = w.of("response.done")
    assert done["response"]["status"] == "cancelled" and done["response"]["status_details"]["reason"] == expected
    user_item = w.of("input_audio_buffer.committed")[0]["item_id"]
    deleted = [e["item_id"] for e in w.of("conversation.item.deleted")]
    # withdrawn: the joined request replaces it, or it was the assistant's own reply heard back
    assert deleted == ([user_item] if reason in ("extended", "echo") else [])


def test_an_unanswered_turn_and_a_failed_one_say_so():
    w = Wire()
    w.tell(TurnStarted(turn_id=1, source="speech"))
    w.tell(StateChanged(state="listening", turn_id=1, reason="no speech recognised"))
    w.tell(TurnStarted(turn_id=2, source="text"))
    w.tell(StateChanged(state="listening", turn_id=2, reason="error"))
    first, second = (e["response"] for e in w.of("response.done"))
    assert first["status"] == "incomplete" and first["status_details"]["reason"] == "no_speech_recognised"
    assert second["status"] == "failed" and second["status_details"]["error"]["code"] == "error"
    assert not w.of("response.output_item.added")


def test_text_only_sessions_get_text_events_and_no_audio():
    w = Wire(Settings(output_modalities=("text",)))
    w.tell(TurnStarted(turn_id=1, source="text"))
    w.tell(ReplyAudio(bytes(480)))  # never sent to a text-only client
    w.tell(ReplyDelta(turn_id=1, text="Rome."))
    w.tell(StateChanged(state="listening", turn_id=1))
    assert "response.output_audio.delta" not in w.types()
    assert [e["delta"] for e in w.of("response.output_text.delta")] == ["Rome."]
    assert w.of("response.output_text.done")[0]["text"] == "Rome."


def test_a_response_that_chose_text_is_text_in_a_voice_session_and_the_next_is_voice_again():
    w = Wire()  # an audio session
    w.conversation.claimed_audio = False  # response.create's output_modalities: ["text"]
    w.tell(TurnStarted(turn_id=1, source="text"))
    w.tell(ReplyDelta(turn_id=1, text="Rome."))
    w.tell(StateChanged(state="listening", turn_id=1))
    first = w.of("response.done")[0]["response"]
    assert first["output_modalities"] == ["text"] and first["output"][0]["content"][0]["type"] == "output_text"
    assert [e["delta"] for e in w.of("response.output_text.delta")] == ["Rome."]
    w.tell(TurnStarted(turn_id=2, source="text"))
    w.tell(ReplyAudio(bytes(480)))
    w.tell(ReplyDelta(turn_id=2, text="Madrid."))
    w.tell(StateChanged(state="listening", turn_id=2))
    second = w.of("response.done")[1]["response"]
    assert second["output_modalities"] == ["audio"] and second["output"][0]["content"][0]["type"] == "output_audio"
    assert w.of("response.output_audio.delta") and w.of("response.output_audio_transcript.delta")


def test_g711_output_is_resampled_to_8k_and_encoded():
    w = Wire(Settings(output_format="audio/pcmu"))
    w.tell(TurnStarted(turn_id=1, source="text"))
    tone = (8000 * np.sin(np.arange(24000) / 24000 * 2 * np.pi * 440)).astype(np.int16)
    for chunk in np.split(tone, 10):
        w.tell(ReplyAudio(chunk.tobytes()))
    sent = b"".join(base64.b64decode(e["delta"]) for e in w.of("response.output_audio.delta"))
    assert 7000 <= len(sent) <= 8000  # one byte a sample at 8 kHz (the resampler holds a few back)
    assert np.abs(ULAW_DECODE[np.frombuffer(sent, np.uint8)].astype(np.int32)).max() > 6000


def test_a_client_tool_call_is_a_function_call_item_of_the_response():
    w = Wire()
    w.tell(TurnStarted(turn_id=1, source="text"))
    w.tell(FunctionCall(turn_id=1, call_id="call_1", name="lookup", arguments='{q="x"}'))
    w.tell(StateChanged(state="listening", turn_id=1, reason="tool_call"))
    assert [t for t in w.types() if t.startswith("response.")] == [
        "response.created", "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.done"]
    done = w.of("response.done")[0]["response"]
    assert done["status"] == "completed" and done["output"][0]["call_id"] == "call_1"
    assert "call_1" in w.conversation.calls  # the client owes its result


def test_events_of_another_turn_are_not_this_responses():
    w = Wire()
    w.tell(TurnStarted(turn_id=2, source="text"))
    w.tell(ReplyDelta(turn_id=1, text="stale"))
    w.tell(TurnCancelled(turn_id=1, reason="barge-in"))
    w.tell(StateChanged(state="listening", turn_id=1))
    assert w.types() == ["response.created"]
