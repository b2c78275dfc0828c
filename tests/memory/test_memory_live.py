"""Memory end to end, on the shared server, each test with users of its own (cookies never given out before): what a
user says in one session is known in their next one and to nobody else; explicit requests work; the page's panel
lists, deletes one and deletes all; "forget" and "delete all" leave nothing in the file; off the record leaves
nothing at all; a client with no key is told it is not remembered."""

from __future__ import annotations

import pytest

from tests.harness.client import RecordingClient
from vita.memory.answers import NO_KEY, OFF_RECORD
from vita.memory.user_keys import COOKIE, new_user_id

REPLY_S = 90


def session(server, user: str | None) -> RecordingClient:
    headers = {"Cookie": f"{COOKIE}={user}"} if user else None
    client = RecordingClient(server.url).connect(headers=headers)
    assert client.wait_for(lambda evs: any(n == "server_status" and d.get("ready") for _, n, d in evs), 30)
    return client


def say(client: RecordingClient, text: str) -> str:
    """Type a turn, wait until its reply has been played out, and return the reply's text."""
    turns = len(client.named("turn"))
    client.sio.emit("text_input", {"text": text})
    assert client.wait_for(lambda evs: len([e for e in evs if e[1] == "turn"]) > turns, 30), client.story()
    turn_id = client.named("turn")[-1]["turn_id"]
    assert client.wait_for(lambda evs: any(n == "state" and d == {"state": "listening", "turn_id": turn_id}
                                           for _, n, d in evs), REPLY_S), client.story()
    return [d for d in client.named("response_text") if d["turn_id"] == turn_id][-1]["text"]


def panel(client: RecordingClient, event: str = "memory", data: dict | None = None) -> dict:
    seen = len(client.named("memory"))
    client.sio.emit(event, data or {})
    assert client.wait_for(lambda evs: len([e for e in evs if e[1] == "memory"]) > seen, 10), client.story()
    return client.named("memory")[-1]


def in_file(server, word: str) -> bool:
    path = server.state_dir / "memory.sqlite3"
    return any(word.encode() in p.read_bytes() for p in (path, path.with_name(path.name + "-journal")) if p.exists())


@pytest.fixture
def quiet(server):
    from tests.harness.server import wait_no_sessions

    wait_no_sessions(server)
    return server


def test_a_user_is_remembered_in_their_next_session_and_by_nobody_else(quiet):
    anna, other = new_user_id(), new_user_id()
    first = session(quiet, anna)
    try:
        say(first, "Hi, my name is Zoltan and I live in Lyon.")
        assert say(first, "Remember that I'm allergic to peanuts.") == \
            "Okay, I'll remember that you're allergic to peanuts."
    finally:
        first.close()
    again = session(quiet, anna)
    try:
        facts = [f["text"] for f in panel(again)["facts"]]
        assert facts == ["my name is Zoltan", "I live in Lyon", "I'm allergic to peanuts"], facts
        assert "zoltan" in say(again, "What is my name?").lower()
        recalled = say(again, "What do you know about me?").lower()
        assert "zoltan" in recalled and "lyon" in recalled and "peanuts" in recalled, recalled
    finally:
        again.close()
    stranger = session(quiet, other)
    try:
        assert panel(stranger)["facts"] == []
        assert "zoltan" not in say(stranger, "What is my name?").lower()
        assert say(stranger, "What do you know about me?").startswith("I don't know anything about you yet")
    finally:
        stranger.close()
    nobody = session(quiet, None)  # a client that sends no cookie (a script): not remembered, and told so
    try:
        assert panel(nobody) == {"enabled": False, "facts": [], "off_record": False}  # (and no key to show)
        assert say(nobody, "Remember that my name is Zoltan.") == NO_KEY
    finally:
        nobody.close()


def test_forget_delete_one_and_delete_all_leave_nothing_in_the_file(quiet):
    user = session(quiet, new_user_id())
    try:
        say(user, "Remember that my sister is called Quintessa.")
        say(user, "Remember that I collect xylophones.")
        say(user, "My favourite colour is vermilion.")
        assert in_file(quiet, "Quintessa") and in_file(quiet, "xylophones") and in_file(quiet, "vermilion")
        assert say(user, "Forget about my sister.") == "Okay, I've forgotten that your sister is called Quintessa."
        assert not in_file(quiet, "Quintessa")
        facts = panel(user)["facts"]
        (xylophones,) = [f for f in facts if "xylophones" in f["text"]]
        assert [f["text"] for f in panel(user, "memory_forget", {"id": xylophones["id"]})["facts"]] == [
            "My favourite colour is vermilion"]
        assert not in_file(quiet, "xylophones")
        assert panel(user, "memory_forget_all")["facts"] == []
        assert not in_file(quiet, "vermilion")
        user.sio.emit("memory_forget", {"id": "nine"})  # not an id: refused, readably
        assert user.wait_for(lambda evs: any(n == "error" and d["code"] == "bad_memory" for _, n, d in evs), 10)
    finally:
        user.close()


def test_off_the_record_leaves_nothing(quiet):
    user = session(quiet, new_user_id())
    try:
        user.sio.emit("client_settings", {"off_record": True})
        assert user.wait_for(lambda evs: any(n == "client_settings" and d.get("off_record") for _, n, d in evs), 10)
        say(user, "My name is Ulrich and I live in Tromso.")
        assert say(user, "Remember that I like rooibos tea.") == OFF_RECORD
        shown = panel(user)
        assert shown["enabled"] and shown["facts"] == [] and shown["off_record"] and len(shown["user"]) == 32
        assert not in_file(quiet, "Ulrich") and not in_file(quiet, "rooibos")
    finally:
        user.close()


def test_a_realtime_apps_user_is_remembered_when_its_backend_names_them(quiet):
    """An app's backend mints each connection's client key naming its user; its next connection is the same user,
    another user's is not."""
    import requests

    from tests.harness.realtime_client import RealtimeClient

    def key(user: str) -> str:
        minted = requests.post(quiet.url + "/v1/realtime/client_secrets", json={
            "user": user, "session": {"type": "realtime", "output_modalities": ["text"]}}, verify=False, timeout=10)
        assert minted.status_code == 200, minted.text
        return minted.json()["value"]

    def ask(token: str, text: str) -> str:
        from tests.harness.server import wait_no_sessions

        wait_no_sessions(quiet)
        rt = RealtimeClient(quiet.url, token=token, model="gpt-realtime")
        try:
            rt.wait_type("session.created")
            rt.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}})
            rt.send({"type": "response.create"})
            rt.wait_type("response.done", timeout=REPLY_S)
            return rt.of("response.output_text.done")[-1]["text"]
        finally:
            rt.close()

    user = f"customer-{new_user_id()}"
    assert ask(key(user), "Remember that I collect seashells.") == "Okay, I'll remember that you collect seashells."
    assert "seashells" in ask(key(user), "What do you know about me?").lower()
    assert "seashells" not in ask(key(f"customer-{new_user_id()}"), "What do you know about me?").lower()
