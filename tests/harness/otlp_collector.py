"""An OpenTelemetry collector of our own, as far as traces over OTLP/HTTP go: a local HTTP server that takes what
an SDK's exporter POSTs to /v1/traces (protobuf, gzip or not), decodes it with OpenTelemetry's own protobuf
classes, and keeps every span — what Jaeger or Tempo would receive from the server. Used by the trace tests and the
trace benchmark (``python -m scripts.bench.latency --trace on``)."""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class CollectedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a trace's root
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status: int = 0  # 0 unset, 1 ok, 2 error
    events: list[str] = field(default_factory=list)

    @property
    def process(self) -> str:
        return self.resource.get("vita.process", "")

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def decode(body: bytes) -> list[CollectedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                spans.append(CollectedSpan(
                    span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                    span.start_time_unix_nano, span.end_time_unix_nano,
                    {kv.key: _value(kv.value) for kv in span.attributes}, resource, span.status.code,
                    [event.name for event in span.events]))
    return spans


class OtlpCollector:
    def __init__(self):
        self.spans: list[CollectedSpan] = []
        self.requests = 0
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path.rstrip("/") == "/v1/traces"
                if ok:
                    spans = decode(body)
                    with collector.lock:
                        collector.spans.extend(spans)
                        collector.requests += 1
                answer = ExportTraceServiceResponse().SerializeToString() if ok else b""
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args) -> None:
                return None

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, name="otlp-collector", daemon=True)
        self.thread.start()

    def environment(self, flush_ms: int = 200) -> dict[str, str]:
        """What a server's environment needs to send its spans here (soon after each ends)."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_BSP_SCHEDULE_DELAY": str(flush_ms)}

    def snapshot(self) -> list[CollectedSpan]:
        with self.lock:
            return list(self.spans)

    def wait_for(self, predicate, timeout: float = 30.0) -> list[CollectedSpan]:
        """The spans once ``predicate(spans)`` holds (or at the deadline: the caller asserts)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.snapshot()
            if predicate(spans) or time.monotonic() >= deadline:
                return spans
            time.sleep(0.1)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def tree(spans: list[CollectedSpan], root: CollectedSpan) -> list[tuple[int, CollectedSpan]]:
    """The spans under ``root`` in start order, with their depth (root 0): a trace as a waterfall reads it."""
    children: dict[str, list[CollectedSpan]] = {}
    for span in spans:
        children.setdefault(span.parent_id, []).append(span)
    out: list[tuple[int, CollectedSpan]] = []

    def walk(span: CollectedSpan, depth: int) -> None:
        out.append((depth, span))
        for child in sorted(children.get(span.span_id, []), key=lambda s: s.start_ns):
            walk(child, depth + 1)

    walk(root, 0)
    return out
