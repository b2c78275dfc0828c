"""Prometheus metrics of the front process, in a registry owned by the app (no module-level collectors).

Every number the operator tunes --max_users and --timeout by is here: sessions, turns, stage latencies (the
workers' timings arrive with their messages, so one process exports all of them), the live audio path
(handler time, VAD lag behind real time, dropped audio), queue depths and errors.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Sub-millisecond to seconds: the audio handler takes ~0.1 ms, a VAD step ~0.3 ms, a lagging VAD seconds.
FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Stage latencies on CPU are 0.1-5 s; on a GPU the model stages are tens of milliseconds.
STAGE_BUCKETS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0, 20.0)
STAGES = ("end_of_speech", "end_of_turn_model", "asr", "first_token", "first_piece", "tts_first_chunk", "first_audio",
          "voice_to_voice")


class _QueueDepths:
    """Custom collector: reads queue sizes at scrape time (Manager queues answer qsize() over a pipe)."""

    def __init__(self, depths: Callable[[], dict[str, int]]):
        self.depths = depths

    def collect(self):
        family = GaugeMetricFamily("vita_queue_depth", "Messages waiting in an inter-process queue",
                                   labels=["queue"])
        for name, depth in self.depths().items():
            family.add_metric([name], depth)
        yield family


class FrontMetrics:
    def __init__(self, sessions: Callable[[], int], queue_depths: Callable[[], dict[str, int]],
                 waiting: Callable[[], int]):
        r = self.registry = CollectorRegistry()
        Gauge("vita_sessions", "Sessions connected now", registry=r).set_function(sessions)
        Gauge("vita_sessions_waiting", "Clients waiting in line for a seat", registry=r).set_function(waiting)
        self.sessions_opened = Counter("vita_sessions_opened", "Sessions accepted, by the door they came in by",
                                       ["door"], registry=r)
        self.sessions_refused = Counter("vita_sessions_refused", "Connections refused by --max_users",
                                        registry=r)
        self.turns_started = Counter("vita_turns_started", "Turns submitted to the workers", ["source"],
                                     registry=r)
        self.turns_completed = Counter("vita_turns_completed", "Turns whose reply was fully played",
                                       registry=r)
        self.turns_interrupted = Counter("vita_turns_interrupted", "Turns cancelled before their end",
                                         ["reason"], registry=r)
        self.turns_unanswered = Counter("vita_turns_unanswered", "Turns the LLM worker ended without a reply",
                                        ["reason"], registry=r)
        self.tool_calls = Counter("vita_tool_calls", "Tool calls made during turns, by tool and outcome (ok, bad_call, "
                                  "unknown_tool, bad_arguments, failed, timeout)", ["tool", "outcome"], registry=r)
        self.stage = Histogram("vita_stage_seconds", "Latency of one stage of a turn", ["stage"],
                               buckets=STAGE_BUCKETS, registry=r)
        self.audio_handler = Histogram("vita_audio_handler_seconds",
                                       "Time in the `audio` event handler (decode + enqueue)",
                                       buckets=FAST_BUCKETS, registry=r)
        self.vad_lag = Histogram("vita_vad_lag_seconds",
                                 "Arrival of audio (the newest of the messages joined up to a VAD step) to the end "
                                 "of its VAD step (lag behind real time)",
                                 buckets=FAST_BUCKETS, registry=r)
        self.audio_seconds = Counter("vita_audio_received_seconds", "Microphone audio received", registry=r)
        self.vad_audio_seconds = Counter("vita_vad_audio_seconds", "Microphone audio through the VAD (its messages "
                                         "are joined up to whole VAD steps: compare seconds, not messages)",
                                         registry=r)
        self.audio_dropped = Counter("vita_audio_dropped_messages",
                                     "Audio messages dropped because a session's VAD buffer was full",
                                     registry=r)
        self.errors = Counter("vita_errors", "Error events sent to clients", ["code"], registry=r)
        self.events_dropped = Counter("vita_events_rate_limited", "Inbound events dropped by the per-session rate "
                                      "limit", registry=r)
        self.queue_drops = Counter("vita_queue_drops", "Messages dropped because a worker queue stayed full",
                                   ["queue"], registry=r)
        self.worker_restarts = Counter("vita_worker_restarts", "Worker processes that died and were restarted",
                                       ["worker"], registry=r)
        for name in ("llm", "tts"):
            self.worker_restarts.labels(name)
        for name in STAGES:
            self.stage.labels(name)
        r.register(_QueueDepths(queue_depths))

    def observe_stage(self, stage: str, seconds: float) -> None:
        if stage in STAGES and seconds >= 0:
            self.stage.labels(stage).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
