"""engine.io polling sessions on the front's real HTTP server (in this process, around a small Flask-SocketIO app
with the front's SocketGuard): a polling handshake needs the access token and a place under the connection caps,
and a flood of handshakes that never join costs neither threads nor other users' places."""

from __future__ import annotations

import threading
import time

import pytest
import requests
import socketio
import websocket

from tests.harness.client import wait_until
from tests.web.small_front import small_front
from vita.web.http.access import COOKIE

pytestmark = pytest.mark.fast  # no model: the front's HTTP server and Socket.IO stack around a one-event app

TOKEN = "polling-token-123"
JOIN_S = 1.0  # the join deadline here (the front's is 10 s)
PER_ADDRESS = 4


@pytest.fixture
def front():
    with small_front(TOKEN, join_s=JOIN_S, per_address=PER_ADDRESS) as running:
        yield running


def test_a_polling_handshake_needs_the_access_token(front):
    """VITA's page opens by polling: its handshake gets the same token check as everything else (it used to
    reach engine.io unchecked, session and all)."""
    for refused in ({}, {"params": {"token": "wrong-token-1"}}, {"cookies": {COOKIE: "wrong-token-1"}}):
        assert front.handshake(**refused).status_code == 401, refused
    assert not front.eio.sockets  # a refused handshake opens no engine.io session
    for offered in ({"params": {"token": TOKEN}}, {"cookies": {COOKIE: TOKEN}},
                    {"headers": {"Authorization": f"Bearer {TOKEN}"}}):
        opened = front.handshake(**offered)
        assert opened.status_code == 200 and opened.text.startswith('0{"sid"'), offered
    # Each open session holds a counted place (one may already have been evicted to make room for the next
    # handshake's TCP connection: the per-address cap is small here, and closed connections leave it late).
    assert front.guard.counts()["polling"] == len(front.eio.sockets) >= 2


def test_unjoined_polling_sessions_take_places_under_the_caps_and_no_threads(front):
    """A flood of handshakes that never join: each holds a place under the per-address cap (the oldest unjoined
    make room for newer ones, so no more than the cap are ever open) and costs no thread (each used to start a
    ping thread and a 10 s timer thread, for up to 10 s: without bound under a flood)."""
    front.guard.close(front.open_session())  # engine.io's one service thread, started by the first session
    baseline = threading.active_count()
    sessions = [front.open_session() for _ in range(40)]
    assert len(front.eio.sockets) <= PER_ADDRESS
    assert front.server.connections.counts()["evicted"] >= 40 - PER_ADDRESS
    assert wait_until(lambda: threading.active_count() <= baseline + 1, timeout=3), \
        (baseline, sorted(t.name for t in threading.enumerate()))
    evicted = requests.get(f"{front.url}/socket.io/?EIO=4&transport=polling&sid={sessions[0]}", timeout=5)
    assert evicted.status_code == 400  # really closed, not only forgotten


def test_an_unjoined_polling_session_is_closed_at_its_deadline_and_gives_its_place_back(front):
    sid = front.open_session()
    assert front.guard.counts() == {"polling": 1, "unjoined": 1}
    started = time.monotonic()
    poll = requests.get(f"{front.url}/socket.io/?EIO=4&transport=polling&sid={sid}", timeout=JOIN_S + 5)
    assert poll.text == "1"  # engine.io's CLOSE: the long poll returns when the deadline closes the session
    assert JOIN_S * 0.9 <= time.monotonic() - started < JOIN_S + 2
    assert wait_until(lambda: front.guard.counts() == {"polling": 0, "unjoined": 0})
    assert wait_until(lambda: front.server.connections.counts()["open"] == 0)


def test_a_joined_polling_session_is_busy_and_never_evicted_for_a_newcomer(front):
    """Spoken by hand, one request per connection: no keep-alive connection of the client's own is left idle
    for a newcomer to push out."""
    session = front.joined_session()
    assert wait_until(lambda: front.guard.counts() == {"polling": 1, "unjoined": 0})
    answers = [front.handshake(cookies={COOKIE: TOKEN}).status_code for _ in range(3 * PER_ADDRESS)]
    assert set(answers) <= {200, 503} and 200 in answers  # newcomers push each other out, or are refused
    assert requests.post(session, data='42["echo","still here"]', timeout=5).status_code == 200
    assert requests.get(session, timeout=5).text == '42["echo","still here"]'


def test_an_upgrade_moves_the_sessions_place_onto_its_websocket(front):
    """Polling, then a WebSocket (as VITA's page does): the WebSocket's connection is counted for its life,
    so the session gives its own place back instead of taking two."""
    client = socketio.Client(reconnection=False)
    client.connect(front.url, headers={"Authorization": f"Bearer {TOKEN}"}, wait_timeout=5)
    try:
        assert wait_until(lambda: client.transport() == "websocket" and front.guard.counts()["polling"] == 0)
        assert wait_until(lambda: front.server.connections.counts()["busy"] == 1)  # the WebSocket (its last poll
        # answered): one place for one session
    finally:
        client.disconnect()


def test_a_failed_upgrade_leaves_the_session_counted(front):
    """A session that gives its place to its WebSocket takes one again if the upgrade fails and it polls on."""
    session = front.joined_session()
    ws = websocket.create_connection(session.replace("http", "ws").replace("polling", "websocket"), timeout=5)
    try:
        assert front.guard.counts()["polling"] == 0  # on its way to the WebSocket, whose connection counts
        ws.send("5")  # UPGRADE without the probe first: engine.io gives the upgrade up, the session polls on
        with pytest.raises(websocket.WebSocketConnectionClosedException):
            while True:
                ws.recv()
    finally:
        ws.close()
    assert wait_until(lambda: front.guard.counts()["polling"] == 1)  # back in its own place, still busy:
    assert wait_until(lambda: (c := front.server.connections.counts())["open"] == 1 and c["busy"] == 1)
    assert requests.post(session, data='42["echo","polling on"]', timeout=5).status_code == 200
    assert requests.get(session, timeout=5).text == '42["echo","polling on"]'
