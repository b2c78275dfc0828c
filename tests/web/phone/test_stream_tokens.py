"""The stream tokens the phone door's webhook mints: signed, for one provider, short-lived, single-use, bound to the
webhook's call when it named one; every malformed, forged, spent or expired one refused. Pure logic."""

from __future__ import annotations

import re
import string

import pytest

from vita.web.phone.route import TOKEN_TTL_S, StreamTokens

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

B64URL = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"


# --- stream tokens -------------------------------------------------------------------------------------------------
class Clock:
    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_token_minted_for_no_call_spends_once_for_any_call():
    tokens = StreamTokens()
    token = tokens.mint("twilio")
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", token)  # fits a URL's path as it is
    assert tokens.valid(token, "twilio") and tokens.valid(token, "twilio")  # valid() spends nothing
    assert tokens.spend(token, "twilio", "CA-any") is False  # ours, bound to no call
    assert tokens.valid(token, "twilio") is False
    assert tokens.spend(token, "twilio", "CA-any") is None  # single-use
    fresh = tokens.mint("twilio")
    assert fresh != token and tokens.spend(fresh, "twilio", "CA-other") is False  # each mint is a token of its own


def test_a_token_bound_to_a_call_spends_only_for_that_call():
    tokens = StreamTokens()
    token = tokens.mint("twilio", "CA1")
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", token)
    assert tokens.spend(token, "twilio", "CA2") is None  # another call's stream
    assert tokens.spend(token, "twilio", "") is None  # a stream that names no call
    assert tokens.valid(token, "twilio") is True  # ...and those refusals spent nothing
    assert tokens.spend(token, "twilio", "CA1") is True
    assert tokens.valid(token, "twilio") is False
    assert tokens.spend(token, "twilio", "CA1") is None  # single-use


def test_tokens_spend_in_any_order():
    tokens = StreamTokens()
    first, second = tokens.mint("twilio", "CA1"), tokens.mint("twilio", "CA2")
    assert tokens.spend(second, "twilio", "CA2") is True and tokens.spend(first, "twilio", "CA1") is True
    assert tokens.spend(first, "twilio", "CA1") is None and tokens.spend(second, "twilio", "CA2") is None


def test_a_token_is_for_the_provider_it_was_minted_for():
    tokens = StreamTokens()
    token = tokens.mint("twilio", "CA1")
    for other in ("telnyx", "plivo", ""):
        assert tokens.valid(token, other) is False and tokens.spend(token, other, "CA1") is None
    assert tokens.spend(token, "twilio", "CA1") is True


def test_a_tampered_token_is_refused():
    tokens = StreamTokens()
    token = tokens.mint("twilio", "CA1")
    for i in (0, 10, 20, 30, 45, len(token) - 1):  # the nonce, the expiry, the call, the signature
        # (+4: the last character carries only its 4 high bits; a change there must touch them)
        flipped = token[:i] + B64URL[(B64URL.index(token[i]) + 4) % 64] + token[i + 1:]
        assert tokens.valid(flipped, "twilio") is False and tokens.spend(flipped, "twilio", "CA1") is None
    for cut in (token[:-1], token + "A", token[1:]):
        assert tokens.valid(cut, "twilio") is False and tokens.spend(cut, "twilio", "CA1") is None
    assert tokens.spend(token, "twilio", "CA1") is True  # the refusals spent nothing


def test_a_token_of_another_front_is_refused():
    ours, theirs = StreamTokens(), StreamTokens()
    token = theirs.mint("twilio", "CA1")
    assert ours.valid(token, "twilio") is False and ours.spend(token, "twilio", "CA1") is None
    assert theirs.spend(token, "twilio", "CA1") is True


@pytest.mark.parametrize("token", [None, "", "garbage", "!!!!", "é" * 48, "A" * 48, "A" * 59, "A" * 65, "A" * 100_000,
                                   12345, b"bytes"])
def test_what_is_no_token_is_refused(token):
    tokens = StreamTokens()
    assert tokens.valid(token, "twilio") is False
    assert tokens.spend(token, "twilio", "CA1") is None and tokens.spend(token, "twilio", "") is None


def test_an_overlong_token_is_refused_even_when_it_decodes_to_a_good_one():
    tokens = StreamTokens()
    token = tokens.mint("twilio")
    padded = token + "=" * (65 - len(token))  # 65 characters: not read at all
    assert tokens.valid(padded, "twilio") is False and tokens.spend(padded, "twilio", "CA1") is None
    assert tokens.spend(token, "twilio", "CA1") is False  # (still unspent: it spends, bound to no call)


def test_another_spelling_of_a_spent_token_does_not_spend_it_again():
    tokens = StreamTokens()
    token = tokens.mint("twilio")
    last = B64URL.index(token[-1])
    spellings = [token[:-1] + B64URL[last + 1], token + "="]  # the same bytes, written otherwise
    assert tokens.spend(token, "twilio", "") is False
    for spelling in spellings:
        assert tokens.valid(spelling, "twilio") is False and tokens.spend(spelling, "twilio", "") is None


def test_an_expired_token_is_refused():
    clock = Clock()
    tokens = StreamTokens(ttl_s=60.0, clock=clock)
    late, in_time = tokens.mint("twilio", "CA1"), tokens.mint("twilio", "CA2")
    clock.now += 59.0
    assert tokens.valid(late, "twilio") is True
    assert tokens.spend(in_time, "twilio", "CA2") is True
    clock.now += 2.0
    assert tokens.valid(late, "twilio") is False and tokens.spend(late, "twilio", "CA1") is None
    assert StreamTokens().ttl_s == TOKEN_TTL_S <= 120  # short-lived by default


def test_spent_tokens_are_forgotten_once_they_expire():
    clock = Clock()
    tokens = StreamTokens(ttl_s=60.0, clock=clock)
    for i in range(5):
        assert tokens.spend(tokens.mint("twilio", f"CA{i}"), "twilio", f"CA{i}") is True
    assert len(tokens.spent) == 5
    clock.now += 61.0
    assert tokens.spend(tokens.mint("twilio"), "twilio", "CA9") is False
    assert len(tokens.spent) == 1  # what it remembers stays bounded by what was minted within the TTL


