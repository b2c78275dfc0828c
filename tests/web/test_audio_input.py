"""The two audio wire formats: valid messages decode to the same samples, anything else is an AudioFormatError."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vita.rate_budget import RateBudget
from vita.web.audio_input import JSON_MAX_BYTES, AudioFormatError, decode_audio_message

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

LIMIT = 64_000
PCM = np.array([0, 1, -1, 32767, -32768, 1234], dtype=np.int16)


def test_vita_json_and_binary_give_the_same_samples():
    vita = json.dumps({"sample_rate": 16000, "audio": list(PCM.astype("<i2").tobytes())})
    from_json, rate_json = decode_audio_message(vita, 16000, LIMIT)
    from_binary, rate_binary = decode_audio_message(PCM.astype("<i2").tobytes(), 16000, LIMIT)
    assert np.array_equal(from_json, PCM) and np.array_equal(from_binary, PCM)
    assert rate_json == rate_binary == 16000


def test_rates_come_from_the_message_or_the_session():
    vita = json.dumps({"sample_rate": 48000, "audio": [0, 0]})
    assert decode_audio_message(vita, 16000, LIMIT)[1] == 48000
    assert decode_audio_message(b"\0\0", 44100, LIMIT)[1] == 44100


@pytest.mark.parametrize("payload, needle", [
    (b"\x01\x02\x03", "whole 16-bit samples"),
    ("not json", "not JSON"),
    ('{"sample_rate": 16000}', "\"audio\" list"),
    ('{"sample_rate": 16000, "audio": [1, 2, 300]}', "byte values"),
    ('{"sample_rate": 16000, "audio": [1, "a"]}', "byte values"),
    ('{"sample_rate": 16000, "audio": [[1, 2]]}', "byte values"),
    ('{"sample_rate": 7, "audio": [1, 2]}', "sample_rate"),
    ('{"sample_rate": true, "audio": [1, 2]}', "sample_rate"),
    ({"audio": [1, 2]}, "binary int16 PCM"),
    (None, "binary int16 PCM"),
    (b"\0" * (LIMIT + 2), "at most"),
])
def test_bad_messages_are_named(payload, needle):
    with pytest.raises(AudioFormatError, match=needle.replace("[", r"\[")):
        decode_audio_message(payload, 16000, LIMIT)


@given(st.one_of(st.binary(max_size=600), st.text(max_size=300), st.none(), st.integers(),
                 st.lists(st.integers()), st.dictionaries(st.text(max_size=5), st.integers())))
def test_any_input_decodes_or_is_rejected_cleanly(payload):
    try:
        pcm, rate = decode_audio_message(payload, 16000, LIMIT)
    except AudioFormatError:
        return
    assert pcm.dtype == np.int16 and 8000 <= rate <= 96000


def test_vita_json_is_held_to_the_byte_limit_however_short_its_numbers():
    """"0," is two characters: a length check that assumed six per byte let three times the limit through."""
    zeros = json.dumps({"sample_rate": 16000, "audio": [0] * (JSON_MAX_BYTES + 2)}, separators=(",", ":"))
    assert len(zeros) < 6 * JSON_MAX_BYTES  # the old check passed it
    with pytest.raises(AudioFormatError, match="at most"):
        decode_audio_message(zeros, 16000, LIMIT)
    loudest = json.dumps({"sample_rate": 16000, "audio": [255] * JSON_MAX_BYTES})  # "255, " per byte: allowed
    assert decode_audio_message(loudest, 16000, LIMIT)[0].size == JSON_MAX_BYTES // 2


def test_vita_json_messages_are_capped_below_the_binary_limit():
    """A JSON message costs a list and copies of its text: 0.5 s of audio at most (VITA sends 8 ms)."""
    assert JSON_MAX_BYTES < LIMIT
    over = json.dumps({"sample_rate": 16000, "audio": [1] * (JSON_MAX_BYTES + 2)})
    with pytest.raises(AudioFormatError, match=f"at most {JSON_MAX_BYTES} bytes"):
        decode_audio_message(over, 16000, LIMIT)
    assert decode_audio_message(bytes(JSON_MAX_BYTES + 2), 16000, LIMIT)[0].size == JSON_MAX_BYTES // 2 + 1


def test_the_audio_budget_allows_real_time_with_room_and_refuses_a_flood():
    budget = RateBudget(rate=1.5, burst=3.0, now=0.0)
    t = 0.0
    for _ in range(1000):  # 8 s of VITA's 8 ms messages in real time
        t += 0.008
        assert budget.take(0.008, t)
    assert budget.take(2.5, t)  # a stalled connection's backlog arriving at once
    taken = sum(budget.take(0.064, t + i * 0.001) for i in range(1000))  # 64 s of audio in one second
    assert taken * 0.064 < 3.0  # what the burst and a second of 1.5x refill leave, no more
    assert not budget.open(t + 1.0)  # what comes next is refused without being parsed...
    assert not budget.open(t + 1.5)
    assert budget.open(t + 1.0 + 1.0)  # ...until half the burst is back (1.5 s at 1.5x)
    assert budget.take(0.5, t + 1.0 + 2.0)  # after a while the session may send again
