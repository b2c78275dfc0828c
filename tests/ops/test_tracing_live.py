"""Seeing inside turns, end to end. Traces: a real server (front, LLM worker, TTS worker) exports over OTLP/HTTP, as
it would to Jaeger, to a collector of ours (tests/harness/otlp_collector.py), configured only by the standard OTEL_*
variables; a real spoken question makes one trace whose stages come from all three processes under one turn, and a
turn that calls a tool shows the call under the model's span. Recording: a user who switches it on gets each turn
in a folder (what was heard, the prompt, the reply), linked from the turn log and bundled for a bug report."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import wave

import numpy as np
import pytest

from tests.harness.client import RecordingClient
from tests.harness.otlp_collector import CollectedSpan, OtlpCollector, tree
from tests.harness.server import ROOT, start_server, stop_server, wait_health, wait_ready
from tests.harness.speech import silence, spoken, stream

REPLY_S = 90  # a reply on two busy cores


@pytest.fixture(scope="module")
def collector():
    running = OtlpCollector()
    yield running
    running.close()


@pytest.fixture(scope="module")
def traced_server(tmp_path_factory, vllm_api_starting, collector):
    running = start_server(tmp_path_factory.mktemp("traced"), "--llm_url", vllm_api_starting.url,
                           env=collector.environment())
    try:
        wait_ready(running)
        yield running
    finally:
        stop_server(running)


def one_session(server, collector: OtlpCollector, act) -> list[CollectedSpan]:
    """Open a session, let ``act`` drive it, close it; the trace of that session once its conversation span (sent
    when the session ends) has come."""
    wait_health(server, lambda h: not h["sessions"], timeout=15)
    before = {span.span_id for span in collector.snapshot()}
    client = RecordingClient(server.url).connect()
    try:
        act(client)
    finally:
        client.close()
    spans = collector.wait_for(lambda spans: any(s.name == "conversation" and s.span_id not in before
                                                 for s in spans), timeout=30)
    (conversation,) = [s for s in spans if s.name == "conversation" and s.span_id not in before]
    return [s for s in spans if s.trace_id == conversation.trace_id]


def answered(client: RecordingClient, turn_id: int = 1) -> None:
    assert client.wait_for(lambda evs: any(n == "state" and d == {"state": "listening", "turn_id": turn_id}
                                           for _, n, d in evs), REPLY_S), client.story()


def named(spans: list[CollectedSpan], name: str) -> CollectedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def test_a_spoken_turn_is_one_trace_with_every_stage_of_all_three_processes(traced_server, collector):
    def ask(client: RecordingClient) -> None:
        audio = np.concatenate([silence(0.8), spoken("What is the capital of France?"), silence(1.2)])
        stream(client.sio, audio, chunk_ms=8)  # VITA's page's JSON messages
        answered(client)

    spans = one_session(traced_server, collector, ask)
    conversation, turn = named(spans, "conversation"), named(spans, "turn")
    assert conversation.parent_id == "" and conversation.process == "front"
    assert conversation.attributes["vita.door"] == "socketio"
    assert conversation.resource["service.name"] == "vita-server"
    assert turn.parent_id == conversation.span_id
    stages = {name: named(spans, name) for name in ("vad", "end_of_turn", "asr", "llm", "tts", "delivery")}
    for name, span in stages.items():
        assert span.parent_id == turn.span_id, name
        assert turn.start_ns <= span.start_ns <= span.end_ns <= conversation.end_ns, name
    assert {name: span.process for name, span in stages.items()} == {
        "vad": "front", "end_of_turn": "front", "delivery": "front", "asr": "llm", "llm": "llm", "tts": "tts"}
    # In the order a turn happens: the user speaks, stops, is heard, answered, voiced, played.
    assert stages["vad"].end_ns <= stages["end_of_turn"].end_ns <= stages["asr"].end_ns <= stages["llm"].end_ns
    assert stages["llm"].start_ns <= stages["tts"].start_ns and stages["tts"].start_ns <= stages["delivery"].start_ns
    assert 1.0 < stages["vad"].seconds < 4.0  # the question as spoken, about two seconds
    assert turn.attributes["vita.turn.end_reason"] == "done" and turn.attributes["turn.was_interrupted"] is False
    assert 0 < turn.attributes["turn.user_bot_latency_seconds"] < 30
    assert turn.attributes["vita.asr.words"] >= 4
    model = stages["llm"].attributes
    assert model["gen_ai.operation.name"] == "chat" and model["gen_ai.request.model"]
    assert model["gen_ai.usage.input_tokens"] > 20 and model["gen_ai.usage.output_tokens"] > 0
    assert 0 < model["vita.first_token_s"] < 30
    assert stages["asr"].attributes["vita.asr.words"] >= 4
    assert stages["tts"].attributes["vita.tts.audio_s"] > 0.3 and stages["tts"].attributes["vita.interrupted"] is False
    # Content is the operator's choice, and off here: no words of either side in any span.
    for span in spans:
        assert not {"vita.transcript", "vita.reply"} & set(span.attributes), span.name
        assert "paris" not in repr(span.attributes).lower() and "france" not in repr(span.attributes).lower()
    names = [span.name for _, span in tree(spans, conversation)]
    assert len(names) == len(spans)  # every span of the session hangs from its conversation


def test_a_tool_call_is_a_span_under_the_models(traced_server, collector):
    def ask(client: RecordingClient) -> None:
        client.sio.emit("text_input", {"text": "What is 347 times 29?"})
        answered(client)
        assert any("10063" in str(d) for d in client.named("tool_call")), client.story()

    spans = one_session(traced_server, collector, ask)
    model, tool = named(spans, "llm"), named(spans, "execute_tool calculate")
    assert tool.parent_id == model.span_id and tool.process == "llm"
    assert tool.attributes["gen_ai.tool.name"] == "calculate" and tool.attributes["vita.tool.outcome"] == "ok"
    assert model.start_ns <= tool.start_ns <= tool.end_ns <= model.end_ns
    assert model.attributes["vita.tool_calls"] == 1
    assert named(spans, "turn").attributes["vita.turn.source"] == "text"


def test_a_user_who_records_gets_each_turn_in_a_folder_for_a_bug_report(traced_server, tmp_path):
    wait_health(traced_server, lambda h: not h["sessions"], timeout=15)
    client = RecordingClient(traced_server.url).connect()
    try:
        assert client.wait_event("server_status", 10)
        session = next(d["session"] for d in client.named("server_status") if d.get("session"))
        client.sio.emit("client_settings", {"record_turns": "yes"})  # not a boolean: refused, readably
        assert client.wait_for(lambda evs: any(n == "error" and d["code"] == "bad_settings" for _, n, d in evs), 10)
        client.sio.emit("client_settings", {"record_turns": True})
        assert client.wait_for(lambda evs: any(n == "client_settings" and d["record_turns"] for _, n, d in evs), 10)
        audio = np.concatenate([silence(0.8), spoken("What is the capital of France?"), silence(1.2)])
        stream(client.sio, audio, chunk_ms=8)
        answered(client)
    finally:
        client.close()
    (folder,) = (traced_server.state_dir / "recordings" / session).iterdir()
    assert client.wait_for(lambda _: (folder / "turn.json").exists(), 10)
    turn = json.loads((folder / "turn.json").read_text())
    assert "capital" in turn["transcript"].lower() and "paris" in turn["reply"].lower(), turn
    assert turn["end_reason"] == "done" and {"front", "llm", "tts"} <= set(turn["timings"])
    with wave.open(str(folder / "heard.wav")) as heard:
        assert heard.getframerate() == 16000 and 1.0 < heard.getnframes() / 16000 < 4.0  # the question as cut
    with wave.open(str(folder / "reply.wav")) as reply:
        assert reply.getframerate() == 24000 and reply.getnframes() / 24000 > 0.5
    prompt = json.loads((folder / "prompt.json").read_text())
    assert "capital" in prompt["user_text"].lower()
    assert "capital" in json.dumps(prompt["messages"]).lower()  # what the model was given
    rows = subprocess.run([sys.executable, "scripts/export_turns.py", "--db",
                           str(traced_server.state_dir / "turns.sqlite3"), "--session", session],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    (row,) = json.loads(rows.stdout)["turns"]
    assert row["recording"] == str(folder)  # the turn log links it
    out = tmp_path / "bug.tar.gz"
    subprocess.run([sys.executable, "scripts/export_turns.py", "--db", str(traced_server.state_dir / "turns.sqlite3"),
                    "--session", session, "--bundle", str(out)], cwd=ROOT, check=True, capture_output=True)
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
    assert {f"{session}/turns.json", f"{session}/{folder.name}/heard.wav", f"{session}/{folder.name}/reply.wav",
            f"{session}/{folder.name}/prompt.json", f"{session}/{folder.name}/turn.json"} <= names


def test_a_session_that_does_not_record_leaves_no_recording(traced_server):
    before = set((traced_server.state_dir / "recordings").glob("*/*"))
    wait_health(traced_server, lambda h: not h["sessions"], timeout=15)
    client = RecordingClient(traced_server.url).connect()
    try:
        client.sio.emit("text_input", {"text": "Say hello."})
        answered(client)
    finally:
        client.close()
    assert set((traced_server.state_dir / "recordings").glob("*/*")) == before
