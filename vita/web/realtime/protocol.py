"""OpenAI's Realtime protocol (GA event set), the parts that need no server: a session's settings and their
update, audio formats (PCM 24 kHz, G.711 μ-law/A-law 8 kHz), and the shapes of server events and errors.

Read from OpenAI's API reference and the ``openai`` package's types (``openai/types/realtime``). What this server
cannot honour is refused with an ``error`` (a format it cannot decode, a tool kind it cannot run) or shown as it
really is in ``session.updated`` (the voice it speaks with, the model that serves)."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vita.messages import ClientTool
from vita.web.codecs import G711_RATE, Law, g711_decode, g711_encode

PCM_RATE = 24000  # audio/pcm: 24 kHz mono 16-bit little-endian, both ways
FORMATS = {"audio/pcm": PCM_RATE, "audio/pcmu": G711_RATE, "audio/pcma": G711_RATE}
BETA_FORMATS = {"pcm16": "audio/pcm", "g711_ulaw": "audio/pcmu", "g711_alaw": "audio/pcma"}  # the beta's names
MAX_INSTRUCTIONS_CHARS = 16_000
MAX_CONTENT_PARTS = 32  # a message item's content parts (each is decoded and checked on the connection's thread)
MAX_JSON_DEPTH = 32  # no event of the protocol nests deeper (a tool's schema included); json.loads recurses per level
MAX_JSON_CONTAINERS = 4096  # objects and arrays in one event (64 tools' schemas make ~1,000): each is built by
# json.loads, and 40,000 tiny ones (a 2 MB item of empty parts) left the front's heap fragmented for good
MAX_TOOLS = 64
MAX_TOOL_SCHEMA_CHARS = 32_000  # all of a session's tools: their descriptions and schemas go into every prompt
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
EAGERNESS = ("low", "medium", "high", "auto")
# semantic_vad eagerness -> how sure the end-of-turn model must be that the user has finished (None: the config's)
EAGER_THRESHOLD = {"low": 0.8, "medium": None, "auto": None, "high": 0.3}


class ProtocolError(Exception):
    """A client event this server refuses: becomes an `error` event; the session goes on."""

    def __init__(self, code: str, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.code, self.message, self.param, self.kind = code, message, param, kind


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:22]}"


def error_event(code: str, message: str, param: str | None = None, event_id: str | None = None,
                kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "event_id": new_id("event"),
            "error": {"type": kind, "code": code, "message": message, "param": param, "event_id": event_id}}


# --- reading events ----------------------------------------------------------------------------------------------
def json_shape(raw: bytes) -> tuple[int, int]:
    """How deep a JSON text nests and how many objects and arrays it holds, the brackets inside its strings aside:
    a few numpy passes over its bytes, linear whatever the text (a quote is escaped by an odd run of backslashes
    before it; the brackets that count are those with an even number of unescaped quotes before them)."""
    codes = np.frombuffer(raw, dtype=np.uint8)
    if not codes.size:
        return 0, 0
    quotes = codes == ord('"')
    if b"\\" in raw:
        index = np.arange(codes.size, dtype=np.int32)
        run = index - np.maximum.accumulate(np.where(codes == ord("\\"), -1, index))  # backslashes ending here
        quotes[1:] &= (run[:-1] & 1) == 0
    outside = np.bitwise_xor.accumulate(quotes.view(np.uint8)) == 0
    opens, closes = (codes == ord("[")) | (codes == ord("{")), (codes == ord("]")) | (codes == ord("}"))
    opens &= outside
    steps = opens.astype(np.int32) - (closes & outside)
    return max(0, int(np.cumsum(steps, dtype=np.int32).max())), int(np.count_nonzero(opens))


def parse_event(data: str | bytes) -> Any:
    """A client event's JSON, refused before it is parsed when it nests deeper than MAX_JSON_DEPTH (Python's parser
    would recurse into every level, up to a RecursionError) or holds more than MAX_JSON_CONTAINERS objects and
    arrays (each one built, then thrown away with the event). Only a text with that many brackets is scanned.
    Bytes must be UTF-8 (json.loads would guess UTF-16 or UTF-32, which the scan does not read)."""
    if isinstance(data, bytes | bytearray):
        data = bytes(data).decode("utf-8")  # strict: anything else is invalid JSON here
    opening = data.count("[") + data.count("{") if isinstance(data, str) else data.count(b"[") + data.count(b"{")
    if opening > MAX_JSON_DEPTH:
        depth, containers = json_shape(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        if depth > MAX_JSON_DEPTH:
            raise ProtocolError("invalid_json", f"the event nests deeper than {MAX_JSON_DEPTH} levels")
        if containers > MAX_JSON_CONTAINERS:
            raise ProtocolError("invalid_json", f"the event holds {containers} objects and arrays; at most "
                                f"{MAX_JSON_CONTAINERS} are taken")
    return json.loads(data)


# --- a response's own options -----------------------------------------------------------------------------------
RESPONSE_OPTIONS = {"instructions", "conversation", "metadata", "max_output_tokens", "output_modalities",
                    "tool_choice"}


@dataclass(frozen=True)
class ResponseOptions:
    """What one response.create asks for itself (None: the session's setting)."""

    audio: bool | None = None
    max_tokens: int | None = None
    instructions: str | None = None
    tool_choice: ToolChoice | None = None


def read_response_options(options: Any, server_max_tokens: int) -> ResponseOptions:
    """A response.create's `response` object, checked; "inf" tokens are the server's own cap."""
    options = options or {}
    if not isinstance(options, dict):
        raise ProtocolError("invalid_value", "response must be an object", "response")
    if options.get("conversation", "auto") not in ("auto", None):
        raise ProtocolError("unsupported", "out-of-band responses (conversation: none) are not supported",
                            "response.conversation")
    modalities = options.get("output_modalities")
    if modalities is not None and (not isinstance(modalities, list) or not modalities
                                   or not set(modalities) <= {"audio", "text"}):
        raise ProtocolError("invalid_value", 'output_modalities must be ["audio"] or ["text"]',
                            "response.output_modalities")
    limit = None
    if "max_output_tokens" in options:
        limit = max_output_tokens(options["max_output_tokens"], "response.max_output_tokens") or server_max_tokens
    extra = sorted(set(options) - RESPONSE_OPTIONS)
    if extra:
        raise ProtocolError("unsupported", f"a response's {extra[0]} is not supported here (the session's "
                            "settings apply)", f"response.{extra[0]}")
    override = options.get("instructions")
    if override is not None and (not isinstance(override, str) or len(override) > MAX_INSTRUCTIONS_CHARS):
        raise ProtocolError("invalid_value", f"instructions must be a string of at most {MAX_INSTRUCTIONS_CHARS} "
                            "characters", "response.instructions")
    choice = read_tool_choice(options["tool_choice"], "response.tool_choice") if "tool_choice" in options else None
    return ResponseOptions(None if modalities is None else "audio" in modalities, limit, override or None, choice)


# --- audio -----------------------------------------------------------------------------------------------------
LAWS: dict[str, Law] = {"audio/pcmu": "ulaw", "audio/pcma": "alaw"}  # the G.711 formats (vita/web/codecs.py)


def encode_g711(pcm: np.ndarray, kind: str) -> bytes:
    return g711_encode(pcm, LAWS[kind])


def audio_seconds(b64: Any, kind: str) -> float:
    """How many seconds of audio a base64 field holds (its padding aside), known before it is decoded."""
    if not isinstance(b64, str):
        raise ProtocolError("invalid_value", "audio must be a base64 string", "audio")
    return len(b64) * 3 // 4 / (2 if kind == "audio/pcm" else 1) / FORMATS[kind]


def decode_audio(b64: Any, kind: str, max_bytes: int) -> np.ndarray:
    """A base64 audio field in the session's input format, as int16 samples at FORMATS[kind]."""
    if not isinstance(b64, str):
        raise ProtocolError("invalid_value", "audio must be a base64 string", "audio")
    if len(b64) > max_bytes * 4 // 3 + 4:
        raise ProtocolError("audio_too_large", f"one append may carry at most {max_bytes} bytes of audio", "audio")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError("invalid_value", "audio is not valid base64", "audio") from None
    if kind == "audio/pcm":
        if len(raw) % 2:
            raise ProtocolError("invalid_value", "audio/pcm must be whole 16-bit samples", "audio")
        return np.frombuffer(raw, dtype="<i2").astype(np.int16)
    return g711_decode(raw, LAWS[kind])


# --- the session's settings ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolChoice:
    """tool_choice: "auto" (the model decides), "none" (no tool, nor the server's own), "required" (a call of one of
    the session's functions), or the one function every response calls (`function`)."""

    mode: str = "auto"
    function: str = ""

    def as_json(self) -> str | dict[str, str]:
        return {"type": "function", "name": self.function} if self.function else self.mode

    def must_call(self, tools: tuple[ClientTool, ...]) -> tuple[str, ...]:
        """The functions a reply must call one of ((): the model decides, or calls none)."""
        if self.function:
            return (self.function,)
        return tuple(t.name for t in tools) if self.mode == "required" else ()


def read_tool_choice(value: Any, param: str) -> ToolChoice:
    """GA's tool_choice: a mode, or {"type": "function", "name": ...} (the Chat Completions shape, with the name
    under "function", is taken too)."""
    if value in ("auto", "none", "required"):
        return ToolChoice(value)
    if isinstance(value, dict) and value.get("type") == "function":
        inner = value.get("function")
        name = value.get("name", inner.get("name") if isinstance(inner, dict) else None)
        if isinstance(name, str) and TOOL_NAME.fullmatch(name):
            return ToolChoice("function", name)
        raise ProtocolError("invalid_value", "a function tool_choice needs the function's name", f"{param}.name")
    if isinstance(value, dict) and value.get("type") == "mcp":
        raise ProtocolError("unsupported", "this server's own MCP tools are its operator's to choose; tool_choice may "
                            "name a function of session.tools", param)
    raise ProtocolError("invalid_value", 'tool_choice must be "auto", "none", "required" or {"type": "function", '
                        '"name": ...}', param)


def check_tool_choice(choice: ToolChoice, tools: tuple[ClientTool, ...], param: str) -> None:
    """A choice that requires a call must have a function to call."""
    if choice.function and choice.function not in {t.name for t in tools}:
        raise ProtocolError("invalid_value", f"tool_choice names {choice.function!r}, which is not a function of "
                            "session.tools", param)
    if choice.mode == "required" and not tools:
        raise ProtocolError("invalid_value", 'tool_choice "required" needs at least one function in session.tools',
                            param)


@dataclass(frozen=True)
class TurnDetection:
    """server_vad / semantic_vad, as far as they mean something here (None in Settings: push-to-talk)."""

    type: str = "server_vad"
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    eagerness: str = "auto"

    def as_json(self) -> dict[str, Any]:
        common = {"type": self.type, "create_response": True, "interrupt_response": True}
        if self.type == "semantic_vad":
            return {**common, "eagerness": self.eagerness}
        return {**common, "threshold": self.threshold, "prefix_padding_ms": self.prefix_padding_ms,
                "silence_duration_ms": self.silence_duration_ms, "idle_timeout_ms": None}


@dataclass(frozen=True)
class Settings:
    instructions: str = ""
    output_modalities: tuple[str, ...] = ("audio",)
    input_format: str = "audio/pcm"
    output_format: str = "audio/pcm"
    turn_detection: TurnDetection | None = field(default_factory=TurnDetection)
    voice: str = ""
    tools: tuple[ClientTool, ...] = ()
    tool_choice: ToolChoice = ToolChoice()
    max_output_tokens: int | None = None  # None ("inf"): the server's own cap (llm.max_tokens)

    @property
    def audio_out(self) -> bool:
        return "audio" in self.output_modalities


def _format(value: Any, param: str) -> str:
    kind = value.get("type") if isinstance(value, dict) else BETA_FORMATS.get(value) if isinstance(value, str) else None
    kind = BETA_FORMATS.get(kind, kind) if isinstance(kind, str) else None
    if kind not in FORMATS:
        raise ProtocolError("invalid_value", f"audio format must be one of {', '.join(FORMATS)}", param)
    rate = value.get("rate", FORMATS[kind]) if isinstance(value, dict) else FORMATS[kind]
    if rate != FORMATS[kind]:
        raise ProtocolError("invalid_value", f"{kind} is taken at {FORMATS[kind]} Hz only, not {rate}", param)
    return kind


def _number(value: Any, low: float, high: float, param: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ProtocolError("invalid_value", f"{param} must be a number from {low:g} to {high:g}", param)
    return value


def _turn_detection(value: Any, current: TurnDetection | None) -> TurnDetection | None:
    param = "session.audio.input.turn_detection"
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("server_vad", "semantic_vad"):
        raise ProtocolError("invalid_value", "turn_detection must be null, server_vad or semantic_vad", param)
    for flag in ("create_response", "interrupt_response"):
        if value.get(flag, True) is not True:
            raise ProtocolError("unsupported", f"{flag}: false is not supported with voice activity detection; "
                                "use turn_detection: null (push-to-talk) to decide when to respond", f"{param}.{flag}")
    base = current if current is not None and current.type == value["type"] else TurnDetection(value["type"])
    changes: dict[str, Any] = {}
    if "threshold" in value:
        changes["threshold"] = _number(value["threshold"], 0.05, 0.95, f"{param}.threshold")
    if "prefix_padding_ms" in value:
        changes["prefix_padding_ms"] = int(_number(value["prefix_padding_ms"], 0, 2000, f"{param}.prefix_padding_ms"))
    if "silence_duration_ms" in value:
        changes["silence_duration_ms"] = int(_number(value["silence_duration_ms"], 100, 5000,
                                                     f"{param}.silence_duration_ms"))
    if "eagerness" in value:
        if value["eagerness"] not in EAGERNESS:
            raise ProtocolError("invalid_value", f"eagerness must be one of {', '.join(EAGERNESS)}",
                                f"{param}.eagerness")
        changes["eagerness"] = value["eagerness"]
    return dataclasses.replace(base, **changes)


def _tools(value: Any) -> tuple[ClientTool, ...]:
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise ProtocolError("invalid_value", f"tools must be a list of at most {MAX_TOOLS} functions", "session.tools")
    tools, size = [], 0
    for n, tool in enumerate(value):
        param = f"session.tools[{n}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise ProtocolError("unsupported", "only tools of type function are supported (the server's own MCP "
                                "servers are configured by its operator)", param)
        name = tool.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise ProtocolError("invalid_value", "a function needs a name of 1-64 letters, digits, _ and -",
                                f"{param}.name")
        description = tool.get("description") or ""
        parameters = tool.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(description, str) or not isinstance(parameters, dict):
            raise ProtocolError("invalid_value", "description must be a string and parameters a JSON schema", param)
        schema = json.dumps(parameters)
        size += len(schema) + len(description)
        if size > MAX_TOOL_SCHEMA_CHARS:
            raise ProtocolError("invalid_value", f"the functions' descriptions and schemas may take at most "
                                f"{MAX_TOOL_SCHEMA_CHARS} characters in all", param)
        tools.append(ClientTool(name, description, schema))
    return tuple(tools)


def max_output_tokens(value: Any, param: str) -> int | None:
    """A client's max_output_tokens: a count from 1 to 4096, or "inf" (None: the server's own cap)."""
    if value == "inf":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise ProtocolError("invalid_value", 'max_output_tokens must be an integer from 1 to 4096, or "inf"', param)
    return value


def updated(settings: Settings, session: Any, voices: list[str]) -> Settings:
    """`settings` with a client's `session` object applied (every field checked before any is taken)."""
    if not isinstance(session, dict):
        raise ProtocolError("invalid_value", "session must be an object", "session")
    if session.get("type", "realtime") != "realtime":
        raise ProtocolError("unsupported", "only realtime sessions are served here (not transcription)", "session.type")
    changes: dict[str, Any] = {}
    if "instructions" in session:
        text = session["instructions"]
        if not isinstance(text, str) or len(text) > MAX_INSTRUCTIONS_CHARS:
            raise ProtocolError("invalid_value", f"instructions must be a string of at most {MAX_INSTRUCTIONS_CHARS} "
                                "characters", "session.instructions")
        changes["instructions"] = text
    modalities = session.get("output_modalities", session.get("modalities"))
    if modalities is not None:
        if (not isinstance(modalities, list) or not modalities or not all(isinstance(m, str) for m in modalities)
                or not set(modalities) <= {"audio", "text"}):
            raise ProtocolError("invalid_value", 'output_modalities must be ["audio"] or ["text"]',
                                "session.output_modalities")
        changes["output_modalities"] = ("audio",) if "audio" in modalities else ("text",)
    audio = session.get("audio")
    audio = {} if audio is None else audio
    if not isinstance(audio, dict):
        raise ProtocolError("invalid_value", "audio must be an object", "session.audio")
    audio_in, audio_out = (audio.get(key) if audio.get(key) is not None else {} for key in ("input", "output"))
    if not isinstance(audio_in, dict) or not isinstance(audio_out, dict):
        raise ProtocolError("invalid_value", "audio.input and audio.output must be objects", "session.audio")
    for key, source, param in (("input_format", audio_in.get("format", session.get("input_audio_format")),
                                "session.audio.input.format"),
                               ("output_format", audio_out.get("format", session.get("output_audio_format")),
                                "session.audio.output.format")):
        if source is not None:
            changes[key] = _format(source, param)
    if "turn_detection" in audio_in or "turn_detection" in session:
        changes["turn_detection"] = _turn_detection(audio_in.get("turn_detection", session.get("turn_detection")),
                                                    settings.turn_detection)
    voice = audio_out.get("voice", session.get("voice"))
    if isinstance(voice, str) and voice in voices:  # another voice name (OpenAI's) keeps ours: session.updated says so
        changes["voice"] = voice
    if "tools" in session:
        changes["tools"] = _tools(session["tools"])
    if "tool_choice" in session:
        changes["tool_choice"] = read_tool_choice(session["tool_choice"], "session.tool_choice")
    if "max_output_tokens" in session:
        changes["max_output_tokens"] = max_output_tokens(session["max_output_tokens"], "session.max_output_tokens")
    after = dataclasses.replace(settings, **changes)
    check_tool_choice(after.tool_choice, after.tools, "session.tool_choice")
    return after


def session_json(settings: Settings, session_id: str, model: str, transcriber: str, max_tokens: int,
                 expires_in_s: float) -> dict[str, Any]:
    """The session as it really is (GA `session` object)."""
    def fmt(kind: str) -> dict[str, Any]:
        return {"type": kind, "rate": FORMATS[kind]} if kind == "audio/pcm" else {"type": kind}

    detection = settings.turn_detection.as_json() if settings.turn_detection else None
    return {
        "type": "realtime", "object": "realtime.session", "id": session_id, "model": model,
        "output_modalities": list(settings.output_modalities), "instructions": settings.instructions,
        "tools": [{"type": "function", "name": t.name, "description": t.description,
                   "parameters": json.loads(t.parameters)} for t in settings.tools],
        "tool_choice": settings.tool_choice.as_json(), "tracing": None, "truncation": "auto",
        "max_output_tokens": max_tokens if settings.max_output_tokens is None else min(settings.max_output_tokens,
                                                                                       max_tokens),
        "prompt": None, "include": None, "expires_at": int(time.time() + expires_in_s),
        "audio": {
            "input": {"format": fmt(settings.input_format), "transcription": {"model": transcriber},
                      "noise_reduction": None, "turn_detection": detection},
            "output": {"format": fmt(settings.output_format), "voice": settings.voice, "speed": 1.0},
        },
    }
