"""OpenTelemetry traces, one process's share: a span per session (``conversation``), a child per turn, and children
per stage, the workers' joined to the turn's trace by the W3C ``traceparent`` the queue messages carry.

Off unless the operator asks (the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
or ``tracing.endpoint`` in the configuration); off, every call here is a no-op that allocates nothing. The other
standard variables (protocol, headers, ``OTEL_SERVICE_NAME``, the sampler, the batch processor's delays) are the
SDK's to read, as every OpenTelemetry service does. Stages are recorded as they end, with the times they began
(monotonic seconds, as the stages keep them), so no span is left open across a process's queues.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("vita.ops.tracing")

SERVICE = "vita-server"
PROTOCOLS = ("http/protobuf", "grpc")
EXPORTERS = ("otlp", "console", "none")
_PROPAGATOR = TraceContextTextMapPropagator()
Attributes = Mapping[str, Any]


def wall_ns(monotonic_s: float) -> int:
    """A monotonic instant (how every stage keeps time) as the epoch nanoseconds a span wants."""
    return time.time_ns() - int((time.monotonic() - monotonic_s) * 1e9)


def _environment_endpoint() -> str | None:
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None


def tracing_wanted(endpoint: str | None) -> bool:
    """Whether this process exports spans: an OTLP endpoint from the environment or the configuration, unless the
    standard switches turn the SDK or its trace exporter off."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    if exporter == "console":
        return True
    return bool(endpoint or _environment_endpoint())


def otlp_exporter(endpoint: str | None, protocol: str | None) -> SpanExporter:
    """The OTLP exporter the standard variables ask for (``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``, else
    ``protocol``, else http/protobuf as the specification says); ``endpoint`` (the configuration's) only where the
    environment names none."""
    chosen = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
              or protocol or "http/protobuf").strip().lower()
    if chosen not in PROTOCOLS:
        raise ValueError(f"OTLP protocol {chosen!r} is not one of {', '.join(PROTOCOLS)}")
    from_env = _environment_endpoint()
    if chosen == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter() if from_env else GrpcExporter(endpoint=endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    if from_env or not endpoint:
        return HttpExporter()
    # A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is one: the signal's path goes after it.
    return HttpExporter(endpoint=endpoint if endpoint.rstrip("/").endswith("/v1/traces")
                        else endpoint.rstrip("/") + "/v1/traces")


class Tracing:
    """This process's tracer, and the few ways the stages use it. ``Tracing.off()`` when nobody asked for traces."""

    def __init__(self, provider: TracerProvider | None, content: bool = False):
        self.provider = provider
        self.on = provider is not None
        self.content = content  # spans may carry what was said (transcript, reply): the operator's choice
        self.tracer = provider.get_tracer("vita") if provider is not None else trace.NoOpTracer()

    @classmethod
    def off(cls) -> Tracing:
        return cls(None)

    @classmethod
    def for_process(cls, process: str, endpoint: str | None = None, protocol: str | None = None,
                    content: bool = False, processor: SpanProcessor | None = None) -> Tracing:
        """The tracer of one of the server's processes (front, llm, tts), exporting as the environment and the
        configuration say; ``processor`` replaces the exporter (a test's in-memory one)."""
        if processor is None and not tracing_wanted(endpoint):
            return cls.off()
        resource = Resource.create({"vita.process": process, "process.pid": os.getpid()})
        if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
                "OTEL_RESOURCE_ATTRIBUTES", ""):
            resource = resource.merge(Resource({"service.name": SERVICE}))
        provider = TracerProvider(resource=resource)  # (the sampler: OTEL_TRACES_SAMPLER, else parent-based, all)
        if processor is None:
            console = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console"
            try:
                exporter = ConsoleSpanExporter() if console else otlp_exporter(endpoint, protocol)
            except (ValueError, ImportError) as exc:
                log.error("traces are off: %s", exc)
                return cls.off()
            processor = BatchSpanProcessor(exporter)
            log.info("traces on: %s", "to the console" if console else f"OTLP to {_environment_endpoint() or endpoint}")
        provider.add_span_processor(processor)
        return cls(provider, content)

    # --- spans ------------------------------------------------------------------------------------------------
    def start(self, name: str, parent: Span | str | None = None, at: float | None = None,
              attributes: Attributes | None = None) -> Span:
        """A span that goes on (end it with ``end``): a child of ``parent`` (a span, or a carried traceparent; None:
        a new trace; "": none, the stage of a turn that was not traced), begun at the monotonic instant ``at``
        (None: now)."""
        if not self.on or parent == "" or (isinstance(parent, Span) and not parent.get_span_context().is_valid):
            return trace.INVALID_SPAN  # a stage of a turn nobody traced (the front's traces are off)
        return self.tracer.start_span(name, context=self._context(parent), attributes=_clean(attributes),
                                      start_time=wall_ns(at) if at is not None else None)

    def record(self, name: str, parent: Span | str | None, began: float, ended: float | None = None,
               attributes: Attributes | None = None, error: str | None = None) -> Span:
        """A stage that is over: from ``began`` to ``ended`` (monotonic; None: now)."""
        if not self.on:
            return trace.INVALID_SPAN
        span = self.start(name, parent, began, attributes)
        self.end(span, ended, error=error)
        return span

    @contextlib.contextmanager
    def stage(self, name: str, parent: Span | str | None, attributes: Attributes | None = None) -> Iterator[Span]:
        """A stage's span around the code it takes: cancelled (a barge-in) it says ``vita.interrupted``, failed it
        carries the error (its type; its message only with content on); attributes set on it meanwhile are kept."""
        span = self.start(name, parent, attributes=attributes)
        try:
            yield span
        except BaseException as exc:  # (asyncio's CancelledError is one: the turn was cancelled)
            kind = type(exc).__name__
            if kind == "CancelledError":
                self.end(span, attributes={"vita.interrupted": True})
            else:  # (its type only: a message may quote what was said, which spans carry only with content on)
                self.end(span, error=f"{kind}: {exc}" if self.content else kind)
            raise
        self.end(span)

    def note(self, span: Span, attributes: Attributes) -> None:
        """More of what a span says, the unset values left out (OpenTelemetry takes no None)."""
        if self.on and span.is_recording():
            span.set_attributes(_clean(attributes))

    def end(self, span: Span, at: float | None = None, attributes: Attributes | None = None,
            error: str | None = None) -> None:
        if not self.on or not span.is_recording():
            return
        if attributes:
            span.set_attributes(_clean(attributes))
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=wall_ns(at) if at is not None else None)

    def carrier(self, span: Span) -> str:
        """The span's context as the ``traceparent`` a queue message carries ("" when off)."""
        if not self.on or not span.get_span_context().is_valid:
            return ""
        headers: dict[str, str] = {}
        _PROPAGATOR.inject(headers, context=trace.set_span_in_context(span))
        return headers.get("traceparent", "")

    def said(self, text: str) -> str | None:
        """What was said, for an attribute: only when the operator asked for content in spans."""
        return text if self.content else None

    def flush(self, timeout_s: float = 5.0) -> None:
        if self.provider is not None:
            self.provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Export what is waiting and stop (a process that ends)."""
        if self.provider is not None:
            self.provider.shutdown()

    @staticmethod
    def _context(parent: Span | str | None) -> Context | None:
        if parent is None:
            return Context()  # a new trace, never the caller's ambient one
        if isinstance(parent, str):
            return _PROPAGATOR.extract({"traceparent": parent})
        return trace.set_span_in_context(parent)


def _clean(attributes: Attributes | None) -> dict[str, Any] | None:
    """Attributes without the unset ones (OpenTelemetry takes no None)."""
    if not attributes:
        return None
    return {k: v for k, v in attributes.items() if v is not None}
