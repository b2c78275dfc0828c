"""The phone door's wire, its other half: the webhook's answer and refusal XML in each provider's words, and the
REST request that hangs a call up. Pure logic: no model, no server, no network."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from urllib.parse import parse_qs, urlsplit

import pytest

from vita.web.phone.wire import Plivo, Telnyx, Twilio

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

HOSTILE = "a\"b'c<d>e&f g"  # quotes, markup and an ampersand: what an XML writer must escape


# --- the webhook's XML ---------------------------------------------------------------------------------------------
URL = "wss://voice.example.com/phone/stream/twilio/AbC-123_xyz"  # the stream's token travels in its path


def sent_url(provider: type, xml: str) -> str:
    """The stream URL an answer connects its call to (asserting there is exactly one stream)."""
    streams = ET.fromstring(xml).findall(".//Stream")
    assert len(streams) == 1
    return streams[0].text if provider is Plivo else streams[0].get("url")


def test_twilios_answer_connects_the_call_to_the_stream_url_alone():
    xml = Twilio.answer(URL)
    assert xml.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    root = ET.fromstring(xml)
    assert root.tag == "Response" and [c.tag for c in root] == ["Connect"]
    assert [c.tag for c in root.find("Connect")] == ["Stream"]
    stream = root.find("Connect/Stream")
    assert stream.attrib == {"url": URL}  # no query string
    assert list(stream) == [] and not (stream.text or "").strip()  # no <Parameter>: the token is in the path


def test_telnyxs_answer_asks_for_a_bidirectional_pcmu_stream():
    root = ET.fromstring(Telnyx.answer(URL))
    assert root.tag == "Response" and [c.tag for c in root] == ["Connect"]
    stream = root.find("Connect/Stream")
    assert stream.attrib == {"url": URL, "bidirectionalMode": "rtp", "bidirectionalCodec": "PCMU"}
    assert list(stream) == []


def test_plivos_answer_is_a_bidirectional_stream_that_keeps_the_call_alive():
    root = ET.fromstring(Plivo.answer(URL))
    assert root.tag == "Response" and [c.tag for c in root] == ["Stream"]
    stream = root.find("Stream")
    assert stream.attrib == {"bidirectional": "true", "keepCallAlive": "true",
                             "contentType": "audio/x-mulaw;rate=8000"}
    assert stream.text == URL and list(stream) == []


@pytest.mark.parametrize("provider", [Twilio, Telnyx, Plivo])
def test_the_stream_url_is_passed_through_intact(provider):
    for url in (URL, "ws://10.0.0.5:8080/phone/stream/plivo/t0k", "wss://tunnel.example.net/a/b/telnyx/x?room=1"):
        sent = sent_url(provider, provider.answer(url))
        assert sent == url
        assert urlsplit(sent).query == urlsplit(url).query  # nothing added to its query


@pytest.mark.parametrize("provider", [Twilio, Telnyx, Plivo])
def test_hostile_values_keep_every_answer_well_formed_and_arrive_intact(provider):
    url = f"wss://voice.example.com/phone/stream/{provider.name}/{HOSTILE}?a=1&b=\"2\"&c=<3>"
    root = ET.fromstring(provider.answer(url))  # well-formed
    assert [c.tag for c in root] == (["Stream"] if provider is Plivo else ["Connect"])  # no markup got in
    assert sent_url(provider, provider.answer(url)) == url


def test_a_refusal_says_its_text_then_hangs_up():
    for provider, say in ((Twilio, "Say"), (Telnyx, "Say"), (Plivo, "Speak")):
        root = ET.fromstring(provider.refusal("All lines are busy. Goodbye."))
        assert root.tag == "Response" and [c.tag for c in root] == [say, "Hangup"]
        assert root[0].text == "All lines are busy. Goodbye."
        assert ET.fromstring(provider.refusal(HOSTILE))[0].text == HOSTILE  # escaped, still one Say


# --- hanging up ----------------------------------------------------------------------------------------------------
def basic(header: str) -> str:
    scheme, _, encoded = header.partition(" ")
    assert scheme == "Basic"
    return base64.b64decode(encoded, validate=True).decode()


def test_twilios_hang_up_posts_completed_to_the_call_with_basic_auth():
    credentials = {"TWILIO_ACCOUNT_SID": "AC0123456789abcdef0123456789abcdef", "TWILIO_AUTH_TOKEN": "s3cret"}
    request = Twilio.hang_up("CA5c8ad5ff9e0bde7a1bdd3c8b1a1c1fd2", credentials)
    assert request is not None and request.method == "POST"
    assert request.url == ("https://api.twilio.com/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Calls/"
                           "CA5c8ad5ff9e0bde7a1bdd3c8b1a1c1fd2.json")
    assert basic(request.headers["Authorization"]) == "AC0123456789abcdef0123456789abcdef:s3cret"
    assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert parse_qs(request.body.decode()) == {"Status": ["completed"]}


def test_telnyxs_hang_up_posts_the_hangup_action_with_a_bearer_key():
    call = "v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg"
    request = Telnyx.hang_up(call, {"TELNYX_API_KEY": "KEY0123"})
    assert request is not None and request.method == "POST"
    assert request.url == ("https://api.telnyx.com/v2/calls/"
                           "v3%3AMdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg/actions/hangup")
    assert request.headers["Authorization"] == "Bearer KEY0123"
    assert json.loads(request.body) == {}


def test_plivos_hang_up_deletes_the_call_with_basic_auth():
    request = Plivo.hang_up("aeb2d8e3-5c4f", {"PLIVO_AUTH_ID": "MAXXXXXXXXXXXXXXXXXX", "PLIVO_AUTH_TOKEN": "s3cret"})
    assert request is not None and request.method == "DELETE" and request.body is None
    assert request.url == "https://api.plivo.com/v1/Account/MAXXXXXXXXXXXXXXXXXX/Call/aeb2d8e3-5c4f/"
    assert basic(request.headers["Authorization"]) == "MAXXXXXXXXXXXXXXXXXX:s3cret"


def test_hang_up_honours_each_api_base():
    twilio = Twilio.hang_up("CA1", {"TWILIO_ACCOUNT_SID": "AC1", "TWILIO_AUTH_TOKEN": "t",
                                    "TWILIO_API_BASE": "http://127.0.0.1:8101/"})
    assert twilio.url == "http://127.0.0.1:8101/2010-04-01/Accounts/AC1/Calls/CA1.json"
    telnyx = Telnyx.hang_up("c1", {"TELNYX_API_KEY": "k", "TELNYX_API_BASE": "http://127.0.0.1:8102"})
    assert telnyx.url == "http://127.0.0.1:8102/v2/calls/c1/actions/hangup"
    plivo = Plivo.hang_up("c1", {"PLIVO_AUTH_ID": "MA1", "PLIVO_AUTH_TOKEN": "t",
                                 "PLIVO_API_BASE": "http://127.0.0.1:8103/"})
    assert plivo.url == "http://127.0.0.1:8103/v1/Account/MA1/Call/c1/"


def test_an_id_from_the_stream_stays_in_its_path_segment():
    telnyx = Telnyx.hang_up("a/../../b?c#d", {"TELNYX_API_KEY": "k"})
    assert urlsplit(telnyx.url).path == "/v2/calls/a%2F..%2F..%2Fb%3Fc%23d/actions/hangup"
    plivo = Plivo.hang_up("a/../b?c", {"PLIVO_AUTH_ID": "MA1", "PLIVO_AUTH_TOKEN": "t"})
    assert urlsplit(plivo.url).path == "/v1/Account/MA1/Call/a%2F..%2Fb%3Fc/"


@pytest.mark.parametrize(("provider", "credentials"), [
    (Twilio, {}), (Twilio, {"TWILIO_ACCOUNT_SID": "AC1"}), (Twilio, {"TWILIO_AUTH_TOKEN": "t"}),
    (Twilio, {"TWILIO_ACCOUNT_SID": "AC1", "TWILIO_AUTH_TOKEN": ""}),
    (Telnyx, {}), (Telnyx, {"TELNYX_API_KEY": ""}), (Telnyx, {"TWILIO_ACCOUNT_SID": "AC1", "TWILIO_AUTH_TOKEN": "t"}),
    (Plivo, {}), (Plivo, {"PLIVO_AUTH_ID": "MA1"}), (Plivo, {"PLIVO_AUTH_TOKEN": "t"}),
])
def test_no_hang_up_without_the_accounts_credentials(provider, credentials):
    assert provider.hang_up("c1", {**credentials, f"{provider.name.upper()}_API_BASE": "http://127.0.0.1:1"}) is None
