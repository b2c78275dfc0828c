"""Server configuration: typed sections loaded from YAML, overridden by CLI flags, validated in one place.

Every problem is raised as ``ConfigError`` naming the option, so the CLI can print one line instead of a
traceback.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG_PATH = PROJECT_ROOT / "configs" / "default.yaml"


class ConfigError(ValueError):
    """A configuration value is wrong; ``option`` names it the way the user wrote it."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option = option


@dataclass
class ServerConfig:
    ip: str = "127.0.0.1"
    port: int = 8081
    max_users: int | None = None  # None ("auto"): sized from the speed the LLM worker measures
    max_waiting: int = 8  # clients that asked to wait for a seat (our page does), in line; 0: refuse them
    timeout: float = 600.0
    timeout_when_waiting: float = 120.0  # a seat idle this long goes to the next in line, while someone waits
    tls: bool = True
    certfile: str | None = None
    keyfile: str | None = None
    state_dir: str | None = None
    log_level: str = "info"
    log_format: str = "text"
    access_token: str | None = None
    allowed_origins: str | None = None
    message_queue: str | None = None
    web_root: str | None = None
    trusted_proxies: str | None = None
    nice: int = -10


@dataclass
class VadConfig:
    start_threshold: float = 0.5
    end_threshold: float = 0.35
    end_silence_ms: int = 300
    pre_roll_ms: int = 300
    min_utterance_ms: int = 250
    barge_in_ms: int = 64
    speculative_pause_ms: int = 128
    max_utterance_s: float = 30.0


@dataclass
class TurnConfig:
    end_of_turn_model: bool = True
    complete_threshold: float = 0.5
    incomplete_wait_ms: int = 1500
    finished_words_wait_ms: int = 600
    extend: bool = True
    extend_grace_ms: int = 800
    barge_in_confirm_ms: int = 650
    barge_in_span_ms: int = 700
    echo_guard_db: float = 20.0
    speaker_echo_page: bool = False  # guard our page's and VITA's sessions against their speaker's echo (a browser
    # cancels it)
    speaker_echo_realtime: bool = True  # ...and Realtime clients' (many play through a speaker with no canceller)
    echo_cancel: bool = True  # those sessions' microphone audio also has what was played taken out of it, by WebRTC's
    # echo canceller (vita/hearing/echo_canceller.py), before the VAD and the ASR hear it, once it is seen to carry it
    noise_suppression: bool = False  # ...and WebRTC's noise suppressor runs there too (not shown to help Whisper)
    stop_words: str = "stop, wait, hold on, hang on, pause, enough, cancel, quiet, shut up, never mind"


@dataclass
class AsrConfig:
    model: str = "whisper-base"
    compute_type: str = "int8"
    cpu_threads: int | None = None  # each utterance's; None ("auto"): one, unless two hear one faster here
    workers: int = 2  # utterances heard at once (turns that end together, a stop word over a reply)
    language: str | None = "en"
    beam_size: int = 1
    short_window: bool = True
    redecode_below: float | None = -0.3  # greedy Whisper this unsure decodes again with beam search (None: never)
    redecode_beam_size: int = 5
    ask_again_below: float | None = -0.9  # Whisper's mean token log-probability under which it misheard
    second_opinion: str | None = "whisper-tiny.en"  # a second model asked when the first is unsure (None: never)
    doubt_below: float = -0.6  # the first model's log-probability under which the second is asked
    disagree_above: float = 0.5  # word disagreement between the two over which the user is asked again
    # under this (and not asked again above), the model reads the words: Whisper's confidence plus reading_weight
    # times the model's mean log-probability of them under ask_again_below is misheard too (None: never)
    reading_below: float | None = -0.3
    reading_weight: float = 0.1
    sense_check_below: float | None = -0.4  # an engine that cannot read them (a remote server): under this, the
    # model is told the words may be misheard and says it did not catch them if they make no sense (None: never)


# A CPU prefills ~80 (Zen 1, 0.5B fp32) to a few hundred tokens a second, and vLLM schedules a whole prompt in one
# step by default: a 720-token prompt held every other session's next token for 8 s. In steps of at most this many
# tokens, another session's turn joins the next step: its first token 1.7 s after it came, against 8.4 s; the long
# prompt itself 3-9 % slower alone; short turns are unchanged (scripts/bench/stages/prefill_steps.py, Zen 1).
CPU_PREFILL_CHUNK = 128
# While others wait, a long prompt takes at most this many of a step's tokens (vLLM's long_prefill_token_threshold:
# alone, it takes them all), so another turn prefills in the same step and decodes beside it.
CPU_PREFILL_SHARE = 32


@dataclass
class LlmConfig:
    model: str = "auto"
    model_path: str | None = None
    url: str | None = None
    remote_model: str | None = None
    api_key: str | None = None
    input_mode: str = "auto"
    limit_images_per_prompt: int = 4
    limit_audios_per_prompt: int = 1
    device: str = "cpu"
    visible_devices: str | None = None
    dtype: str = "auto"
    omp_threads_bind: str = "auto"
    cpu_nice: int = 5
    block_size: int = 32
    prefix_caching: bool = True
    warm_prefix: bool = True
    max_model_len: int = 2048
    prefill_chunk_tokens: int | None = None  # None: 128 on a CPU (text models), else 0: vLLM's own
    prefill_share_tokens: int | None = None  # None: 32 on a CPU with a chunk, else 0: no cap
    kv_cache_space_gib: int = 1
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    enforce_eager: bool = True
    load_format: str = "auto"
    prompt_style: str = "auto"
    persona: str = (
        "Vita is a helpful, friendly voice assistant. Vita answers in one or two short, clear sentences. "
        "People hear Vita's answers spoken aloud."  # (its prompt fills one whole 32-token cache block: shared)
    )
    history_turns: int = 4
    history_tokens: int = 400
    max_tokens: int = 64
    max_reply_words: int = 25
    first_piece_words: int = 3
    first_piece_wait_ms: int = 150
    temperature: float = 0.0
    ready_timeout_s: float = 600.0

    def prefill_steps(self) -> tuple[int, int]:
        """(tokens a step prefills, a long prompt's tokens a step while others wait); 0: vLLM's own. The configured
        ones, else a CPU's (above); on a GPU, vLLM's own."""
        cpu = self.device == "cpu"
        chunk = self.prefill_chunk_tokens if self.prefill_chunk_tokens is not None else (
            CPU_PREFILL_CHUNK if cpu else 0)
        share = self.prefill_share_tokens if self.prefill_share_tokens is not None else (
            min(CPU_PREFILL_SHARE, chunk) if cpu and chunk else 0)
        return chunk, share


@dataclass
class TtsConfig:
    voice: str = "joe-us"
    output_sample_rate: int = 24000
    chunk_ms: int = 200
    lead_ms: int = 250  # Socket.IO reply audio goes out at most this far ahead of the client's playback
    pace_chunk_ms: int = 100  # ...in pieces this long (vita/turns/reply_pacer.py)
    cpu_threads: int = 2


@dataclass
class LimitsConfig:
    max_audio_message_bytes: int = 64_000
    max_frame_bytes: int = 2_000_000
    max_text_chars: int = 2000
    max_events_per_s: float = 400.0
    max_refused_events: int = 2000
    max_socket_bytes_per_s: int = 1_000_000
    max_image_pixels: int = 12_000_000
    max_attachments: int = 2
    max_connections: int = 512
    max_connections_per_ip: int = 64
    handshake_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    turn_stall_s: float = 15.0
    save_utterances_dir: str | None = None


@dataclass
class TurnLogConfig:
    enabled: bool = True
    path: str | None = None
    retention_days: float = 30.0


@dataclass
class WebRtcConfig:
    enabled: bool = True
    ice_servers: list = field(default_factory=list)
    udp_ports: str = ""
    announce_address: str | None = None

    def port_range(self) -> tuple[int, int] | None:
        """"40000-40099" → (40000, 40099); "" → None (any port)."""
        text = self.udp_ports.strip()
        if not text:
            return None
        first, sep, last = text.partition("-")
        if not sep or not first.strip().isdigit() or not last.strip().isdigit():
            raise ConfigError("webrtc.udp_ports", f"must be FIRST-LAST (e.g. 40000-40099) or empty, got {text!r}")
        low, high = int(first), int(last)
        if not 1024 <= low <= high <= 65535:
            raise ConfigError("webrtc.udp_ports", f"must lie within 1024-65535, FIRST <= LAST, got {text!r}")
        return low, high


@dataclass
class ToolsConfig:
    builtin: bool = True  # the current date and time, exact arithmetic
    max_calls: int = 3  # tool calls one turn may make before it must answer
    filler_after_ms: int = 700  # a tool still running after this: "Let me check." is said meanwhile (0 = never)
    timeout_s: float = 5.0  # each MCP tool call
    mcp_servers: list = field(default_factory=list)  # [{name, command, args?, env?} or {name, url}]


@dataclass
class VisionConfig:
    """What a text-only model learns of the camera (an omni model sees the frames themselves): each part is a real
    model from a package, loaded at start; none of them downloads anything."""

    text: bool = True  # OCR: the lines of text in the picture (RapidOCR, PP-OCR small)
    objects: bool = True  # the main object (an ImageNet classifier: EfficientNet-Lite0)
    people: bool = True  # faces counted, looking at the camera or not (MediaPipe; Haar cascades without it)
    hands: bool = True  # hands, raised fingers and a few gestures (MediaPipe)
    threads: int = 1  # per model: the vision thread runs beside the engine at a lower priority
    wait_ms: int = 6000  # how long a turn waits for the picture's analysis before going on without it


@dataclass
class TracingConfig:
    """OpenTelemetry traces (vita/ops/tracing.py): off unless an OTLP endpoint is named, here or by the standard
    OTEL_EXPORTER_OTLP_ENDPOINT (which wins, as do the other OTEL_* variables)."""

    endpoint: str | None = None  # OTLP base URL, e.g. http://127.0.0.1:4318; None: the environment's, else off
    protocol: str = "http/protobuf"  # or grpc (OTEL_EXPORTER_OTLP_PROTOCOL wins)
    content: bool = False  # spans carry what was said (transcript, reply text); never images, tokens or keys


@dataclass
class RecordingConfig:
    """A turn's recording for a bug report (vita/ops/turn_recording.py): what the VAD cut, what ASR heard, the
    prompt, the reply's text and audio, the timings; a folder a turn, bounded in size and age."""

    enabled: bool = False  # every session's turns
    per_session: bool = True  # a client may record its own session's turns (the page's switch)
    path: str | None = None  # None: state_dir/recordings
    max_mb: float = 500.0  # the oldest turns go first past this
    retention_days: float = 7.0


@dataclass
class MemoryConfig:
    """What the assistant remembers of its users across sessions (vita/memory/): facts in their words, in
    state_dir/memory.sqlite3, for the users a client names (our page's cookie, a caller's number, a Realtime app's
    user); the user sees, corrects and erases them."""

    enabled: bool = True
    path: str | None = None  # None: state_dir/memory.sqlite3
    retention_days: float = 365.0  # a fact older than this is deleted
    # A caller is known by their number (a vouched-for webhook's only): off unless the operator trusts caller ID,
    # which can be spoofed; withheld numbers are nobody.
    phone: bool = False


@dataclass
class Config:
    models_dir: str = "models"
    server: ServerConfig = field(default_factory=ServerConfig)
    vad: VadConfig = field(default_factory=VadConfig)
    turn: TurnConfig = field(default_factory=TurnConfig)
    asr: AsrConfig = field(default_factory=AsrConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    turn_log: TurnLogConfig = field(default_factory=TurnLogConfig)
    webrtc: WebRtcConfig = field(default_factory=WebRtcConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    vision: VisionConfig = field(default_factory=VisionConfig)
    tracing: TracingConfig = field(default_factory=TracingConfig)
    recording: RecordingConfig = field(default_factory=RecordingConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)

    # --- derived paths -------------------------------------------------------------------------------
    def trusted_proxies(self) -> frozenset[str]:
        listed = self.server.trusted_proxies or ""
        return frozenset(a.strip() for a in listed.split(",") if a.strip())

    def models_path(self) -> Path:
        env = os.environ.get("VITA_MODELS_DIR")
        path = Path(env or self.models_dir).expanduser()
        return path if path.is_absolute() else PROJECT_ROOT / path

    def llm_model_path(self) -> Path:
        """--model_path (a folder, or the name of a bundled model), else the bundled ``llm.model``."""
        chosen = self.llm.model_path
        if chosen and not Path(chosen).expanduser().is_dir() and "/" not in chosen \
                and (self.models_path() / chosen).is_dir():
            return self.models_path() / chosen
        if chosen:
            return Path(chosen).expanduser().resolve()
        return self.models_path() / self.chosen_llm()[0]

    def chosen_llm(self) -> tuple[str, str]:
        """The model's name and why it serves: --model_path, or the bundled model ``llm.model`` names ('auto' asks
        what this CPU runs well)."""
        if self.llm.model_path:
            return self.llm_model_path().name, "--model_path names it"
        if self.llm.model != "auto":
            return self.llm.model, "llm.model in the configuration names it"
        from vita.cpu import choose_llm, read_cpu

        return choose_llm(read_cpu())

    def bundled_llm(self) -> str | None:
        """The bundled model's name when the LLM is one of ours (None for an operator's folder or server)."""
        if self.llm.url:
            return None
        path = self.llm_model_path()
        return path.name if path.parent == self.models_path() else None

    def vad_model_path(self) -> Path:
        return self.models_path() / "silero-vad" / "silero_vad.onnx"

    def end_of_turn_model_path(self) -> Path:
        return self.models_path() / "smart-turn" / "smart-turn-v3.2-cpu.onnx"

    def access_token(self) -> str | None:
        return os.environ.get("VITA_ACCESS_TOKEN") or self.server.access_token or None

    def turn_log_path(self) -> Path | None:
        if not self.turn_log.enabled:
            return None
        return Path(self.turn_log.path).expanduser() if self.turn_log.path else self.state_path() / "turns.sqlite3"

    def memory_path(self) -> Path | None:
        if not self.memory.enabled:
            return None
        return Path(self.memory.path).expanduser() if self.memory.path else self.state_path() / "memory.sqlite3"

    def recording_path(self) -> Path:
        return Path(self.recording.path).expanduser() if self.recording.path else self.state_path() / "recordings"

    def state_path(self) -> Path:
        if self.server.state_dir:
            return Path(self.server.state_dir).expanduser()
        base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
        return Path(base) / "vita-server"


_SECTIONS = {"server", "vad", "turn", "asr", "llm", "tts", "limits", "turn_log", "webrtc", "tools", "vision", "tracing",
             "recording", "memory"}


AUTO_OPTIONS = {"server.max_users", "asr.cpu_threads"}  # options whose "auto" (or null) means: measured at start


def _coerce(option: str, value: Any, default: Any, annotation: str) -> Any:
    """Coerce a YAML value to the field's type; YAML already gives ints/floats/bools."""
    optional = "None" in annotation
    if option in AUTO_OPTIONS and str(value).strip().lower() == "auto":
        return None
    if value is None:
        if optional:
            return None
        raise ConfigError(option, "must not be empty")
    if annotation.startswith("bool"):
        if isinstance(value, bool):
            return value
        raise ConfigError(option, f"must be true or false, got {value!r}")
    if annotation.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(option, f"must be an integer, got {value!r}")
        return value
    if annotation.startswith("list"):
        if not isinstance(value, list):
            raise ConfigError(option, f"must be a list, got {value!r}")
        return value
    if annotation.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(option, f"must be a number, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(option, f"must be a string, got {value!r}")
    return value


def _apply_section(obj: Any, data: dict, prefix: str) -> None:
    if not isinstance(data, dict):
        raise ConfigError(prefix.rstrip("."), "must be a mapping")
    fields = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"{prefix}{key}", "unknown option")
        f = fields[key]
        setattr(obj, key, _coerce(f"{prefix}{key}", value, getattr(obj, key), str(f.type)))


def load_config(path: str | Path | None = None) -> Config:
    """Read a YAML file over the built-in defaults (which equal configs/default.yaml)."""
    config = Config()
    path = Path(path) if path else DEFAULT_CONFIG_PATH
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError("--config", f"file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ConfigError("--config", f"{path} is not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError("--config", f"{path} must hold a mapping of sections")
    for key, value in data.items():
        if key in _SECTIONS:
            _apply_section(getattr(config, key), value or {}, f"{key}.")
        elif key == "models_dir":
            config.models_dir = _coerce("models_dir", value, config.models_dir, "str")
        else:
            raise ConfigError(key, "unknown section")
    return config


