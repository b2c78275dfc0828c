"""The phone door's wire: Twilio's, Telnyx's and Plivo's media-stream messages read into the door's typed events,
what the door sends back in each provider's words, and the malformed messages it refuses (the webhook's XML and
the hang-up request: test_wire_answers.py). Pure logic: no model, no server, no network."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET

import pytest

from vita.web.phone.wire import (
    MAX_PARAMETERS,
    MAX_PAYLOAD_BYTES,
    PROVIDERS,
    CallAudio,
    CallStarted,
    CallStopped,
    KeyPressed,
    MarkPlayed,
    Plivo,
    Provider,
    StreamConnected,
    Telnyx,
    Twilio,
    WireError,
    parse,
)

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

AUDIO = bytes(range(256)) * 2  # 64 ms of G.711: every byte value, so base64 has to carry all of them

# --- each provider's messages, as its documentation shows them ------------------------------------------------------
TWILIO_CONNECTED = {"event": "connected", "protocol": "Call", "version": "1.0.0"}
TWILIO_START = {
    "event": "start", "sequenceNumber": "1", "streamSid": "MZ18ad3ab5a668481ce02b83e7395059f0",
    "start": {"accountSid": "AC00000000000000000000000000000000", "streamSid": "MZ18ad3ab5a668481ce02b83e7395059f0",
              "callSid": "CA5c8ad5ff9e0bde7a1bdd3c8b1a1c1fd2", "tracks": ["inbound"],
              "customParameters": {"FirstName": "Jane", "Room": "front-desk"},
              "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}},
}
TELNYX_START = {
    "event": "start", "sequence_number": "1", "stream_id": "32de0dea-53cb-4b21-89a4-9e1819c043bc",
    "start": {"user_id": "3e6f995f-85f7-4705-9741-53b116d28237",
              "call_control_id": "v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg",
              "client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d",
              "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1}},
}
PLIVO_START = {
    "event": "start", "sequenceNumber": 0, "extra_headers": "{}",
    "start": {"callId": "aeb2d8e3-5c4f-4b1c-9a3a-2b7c1e0f1d11", "streamId": "20170ada-f610-433b-8758-c02a2aab3662",
              "accountId": "MAXXXXXXXXXXXXXXXXXX", "tracks": ["inbound"],
              "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000}},
}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def started(start: dict) -> tuple[Provider, CallStarted]:
    provider = Provider.recognise(start)
    assert provider is not None
    return provider, provider.started(start)


def with_media_format(start: dict, key: str, media_format: dict) -> dict:
    return {**start, "start": {**start["start"], key: media_format}}


# --- parse ---------------------------------------------------------------------------------------------------------
def test_parse_takes_a_json_object_with_a_string_event_as_text_or_bytes():
    assert parse('{"event": "stop"}') == {"event": "stop"}
    assert parse(json.dumps(TWILIO_START).encode()) == TWILIO_START


@pytest.mark.parametrize("data", ["not json", b"\xff\xfe\xfd", "", "[1, 2]", '"media"', "{}", '{"event": 1}',
                                  '{"event": null}', '{"streamSid": "MZ1"}'])
def test_parse_refuses_what_is_not_an_event(data):
    with pytest.raises(WireError):
        parse(data)


# --- recognising a start -------------------------------------------------------------------------------------------
def test_each_providers_start_is_recognised_as_that_provider():
    assert type(Provider.recognise(TWILIO_START)) is Twilio
    assert type(Provider.recognise(TELNYX_START)) is Telnyx
    assert type(Provider.recognise(PLIVO_START)) is Plivo
    # the names the webhooks take
    assert PROVIDERS["twilio"] is Twilio and PROVIDERS["telnyx"] is Telnyx and PROVIDERS["plivo"] is Plivo


@pytest.mark.parametrize("message", [
    TWILIO_CONNECTED,  # a connected names nobody
    {"event": "media", "media": {"payload": "AAAA"}},
    {"event": "start"},  # no start object
    {"event": "start", "start": "MZ1"},
    {"event": "start", "start": {"streamSid": "MZ1"}},  # Twilio's stream without its call
    {"event": "start", "start": {"streamId": "s1"}},  # Plivo's stream without its call
    {"event": "start", "start": {"accountSid": "AC1", "tracks": ["inbound"]}},
])
def test_what_is_no_providers_start_is_not_recognised(message):
    assert Provider.recognise(message) is None


# --- Twilio --------------------------------------------------------------------------------------------------------
def test_twilios_start_names_its_stream_call_laws_and_custom_parameters():
    provider, call = started(TWILIO_START)
    assert call == CallStarted("MZ18ad3ab5a668481ce02b83e7395059f0", "CA5c8ad5ff9e0bde7a1bdd3c8b1a1c1fd2", "ulaw",
                               "ulaw", {"FirstName": "Jane", "Room": "front-desk"})  # heard and replied in µ-law
    assert provider.stream_id == "MZ18ad3ab5a668481ce02b83e7395059f0"  # what the door's messages will name


def test_twilios_stream_messages_read_into_the_doors_events():
    provider, _ = started(TWILIO_START)
    sid = "MZ18ad3ab5a668481ce02b83e7395059f0"
    assert provider.read(TWILIO_CONNECTED) == StreamConnected()
    media = {"event": "media", "sequenceNumber": "3", "streamSid": sid,
             "media": {"track": "inbound", "chunk": "1", "timestamp": "5", "payload": b64(AUDIO)}}
    assert provider.read(media) == CallAudio(AUDIO)
    dtmf = {"event": "dtmf", "streamSid": sid, "sequenceNumber": "5", "dtmf": {"track": "inbound_track", "digit": "7"}}
    assert provider.read(dtmf) == KeyPressed("7")
    mark = {"event": "mark", "sequenceNumber": "4", "streamSid": sid, "mark": {"name": "reply-3"}}
    assert provider.read(mark) == MarkPlayed("reply-3")
    stop = {"event": "stop", "sequenceNumber": "6", "streamSid": sid,
            "stop": {"accountSid": "AC00000000000000000000000000000000",
                     "callSid": "CA5c8ad5ff9e0bde7a1bdd3c8b1a1c1fd2"}}
    assert provider.read(stop) == CallStopped()


def test_twilios_outgoing_messages_have_its_documented_shape():
    provider, _ = started(TWILIO_START)
    sid = "MZ18ad3ab5a668481ce02b83e7395059f0"
    sent = json.loads(json.dumps(provider.media(AUDIO)))  # what goes on the wire is JSON
    assert sent == {"event": "media", "streamSid": sid, "media": {"payload": b64(AUDIO)}}
    assert base64.b64decode(sent["media"]["payload"], validate=True) == AUDIO
    assert provider.clear() == {"event": "clear", "streamSid": sid}
    assert provider.mark("reply-3") == {"event": "mark", "streamSid": sid, "mark": {"name": "reply-3"}}
    # and the mark Twilio sends back once it has played up to it is read as played
    assert provider.read({"event": "mark", "streamSid": sid, "mark": provider.mark("reply-3")["mark"]}) == \
        MarkPlayed("reply-3")


def test_twilio_carries_mulaw_only():
    call = Twilio().started(with_media_format(TWILIO_START, "mediaFormat", {}))
    assert (call.law, call.reply_law) == ("ulaw", "ulaw")  # its default
    for encoding in ("audio/l16", "audio/x-alaw", "PCMU", 0):
        with pytest.raises(WireError):
            Twilio().started(with_media_format(TWILIO_START, "mediaFormat",
                                               {"encoding": encoding, "sampleRate": 8000, "channels": 1}))


def test_twilios_custom_parameters_keep_a_few_short_strings():
    many = {f"p{i}": str(i) for i in range(MAX_PARAMETERS + 10)}
    start = {**TWILIO_START, "start": {**TWILIO_START["start"], "customParameters": many}}
    assert len(Twilio().started(start).parameters) == MAX_PARAMETERS
    odd = {"token": "t", "n": 5, "list": ["x"], "none": None, "k" * 65: "too long a name", "long": "v" * 5000}
    start = {**TWILIO_START, "start": {**TWILIO_START["start"], "customParameters": odd}}
    parameters = Twilio().started(start).parameters
    assert parameters["token"] == "t" and parameters["n"] == "5"  # a number arrives as text
    assert "list" not in parameters and "none" not in parameters and "k" * 65 not in parameters
    assert 0 < len(parameters["long"]) < 5000  # cut short
    start = {**TWILIO_START, "start": {**TWILIO_START["start"], "customParameters": ["token", "t"]}}
    assert Twilio().started(start).parameters == {}


def test_twilios_start_needs_its_ids():
    for key, value in (("streamSid", ""), ("callSid", ""), ("callSid", 5), ("streamSid", "M" * 129)):
        with pytest.raises(WireError):
            Twilio().started({**TWILIO_START, "start": {**TWILIO_START["start"], key: value}})


# --- Telnyx --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("encoding", "law"), [("PCMU", "ulaw"), ("PCMA", "alaw")])
def test_telnyxs_start_names_its_stream_from_the_top_level_and_its_call_control_id(encoding, law):
    start = with_media_format(TELNYX_START, "media_format", {"encoding": encoding, "sample_rate": 8000, "channels": 1})
    provider, call = started(start)
    assert type(provider) is Telnyx
    # the caller is heard in the call's law; the reply goes out in PCMU, whatever the call's own codec
    assert call == CallStarted("32de0dea-53cb-4b21-89a4-9e1819c043bc",
                               "v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg", law, "ulaw", {})
    assert provider.stream_id == "32de0dea-53cb-4b21-89a4-9e1819c043bc"


@pytest.mark.parametrize("encoding", ["PCMU", "PCMA"])
def test_telnyxs_reply_law_is_the_codec_its_answer_asks_for(encoding):
    call = Telnyx().started(with_media_format(TELNYX_START, "media_format", {"encoding": encoding}))
    stream = ET.fromstring(Telnyx.answer("wss://voice.example.com/phone/stream/telnyx/t")).find("Connect/Stream")
    assert Telnyx.LAWS[stream.get("bidirectionalCodec")] == call.reply_law == "ulaw"


@pytest.mark.parametrize("encoding", ["L16", "G722", "OPUS", "AMR-WB", "audio/x-mulaw", None])
def test_telnyx_hears_pcmu_or_pcma_only(encoding):
    with pytest.raises(WireError):
        Telnyx().started(with_media_format(TELNYX_START, "media_format", {"encoding": encoding, "sample_rate": 8000}))


def test_telnyxs_start_needs_its_top_level_stream_id():
    start = {k: v for k, v in TELNYX_START.items() if k != "stream_id"}
    assert type(Provider.recognise(start)) is Telnyx  # recognised by its call_control_id
    with pytest.raises(WireError):
        Telnyx().started(start)
    with pytest.raises(WireError):
        Telnyx().started({**TELNYX_START, "start": {**TELNYX_START["start"], "call_control_id": ""}})


def test_telnyxs_stream_messages_read_into_the_doors_events():
    provider, _ = started(TELNYX_START)
    sid = TELNYX_START["stream_id"]
    assert provider.read({"event": "connected", "version": "1.0.0"}) == StreamConnected()
    media = {"event": "media", "sequence_number": "4", "stream_id": sid,
             "media": {"track": "inbound", "chunk": "2", "timestamp": "5", "payload": b64(AUDIO)}}
    assert provider.read(media) == CallAudio(AUDIO)
    assert provider.read({"event": "dtmf", "stream_id": sid, "dtmf": {"digit": "#"}}) == KeyPressed("#")
    assert provider.read({"event": "mark", "stream_id": sid, "mark": {"name": "m1"}}) == MarkPlayed("m1")
    stop = {"event": "stop", "sequence_number": "5", "stream_id": sid,
            "stop": {"user_id": "3e6f995f", "call_control_id": TELNYX_START["start"]["call_control_id"]}}
    assert provider.read(stop) == CallStopped()


def test_telnyxs_outgoing_messages_have_its_documented_shape():
    provider, _ = started(TELNYX_START)
    sent = json.loads(json.dumps(provider.media(AUDIO)))
    assert sent == {"event": "media", "media": {"payload": b64(AUDIO)}}
    assert base64.b64decode(sent["media"]["payload"], validate=True) == AUDIO
    assert provider.clear() == {"event": "clear"}
    assert provider.mark("m1") == {"event": "mark", "mark": {"name": "m1"}}


# --- Plivo ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("encoding", "law"), [("audio/x-mulaw", "ulaw"), ("audio/x-alaw", "alaw")])
def test_plivos_start_names_its_stream_and_call_and_replies_in_the_calls_law(encoding, law):
    provider, call = started(with_media_format(PLIVO_START, "mediaFormat", {"encoding": encoding, "sampleRate": 8000}))
    assert type(provider) is Plivo
    assert call == CallStarted("20170ada-f610-433b-8758-c02a2aab3662", "aeb2d8e3-5c4f-4b1c-9a3a-2b7c1e0f1d11", law,
                               law, {})
    assert provider.stream_id == "20170ada-f610-433b-8758-c02a2aab3662"
    # what it sends back is labelled with the call's own encoding
    assert provider.media(AUDIO)["media"]["contentType"] == encoding


@pytest.mark.parametrize("media_format", [{"encoding": "audio/x-l16", "sampleRate": 8000},
                                          {"encoding": "audio/x-l16", "sampleRate": 16000},
                                          {"encoding": "audio/x-mulaw", "sampleRate": 16000}])
def test_plivo_hears_g711_at_8_khz_only(media_format):
    with pytest.raises(WireError):
        Plivo().started(with_media_format(PLIVO_START, "mediaFormat", media_format))


@pytest.mark.parametrize("encoding", [["PCMU"], {"PCMU": 1}, ["audio/x-mulaw"], {}, 8.0, True])
@pytest.mark.parametrize(("start", "key"), [(TWILIO_START, "mediaFormat"), (TELNYX_START, "media_format"),
                                            (PLIVO_START, "mediaFormat")], ids=["twilio", "telnyx", "plivo"])
def test_an_encoding_that_is_not_a_string_is_a_wire_error(start, key, encoding):
    provider = Provider.recognise(start)
    assert provider is not None
    with pytest.raises(WireError):  # (not a TypeError from an unhashable list or dict)
        provider.started(with_media_format(start, key, {"encoding": encoding, "sampleRate": 8000}))


def test_plivos_stream_messages_read_into_the_doors_events():
    provider, _ = started(PLIVO_START)
    sid = PLIVO_START["start"]["streamId"]
    media = {"event": "media", "sequenceNumber": 1, "streamId": sid, "extra_headers": "{}",
             "media": {"track": "inbound", "timestamp": "1700000000000", "chunk": 1, "payload": b64(AUDIO)}}
    assert provider.read(media) == CallAudio(AUDIO)
    assert provider.read({"event": "dtmf", "streamId": sid, "dtmf": {"digit": "b", "track": "inbound"}}) == \
        KeyPressed("B")  # A-D in either case
    played = {"event": "playedStream", "sequenceNumber": 7, "streamId": sid, "name": "reply-1"}
    assert provider.read(played) == MarkPlayed("reply-1")  # the answer to a checkpoint
    assert provider.read({"event": "stop", "streamId": sid}) == CallStopped()
    assert provider.read({"event": "mark", "mark": {"name": "reply-1"}}) is None  # Plivo's marks are playedStream
    assert started(TWILIO_START)[0].read(played) is None  # and Twilio's are not


def test_plivos_outgoing_messages_have_its_documented_shape():
    provider, _ = started(PLIVO_START)
    sid = PLIVO_START["start"]["streamId"]
    sent = json.loads(json.dumps(provider.media(AUDIO)))
    assert sent == {"event": "playAudio", "streamId": sid,
                    "media": {"contentType": "audio/x-mulaw", "sampleRate": 8000, "payload": b64(AUDIO)}}
    assert base64.b64decode(sent["media"]["payload"], validate=True) == AUDIO
    assert provider.clear() == {"event": "clearAudio", "streamId": sid}
    assert provider.mark("reply-1") == {"event": "checkpoint", "streamId": sid, "name": "reply-1"}
    # Plivo answers a checkpoint with a playedStream of the same name
    assert provider.read({"event": "playedStream", "streamId": sid, "name": provider.mark("reply-1")["name"]}) == \
        MarkPlayed("reply-1")


# --- what every dialect refuses or ignores --------------------------------------------------------------------------
@pytest.mark.parametrize("start", [TWILIO_START, TELNYX_START, PLIVO_START], ids=["twilio", "telnyx", "plivo"])
def test_only_the_callers_track_is_heard(start):
    provider, _ = started(start)
    for track in ("outbound", "outbound_track"):
        assert provider.read({"event": "media", "media": {"track": track, "payload": b64(AUDIO)}}) is None
    assert provider.read({"event": "media", "media": {"track": "inbound_track", "payload": b64(AUDIO)}}) == \
        CallAudio(AUDIO)
    assert provider.read({"event": "media", "media": {"payload": b64(AUDIO)}}) == CallAudio(AUDIO)  # one track


@pytest.mark.parametrize("start", [TWILIO_START, TELNYX_START, PLIVO_START], ids=["twilio", "telnyx", "plivo"])
def test_an_unknown_event_is_ignored(start):
    provider, _ = started(start)
    assert provider.read({"event": "ping"}) is None
    assert provider.read({"event": "incomingCallerId", "streamId": "s"}) is None


@pytest.mark.parametrize("start", [TWILIO_START, TELNYX_START, PLIVO_START], ids=["twilio", "telnyx", "plivo"])
@pytest.mark.parametrize("message", [
    {"event": "media", "media": {"payload": "not base64!"}},
    {"event": "media", "media": {"payload": "AAA"}},  # cut short
    {"event": "media", "media": {"payload": b64(bytes(MAX_PAYLOAD_BYTES + 3))}},  # too much for one message
    {"event": "media", "media": {"payload": 1234}},
    {"event": "media", "media": {}},
    {"event": "media", "media": "AAAA"},
    {"event": "media"},
    {"event": "dtmf", "dtmf": {"digit": "E"}},
    {"event": "dtmf", "dtmf": {"digit": "12"}},
    {"event": "dtmf", "dtmf": {"digit": ""}},
    {"event": "dtmf", "dtmf": {"digit": 5}},
    {"event": "dtmf", "dtmf": "5"},
    {"event": "dtmf"},
    {"event": "start"},  # a second start
])
def test_a_malformed_message_is_a_wire_error(start, message):
    provider, _ = started(start)
    with pytest.raises(WireError):
        provider.read(message)


def test_a_second_start_is_refused_whatever_it_says():
    for start in (TWILIO_START, TELNYX_START, PLIVO_START):
        provider, _ = started(start)
        with pytest.raises(WireError):
            provider.read(start)


def test_a_payload_of_the_largest_size_is_taken():
    provider, _ = started(TWILIO_START)
    big = bytes(range(256)) * (MAX_PAYLOAD_BYTES // 256) + bytes(MAX_PAYLOAD_BYTES % 256)
    assert provider.read({"event": "media", "media": {"payload": b64(big)}}) == CallAudio(big)


@pytest.mark.parametrize("mark", [{"event": "mark"}, {"event": "mark", "mark": {}}, {"event": "mark", "mark": "m1"},
                                  {"event": "mark", "mark": {"name": ""}}, {"event": "mark", "mark": {"name": 3}},
                                  {"event": "mark", "mark": {"name": "m" * 129}}])
@pytest.mark.parametrize("start", [TWILIO_START, TELNYX_START], ids=["twilio", "telnyx"])
def test_a_mark_needs_a_name(start, mark):
    provider, _ = started(start)
    with pytest.raises(WireError):
        provider.read(mark)


@pytest.mark.parametrize("played", [{"event": "playedStream"}, {"event": "playedStream", "name": ""},
                                    {"event": "playedStream", "name": None}])
def test_plivos_played_stream_needs_a_name(played):
    provider, _ = started(PLIVO_START)
    with pytest.raises(WireError):
        provider.read(played)
