"""vita/turns/worker_news.py: what of a worker's output a client is told. No model."""

from __future__ import annotations

import pytest

from vita import client_events, messages
from vita.turns.worker_news import client_event_for

pytestmark = pytest.mark.fast


def test_the_prefix_caches_count_stays_in_the_server():
    """The cache is shared by every session: its count would tell a user about another's conversation."""
    event = client_event_for(messages.TurnTimings("s", 3, "llm", {"first_token_s": 0.2, "cached_tokens": 41.0}))
    assert event == client_events.Timings(3, "llm", {"first_token_s": 0.2})
    for key in ("words_unread", "words_logprob"):  # set by whether the cache held the words
        event = client_event_for(messages.TurnTimings("s", 3, "llm", {"first_token_s": 0.2, key: 1.0}))
        assert event == client_events.Timings(3, "llm", {"first_token_s": 0.2})


def test_a_scene_carries_its_picture_as_a_data_url_and_the_reply_itself_is_not_told_here():
    event = client_event_for(messages.SceneSeen("s", 2, "a cup", text=("OPEN",), image=b"\xff\xd8jpeg"))
    assert isinstance(event, client_events.SceneSeen) and event.image.startswith("data:image/jpeg;base64,")
    assert event.text == ("OPEN",)
    assert client_event_for(messages.ReplyText("s", 2, "Paris.", done=True, text="Paris.")) is None  # waits to be heard
