"""The Redis channel that joins front processes carries JSON only: a pickle (or anything else not shaped like a
Socket.IO pub/sub message) published there is dropped with a rate-limited warning and never unpickled, against a
real Redis server (Debian's redis-server on loopback)."""

from __future__ import annotations

import logging
import pickle
import shutil
import subprocess
import time

import pytest
import redis

from tests.harness.client import wait_until
from tests.harness.server import free_port
from vita.web.message_queue import CHANNEL, WARN_EVERY_S, DropLog, JsonRedisManager, decode, encode, socketio_options

pytestmark = pytest.mark.fast  # no model: Redis and the queue's codec


class CreatesFile:
    """A payload whose unpickling creates a file (what an attacker's would do instead: run anything)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    binary = shutil.which("redis-server")
    assert binary, "redis-server is missing (scripts/test.sh installs Debian's)"
    tmp = tmp_path_factory.mktemp("redis")
    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no", "--dir", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    assert wait_until(answers, 10, 0.05), "redis-server did not start"
    yield url
    process.terminate()
    process.wait(10)


def emit_message(**fields) -> dict:
    return {"method": "emit", "event": "notice", "data": [{"message": "hi"}], "namespace": "/", "room": None,
            "skip_sid": None, "callback": None, "host_id": "other-front", **fields}


def test_the_front_and_announce_get_the_json_only_manager():
    options = socketio_options("redis://127.0.0.1:1/0")
    assert isinstance(options["client_manager"], JsonRedisManager) and not options["client_manager"].write_only
    assert options["client_manager"].channel == CHANNEL
    assert socketio_options("redis://127.0.0.1:1/0", write_only=True)["client_manager"].write_only
    assert socketio_options(None) == {}


def test_pubsub_messages_round_trip_with_bytes_as_tagged_base64():
    for message in (emit_message(), emit_message(data=[{"pcm": b"\x00\xff\x80"}, "x"], room=["a", "b"]),
                    emit_message(callback=["sid1", "/", 3]),
                    {"method": "disconnect", "sid": "s", "namespace": "/", "host_id": "h"},
                    {"method": "enter_room", "sid": "s", "room": "r", "namespace": "/", "host_id": "h"},
                    {"method": "leave_room", "sid": "s", "room": "r", "namespace": "/", "host_id": "h"},
                    {"method": "close_room", "room": "r", "namespace": "/", "host_id": "h"},
                    {"method": "callback", "sid": "s", "namespace": "/", "id": 1, "args": [1, "a"], "host_id": "h"}):
        text = encode(message)
        assert isinstance(text, str) and b"\x00" not in text.encode()
        assert decode(text.encode()) == (message, "")
    # python-socketio's own binary emit: the packet, then its attachments as base64 text
    binary = emit_message(data=[{"pcm": {"_placeholder": True, "num": 0}}, "AP8="], binary=True)
    assert decode(encode(binary))[0] == binary


@pytest.mark.parametrize("raw, why", [
    (pickle.dumps({"method": "emit"}), "not JSON"),
    (b"[1, 2]", "not an object"),
    (b'{"method": "eval", "host_id": "h"}', "unknown method"),
    (b'{"method": ["emit"], "host_id": "h"}', "unknown method"),
    (encode(emit_message(event=5)), "bad 'event'"),
    (encode(emit_message(data="not a list")), "bad 'data'"),
    (encode(emit_message(callback=["sid", "/", "1"])), "bad 'callback'"),
    (encode(emit_message(binary=True, data=[{}, 5])), "binary"),
    (b'{"method": "disconnect", "namespace": "/", "host_id": "h"}', "bad 'sid'"),
    (b'{"method": "emit", "data": [{"__vita_bytes__": "!!"}]}', "not JSON"),
    (b"[" * 100000 + b"]" * 100000, "not JSON"),
])
def test_anything_else_is_refused_with_a_reason(raw, why):
    message, reason = decode(raw)
    assert message is None and why in reason, reason


def test_dropped_messages_are_warned_about_once_a_minute_with_a_count(caplog):
    now = [100.0]
    drops = DropLog(CHANNEL, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="vita.web.message_queue"):
        for _ in range(5):
            drops.drop("not JSON (JSONDecodeError)")
        now[0] += WARN_EVERY_S
        drops.drop("unknown method 'x'")
    warnings = [r.getMessage() for r in caplog.records if r.name == "vita.web.message_queue"]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("dropped 1 message(s) on the Redis channel 'vita'")
    assert warnings[1].startswith("dropped 5 message(s)") and "unknown method 'x'" in warnings[1]
    assert drops.total == 6


class OneSubscription(JsonRedisManager):
    """The front's manager, except that its listening ends at a b"stop" message (ending the manager's thread)
    instead of reconnecting for ever."""

    def _redis_listen_with_retries(self):
        self._redis_connect()
        self.pubsub.subscribe(self.channel)
        for message in self.pubsub.listen():
            if message.get("data") == b"stop":
                return
            yield message


def test_a_pickle_published_on_the_channel_is_never_unpickled(redis_url, tmp_path, caplog):
    """The manager's own listening thread, as a front runs it: the JSON emit is handled, the pickle dropped."""
    import socketio

    target = tmp_path / "pwned"
    manager = OneSubscription(redis_url, CHANNEL)
    socketio.Server(async_mode="threading", client_manager=manager)
    handled: list[dict] = []
    manager._handle_emit = handled.append  # what the thread hands an emit from another front to
    publisher = redis.Redis.from_url(redis_url)
    with caplog.at_level(logging.WARNING, logger="vita.web.message_queue"):
        manager.initialize()  # starts the listening thread
        assert wait_until(lambda: publisher.pubsub_numsub(CHANNEL)[0][1] == 1, 5)
        publisher.publish(CHANNEL, pickle.dumps(CreatesFile(str(target))))
        publisher.publish(CHANNEL, encode(emit_message()))
        publisher.publish(CHANNEL, b"stop")
        manager.thread.join(5)
    assert not manager.thread.is_alive()
    assert not target.exists()
    assert handled == [emit_message()]
    warned = [r.getMessage() for r in caplog.records if r.name == "vita.web.message_queue"]
    assert len(warned) == 1 and warned[0].startswith("dropped 1 message(s) on the Redis channel 'vita'"), warned
    assert manager.drops.total == 1


def test_what_the_manager_publishes_is_json(redis_url):
    listener = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    listener.subscribe(CHANNEL)
    manager = JsonRedisManager(redis_url, CHANNEL, write_only=True)
    manager._publish(emit_message(data=[{"pcm": b"\x01\x02"}]))
    deadline = time.monotonic() + 5
    message = None
    while message is None and time.monotonic() < deadline:
        message = listener.get_message(timeout=0.5)
    listener.close()
    assert message is not None and decode(message["data"]) == (emit_message(data=[{"pcm": b"\x01\x02"}]), "")
