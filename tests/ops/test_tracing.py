"""Traces with OpenTelemetry's in-memory exporter: off costs nothing and says nothing; on, a session's spans form
one tree, the workers' stages join a turn through the traceparent a message carries (each "process" its own
provider, as in the server), and cancelled or failed stages say so. The standard OTEL_* variables decide."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import INVALID_SPAN, StatusCode

from vita.messages import ReplyText, SessionError, Transcript
from vita.ops.session_trace import TURNS_KEPT, SessionTrace
from vita.ops.tracing import Tracing, otlp_exporter, tracing_wanted

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

OTEL_VARIABLES = ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
                  "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def traced(exporter: InMemorySpanExporter, process: str = "front", content: bool = False) -> Tracing:
    return Tracing.for_process(process, content=content, processor=SimpleSpanProcessor(exporter))


def by_name(exporter: InMemorySpanExporter) -> dict[str, list]:
    spans: dict[str, list] = {}
    for span in exporter.get_finished_spans():
        spans.setdefault(span.name, []).append(span)
    return spans


def speech(started: float, ended: float) -> SimpleNamespace:
    return SimpleNamespace(started_at=started, ended_at=ended)


def test_off_by_default_and_every_call_is_a_no_op() -> None:
    tracing = Tracing.for_process("front")
    assert not tracing.on
    span = tracing.start("turn")
    assert span is INVALID_SPAN
    assert tracing.carrier(span) == ""
    assert tracing.record("asr", "", time.monotonic()) is INVALID_SPAN
    with tracing.stage("llm", "") as inside:
        inside.set_attribute("x", 1)  # harmless
    session = SessionTrace(tracing, "socketio", "abc")
    assert session.started(1, speech(1.0, 2.0), "speech", False) == ""
    session.close()


@pytest.mark.parametrize(("variables", "endpoint", "wanted"), [
    ({}, None, False),
    ({}, "http://127.0.0.1:4318", True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, None, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, None, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, None, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, None, False),
    ({"OTEL_TRACES_EXPORTER": "console"}, None, True),
])
def test_the_standard_variables_decide_whether_spans_go_out(monkeypatch: pytest.MonkeyPatch, variables: dict,
                                                            endpoint: str | None, wanted: bool) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert tracing_wanted(endpoint) is wanted


def test_the_configured_endpoint_gets_the_signal_path_the_environment_one_is_the_sdks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert otlp_exporter("http://127.0.0.1:4318", None)._endpoint == "http://127.0.0.1:4318/v1/traces"
    assert otlp_exporter("http://127.0.0.1:4318/v1/traces/", None)._endpoint == "http://127.0.0.1:4318/v1/traces/"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert otlp_exporter("http://ignored:1", None)._endpoint == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    assert isinstance(otlp_exporter(None, "http/protobuf"), OTLPSpanExporter)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    with pytest.raises(ValueError, match="carrier-pigeon"):
        otlp_exporter(None, None)
    assert not Tracing.for_process("front").on  # a protocol nobody speaks: off, said in the log, never a crash


def test_service_name_is_ours_unless_the_operator_names_it(monkeypatch: pytest.MonkeyPatch,
                                                          exported: InMemorySpanExporter) -> None:
    traced(exported, "llm").record("asr", None, time.monotonic())
    resource = exported.get_finished_spans()[0].resource.attributes
    assert resource["service.name"] == "vita-server"
    assert resource["vita.process"] == "llm"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "voice-desk")
    exported.clear()
    traced(exported, "tts").record("tts", None, time.monotonic())
    assert exported.get_finished_spans()[0].resource.attributes["service.name"] == "voice-desk"


def test_a_session_is_one_tree_and_the_workers_join_its_turns(exported: InMemorySpanExporter) -> None:
    front, llm, tts = traced(exported, "front"), traced(exported, "llm"), traced(exported, "tts")
    session = SessionTrace(front, "phone", "5e55")
    now = time.monotonic()
    carrier = session.started(1, speech(now - 2.0, now - 0.4), "speech", speculative=True)
    assert carrier.startswith("00-") and int(carrier[-2:], 16) & 1  # a sampled W3C traceparent
    session.committed(1, speech(now - 2.0, now - 0.3))
    # The workers, each with their own provider, get only the carrier (as a TurnRequest / TtsPiece has it).
    llm.record("asr", carrier, time.monotonic() - 0.2, attributes={"vita.asr.words": 4})
    with llm.stage("llm", carrier) as model:
        llm.record("execute_tool calculate", model, time.monotonic(), attributes={"gen_ai.tool.name": "calculate"})
    tts.record("tts", carrier, time.monotonic())
    session.worker_fact(Transcript("sid", 1, "what is two and two"))
    session.first_audio(1, {"voice_to_voice_s": 0.8123456})
    session.worker_fact(ReplyText("sid", 1, "", done=True, text="Four."))
    session.ended(1, "done", interrupted=False)
    session.close()

    spans = by_name(exported)
    conversation, turn = spans["conversation"][0], spans["turn"][0]
    assert conversation.parent is None
    assert conversation.attributes["vita.door"] == "phone"
    assert conversation.attributes["gen_ai.conversation.id"] == "5e55"
    trace_id = conversation.context.trace_id
    assert all(span.context.trace_id == trace_id for span in exported.get_finished_spans())
    assert turn.parent.span_id == conversation.context.span_id
    for name in ("vad", "end_of_turn", "delivery", "asr", "llm", "tts"):
        assert spans[name][0].parent.span_id == turn.context.span_id, name
    assert spans["execute_tool calculate"][0].parent.span_id == spans["llm"][0].context.span_id
    assert {spans[name][0].resource.attributes["vita.process"] for name in ("asr", "tts", "turn")} == {
        "llm", "tts", "front"}
    assert turn.attributes["vita.turn.speculative"] is False  # committed
    assert turn.attributes["turn.user_bot_latency_seconds"] == 0.8123
    assert turn.attributes["turn.was_interrupted"] is False
    assert turn.attributes["vita.turn.end_reason"] == "done"
    assert turn.attributes["vita.asr.words"] == 5  # (as the front heard of its transcript)
    assert "vita.transcript" not in turn.attributes and "vita.reply" not in turn.attributes  # content is opt-in
    assert abs(spans["vad"][0].start_time - turn.start_time) < 1e6  # the turn begins when the user began speaking
    assert abs(spans["vad"][0].attributes["vita.speech_s"] - 1.6) < 1e-6
    assert 0.25 < spans["end_of_turn"][0].attributes["vita.end_of_speech_s"] < 1.0


def test_content_only_when_the_operator_asks(exported: InMemorySpanExporter) -> None:
    session = SessionTrace(traced(exported, content=True), "socketio", "s")
    session.started(3, None, "text", False)
    session.worker_fact(Transcript("sid", 3, "remember the milk"))
    session.worker_fact(ReplyText("sid", 3, "", done=True, text="I will."))
    session.ended(3, "done", interrupted=False)
    turn = by_name(exported)["turn"][0]
    assert turn.attributes["vita.transcript"] == "remember the milk"
    assert turn.attributes["vita.reply"] == "I will."


def test_an_interrupted_turn_an_error_and_the_sessions_end(exported: InMemorySpanExporter) -> None:
    session = SessionTrace(traced(exported), "realtime", "s")
    now = time.monotonic()
    session.started(1, speech(now - 1, now - 0.5), "speech", False)
    session.first_audio(1, {"voice_to_voice_s": 0.7})
    session.ended(1, "barge-in", interrupted=True)
    session.started(2, speech(now - 0.4, now - 0.1), "speech", False)
    session.worker_fact(SessionError("sid", 2, "llm_failed", "boom"))
    session.close()  # turn 2 never ended: the session's end ends it
    spans = by_name(exported)
    first, second = sorted(spans["turn"], key=lambda s: s.attributes["vita.turn.id"])
    assert first.attributes["turn.was_interrupted"] is True
    assert first.attributes["vita.turn.end_reason"] == "barge-in"
    assert spans["delivery"][0].attributes["vita.interrupted"] is True
    assert second.status.status_code is StatusCode.ERROR
    assert second.attributes["error.type"] == "llm_failed"
    assert second.attributes["vita.turn.end_reason"] == "session ended"
    assert spans["conversation"][0].end_time >= second.end_time


def test_turns_whose_end_never_comes_are_bounded(exported: InMemorySpanExporter) -> None:
    session = SessionTrace(traced(exported), "socketio", "s")
    for turn_id in range(1, TURNS_KEPT + 4):
        session.started(turn_id, None, "text", False)
    assert len(session.turns) == TURNS_KEPT
    lost = [s for s in by_name(exported)["turn"] if s.attributes["vita.turn.end_reason"] == "lost"]
    assert sorted(s.attributes["vita.turn.id"] for s in lost) == [1, 2, 3]


def test_a_stage_cancelled_or_failed_says_so(exported: InMemorySpanExporter) -> None:
    tracing = traced(exported, "llm")
    parent = tracing.carrier(tracing.start("turn"))

    async def cancelled() -> None:
        with tracing.stage("llm", parent):
            await asyncio.sleep(10)

    async def run() -> None:
        task = asyncio.ensure_future(cancelled())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    with pytest.raises(RuntimeError), tracing.stage("asr", parent):
        raise RuntimeError("no ears")
    spans = by_name(exported)
    assert spans["llm"][0].attributes["vita.interrupted"] is True
    assert spans["llm"][0].status.status_code is StatusCode.UNSET
    assert spans["asr"][0].status.status_code is StatusCode.ERROR
    assert spans["asr"][0].status.description == "RuntimeError"  # a message may quote what was said: not without
    content = traced(exported, "llm", content=True)  # content on
    with pytest.raises(RuntimeError), content.stage("asr", parent):
        raise RuntimeError("no ears")
    assert exported.get_finished_spans()[-1].status.description == "RuntimeError: no ears"


def test_a_stage_under_an_untraced_span_makes_no_trace_of_its_own(exported: InMemorySpanExporter) -> None:
    tracing = traced(exported, "llm")
    with tracing.stage("llm", "") as model:  # the turn was not traced: the model's span is no span
        tracing.record("execute_tool calculate", model, time.monotonic())
    assert exported.get_finished_spans() == ()


def test_a_stage_of_an_untraced_turn_makes_no_trace_of_its_own(exported: InMemorySpanExporter) -> None:
    tracing = traced(exported, "tts")
    tracing.record("tts", "", time.monotonic())
    with tracing.stage("llm", ""):
        pass
    assert exported.get_finished_spans() == ()


def test_stage_times_are_the_monotonic_instants_given(exported: InMemorySpanExporter) -> None:
    tracing = traced(exported, "llm")
    now = time.monotonic()
    tracing.record("asr", None, now - 1.5, now - 0.5)
    span = exported.get_finished_spans()[0]
    assert abs((span.end_time - span.start_time) / 1e9 - 1.0) < 0.01
    assert abs(span.end_time / 1e9 - (time.time() - 0.5)) < 0.05


def test_unset_values_are_left_out_not_written_as_empty(exported: InMemorySpanExporter) -> None:
    tracing = traced(exported, "llm")
    span = tracing.start("asr", None, attributes={"vita.transcript": None, "vita.asr.words": 3})
    tracing.note(span, {"vita.reply": None, "vita.asr.misheard": False})
    tracing.end(span, attributes={"vita.tts.voice": None})
    assert dict(exported.get_finished_spans()[0].attributes) == {"vita.asr.words": 3, "vita.asr.misheard": False}
