"""The configuration's checks: every value's range or choice, the ICE and MCP server lists; an error names the option
as the operator wrote it (the CLI flag where one exists)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from vita.config import Config, ConfigError

ICE_URL_SCHEMES = ("stun:", "stuns:", "turn:", "turns:")
MIN_TOKEN_CHARS = 16  # a guesser is throttled too (vita.web.http.access), but a short token is a guessable one

PAGE_NAMES = ("index.html", "demo.html", "resources/index.html", "resources/demo.html")  # --web_root's page


def page_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be a web root, for the CLI's one-line error; None when it can."""
    if not folder.is_dir():
        return f"no folder at {folder}"
    if not any((folder / name).is_file() for name in PAGE_NAMES):
        return f"{folder} has none of {', '.join(PAGE_NAMES)}"
    return None


def check_ice_servers(servers: list) -> list[dict]:
    """webrtc.ice_servers: a list of {urls, username?, credential?} as a browser's RTCPeerConnection takes them."""
    checked = []
    for i, server in enumerate(servers):
        option = f"webrtc.ice_servers[{i}]"
        if not isinstance(server, dict) or not {"urls"} <= set(server) <= {"urls", "username", "credential"}:
            raise ConfigError(option, "must be a mapping with urls (and username, credential for TURN)")
        urls = [server["urls"]] if isinstance(server["urls"], str) else server["urls"]
        if not isinstance(urls, list) or not urls or not all(
                isinstance(u, str) and u.startswith(ICE_URL_SCHEMES) for u in urls):
            raise ConfigError(f"{option}.urls", "must be stun:/turn: URLs (one, or a list)")
        for key in ("username", "credential"):
            if key in server and not isinstance(server[key], str):
                raise ConfigError(f"{option}.{key}", "must be a string")
        if any(u.startswith(("turn:", "turns:")) for u in urls) and not {"username", "credential"} <= set(server):
            raise ConfigError(option, "a TURN server needs username and credential")
        checked.append({**server, "urls": urls})
    return checked


def check_mcp_servers(servers: list) -> list[dict]:
    """tools.mcp_servers: each {name, command, args?, env?} (stdio) or {name, url} (streamable HTTP)."""
    checked, names = [], set()
    for i, server in enumerate(servers):
        option = f"tools.mcp_servers[{i}]"
        if not isinstance(server, dict):
            raise ConfigError(option, "must be a mapping with name and command or url")
        unknown = set(server) - {"name", "command", "args", "env", "url"}
        if unknown:
            raise ConfigError(f"{option}.{sorted(unknown)[0]}", "unknown option")
        name = server.get("name")
        if not isinstance(name, str) or not name.strip() or name in names:
            raise ConfigError(f"{option}.name", "must be a unique, non-empty string")
        names.add(name)
        if ("command" in server) == ("url" in server):
            raise ConfigError(option, "needs exactly one of command (stdio) or url (streamable HTTP)")
        if "command" in server and (not isinstance(server["command"], str) or not server["command"].strip()):
            raise ConfigError(f"{option}.command", "must be a non-empty string")
        if "url" in server and (not isinstance(server["url"], str) or not server["url"].startswith(("http://",
                                                                                                   "https://"))):
            raise ConfigError(f"{option}.url", "must be an http:// or https:// URL")
        args = server.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"{option}.args", "must be a list of strings")
        env = server.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ConfigError(f"{option}.env", "must map strings to strings")
        checked.append({**server, "args": args, "env": env})
    return checked


LOG_LEVELS = ("debug", "info", "warning", "error")


LOG_FORMATS = ("text", "json")


_ASR_MODELS = ("whisper-base", "whisper-tiny.en")


_PROMPT_STYLES = ("auto", "chat", "transcript")


_INPUT_MODES = ("auto", "text", "omni")


_LOAD_FORMATS = ("auto", "safetensors", "pt", "dummy")


_DEVICES = ("cpu", "cuda")


_DTYPES = ("auto", "float32", "bfloat16", "float16")


def _check(cond: bool, option: str, message: str) -> None:
    if not cond:
        raise ConfigError(option, message)


def validate(config: Config) -> Config:
    """Range and choice checks; the option names are those of the CLI where a flag exists."""
    s, v, a, llm, t, lim = config.server, config.vad, config.asr, config.llm, config.tts, config.limits
    _check(bool(s.ip.strip()), "--ip", "must not be empty")
    _check(1 <= s.port <= 65535, "--port", f"must be between 1 and 65535, got {s.port}")
    _check(s.max_users is None or s.max_users >= 1, "--max_users", f"must be at least 1 or auto, got {s.max_users}")
    _check(s.timeout_when_waiting > 0, "server.timeout_when_waiting",
           f"must be a positive number of seconds, got {s.timeout_when_waiting:g}")
    _check(0 <= s.max_waiting <= 1000, "server.max_waiting", f"must be 0 to 1000, got {s.max_waiting}")
    _check(-20 <= s.nice <= 19, "server.nice", f"must be between -20 and 19, got {s.nice}")
    _check(s.timeout > 0, "--timeout", f"must be a positive number of seconds, got {s.timeout:g}")
    _check((s.certfile is None) == (s.keyfile is None), "--certfile/--keyfile", "give both or neither")
    for opt, p in (("--certfile", s.certfile), ("--keyfile", s.keyfile)):
        _check(p is None or Path(p).is_file(), opt, f"file not found: {p}")
    _check(s.log_level in LOG_LEVELS, "--log_level", f"must be one of {', '.join(LOG_LEVELS)}")
    token = config.access_token()
    _check(token is None or len(token) >= MIN_TOKEN_CHARS, "--access_token",
           f"must be at least {MIN_TOKEN_CHARS} characters, got {len(token or '')}; make a random one with "
           "python -c \"import secrets; print(secrets.token_urlsafe(24))\" (and prefer VITA_ACCESS_TOKEN to the flag)")
    _check(s.log_format in LOG_FORMATS, "--log_format", f"must be one of {', '.join(LOG_FORMATS)}")
    config.webrtc.port_range()
    check_ice_servers(config.webrtc.ice_servers)
    config.tools.mcp_servers = check_mcp_servers(config.tools.mcp_servers)
    _check(0 <= config.tools.max_calls <= 10, "tools.max_calls", "must be between 0 and 10")
    _check(1 <= config.vision.threads <= 8, "vision.threads", "must be between 1 and 8")
    _check(0 <= config.vision.wait_ms <= 10000, "vision.wait_ms", "must be between 0 and 10000")
    _check(config.tools.filler_after_ms >= 0, "tools.filler_after_ms", "must be 0 or more")
    _check(0 < config.tools.timeout_s <= 120, "tools.timeout_s", "must be between 0 and 120 seconds")
    if config.webrtc.announce_address is not None:
        try:
            ipaddress.ip_address(config.webrtc.announce_address)
        except ValueError:
            raise ConfigError("webrtc.announce_address", f"must be an IP address, got "
                              f"{config.webrtc.announce_address!r}") from None
    _check(config.turn_log.retention_days > 0, "turn_log.retention_days", "must be a positive number of days")
    _check(config.tracing.protocol in ("http/protobuf", "grpc"), "tracing.protocol", "must be http/protobuf or grpc")
    _check(config.tracing.endpoint is None or config.tracing.endpoint.startswith(("http://", "https://")),
           "tracing.endpoint", "must be an http:// or https:// URL")
    _check(config.memory.retention_days > 0, "memory.retention_days", "must be a positive number of days")
    _check(config.recording.max_mb > 0, "recording.max_mb", "must be a positive number of megabytes")
    _check(config.recording.retention_days > 0, "recording.retention_days", "must be a positive number of days")
    _check(0 < v.start_threshold < 1, "vad.start_threshold", "must be between 0 and 1")
    _check(0 < v.end_threshold <= v.start_threshold, "vad.end_threshold",
           "must be between 0 and vad.start_threshold")
    _check(32 <= v.end_silence_ms <= 5000, "vad.end_silence_ms", "must be between 32 and 5000")
    _check(0 <= v.pre_roll_ms <= 2000, "vad.pre_roll_ms", "must be between 0 and 2000")
    _check(0 <= v.min_utterance_ms <= 5000, "vad.min_utterance_ms", "must be between 0 and 5000")
    _check(32 <= v.barge_in_ms <= 2000, "vad.barge_in_ms", "must be between 32 and 2000")
    _check(v.speculative_pause_ms == 0 or 32 <= v.speculative_pause_ms < v.end_silence_ms,
           "vad.speculative_pause_ms", "must be 0 (off) or between 32 and vad.end_silence_ms")
    _check(1 <= v.max_utterance_s <= 120, "vad.max_utterance_s", "must be between 1 and 120")
    turn = config.turn
    _check(0 < turn.complete_threshold < 1, "turn.complete_threshold", "must be between 0 and 1")
    _check(v.speculative_pause_ms < turn.incomplete_wait_ms <= 5000, "turn.incomplete_wait_ms",
           "must be longer than vad.speculative_pause_ms and at most 5000")
    _check(not turn.end_of_turn_model or v.speculative_pause_ms > 0, "turn.end_of_turn_model",
           "needs vad.speculative_pause_ms > 0 (the pause at which the model is asked)")
    _check(turn.barge_in_confirm_ms == 0 or v.barge_in_ms <= turn.barge_in_confirm_ms <= 3000,
           "turn.barge_in_confirm_ms", "must be 0 (interrupt at onset) or between vad.barge_in_ms and 3000")
    _check(0 <= turn.barge_in_span_ms <= 3000, "turn.barge_in_span_ms", "must be between 0 (off) and 3000")
    _check(0 <= turn.echo_guard_db <= 60, "turn.echo_guard_db", "must be between 0 (off) and 60")
    _check(0 <= turn.extend_grace_ms <= 2000, "turn.extend_grace_ms", "must be between 0 and 2000")
    _check(0 <= turn.finished_words_wait_ms <= turn.incomplete_wait_ms, "turn.finished_words_wait_ms",
           "must be between 0 (off) and turn.incomplete_wait_ms")
    _check(a.model in _ASR_MODELS, "asr.model", f"must be one of {', '.join(_ASR_MODELS)}")
    _check(a.cpu_threads is None or a.cpu_threads >= 1, "asr.cpu_threads", "must be at least 1, or auto")
    _check(1 <= a.workers <= 8, "asr.workers", "must be between 1 and 8")
    _check(a.beam_size >= 1, "asr.beam_size", "must be at least 1")
    _check(a.redecode_below is None or -10 <= a.redecode_below <= 0, "asr.redecode_below",
           "must be a log-probability between -10 and 0, or null")
    _check(2 <= a.redecode_beam_size <= 10, "asr.redecode_beam_size", "must be between 2 and 10")
    _check(a.ask_again_below is None or -10 <= a.ask_again_below <= 0, "asr.ask_again_below",
           "must be a log-probability between -10 and 0, or null")
    _check(a.second_opinion is None or a.second_opinion in _ASR_MODELS, "asr.second_opinion",
           f"must be one of {', '.join(_ASR_MODELS)}, or null")
    _check(-10 <= a.doubt_below <= 0, "asr.doubt_below", "must be a log-probability between -10 and 0")
    _check(0 < a.disagree_above <= 2, "asr.disagree_above", "must be a word disagreement between 0 and 2")
    _check(a.sense_check_below is None or -10 <= a.sense_check_below <= 0, "asr.sense_check_below",
           "must be a log-probability between -10 and 0, or null")
    _check(a.reading_below is None or -10 <= a.reading_below <= 0, "asr.reading_below",
           "must be a log-probability between -10 and 0, or null")
    _check(0 < a.reading_weight <= 1, "asr.reading_weight", "must be between 0 (exclusive) and 1")
    _check(a.reading_below is None or a.ask_again_below is None or a.reading_below > a.ask_again_below,
           "asr.reading_below", "must be above asr.ask_again_below (under it the words are asked again unread)")
    _check(llm.device in _DEVICES, "llm.device", f"must be one of {', '.join(_DEVICES)}")
    _check(llm.dtype in _DTYPES, "llm.dtype", f"must be one of {', '.join(_DTYPES)}")
    _check(llm.prompt_style in _PROMPT_STYLES, "llm.prompt_style",
           f"must be one of {', '.join(_PROMPT_STYLES)}")
    _check(128 <= llm.max_model_len <= 1_048_576, "llm.max_model_len", "must be between 128 and 1048576")
    _check(llm.block_size in (16, 32, 64, 128), "llm.block_size", "must be 16, 32, 64 or 128")
    _check(llm.prefill_chunk_tokens is None or llm.prefill_chunk_tokens == 0
           or 32 <= llm.prefill_chunk_tokens <= llm.max_model_len, "llm.prefill_chunk_tokens",
           "must be 0 (vLLM's own steps) or between 32 and llm.max_model_len")
    chunk, _ = llm.prefill_steps()
    steps = f"the {chunk} tokens a step prefills" if chunk else "llm.max_model_len (vLLM's own steps)"
    _check(llm.prefill_share_tokens is None or 0 <= llm.prefill_share_tokens <= (chunk or llm.max_model_len),
           "llm.prefill_share_tokens", f"must be between 0 (no cap) and {steps}")
    _check(bool(llm.omp_threads_bind.strip()), "llm.omp_threads_bind",
           "must be auto, all, vllm or a core list like 0-1")
    if llm.device == "cpu" and llm.tensor_parallel_size == 1 and llm.omp_threads_bind.strip():
        # (in process: the front binds it; vLLM's own processes take its per-rank syntax, 0-1|2-3, as they are)
        cores_error = _cores_error(llm.omp_threads_bind)
        _check(cores_error is None, "llm.omp_threads_bind", cores_error or "")
    _check(llm.kv_cache_space_gib > 0, "llm.kv_cache_space_gib", "must be positive")
    _check(0 < llm.gpu_memory_utilization <= 1, "llm.gpu_memory_utilization", "must be in (0, 1]")
    _check(llm.tensor_parallel_size >= 1, "llm.tensor_parallel_size", "must be at least 1")
    _check(0 <= llm.history_turns <= 64, "llm.history_turns", "must be between 0 and 64")
    _check(0 <= llm.history_tokens <= llm.max_model_len // 2, "llm.history_tokens",
           "must be between 0 and half of llm.max_model_len")
    _check(0 <= llm.first_piece_words <= 50, "llm.first_piece_words", "must be between 0 and 50")
    _check(0 <= llm.first_piece_wait_ms <= 5000, "llm.first_piece_wait_ms", "must be between 0 and 5000")
    _check(3 <= llm.max_reply_words <= 500, "llm.max_reply_words", "must be between 3 and 500")
    _check(1 <= llm.max_tokens <= llm.max_model_len, "llm.max_tokens", "must be between 1 and max_model_len")
    _check(0 <= llm.temperature <= 2, "llm.temperature", "must be between 0 and 2")
    _check(llm.ready_timeout_s > 0, "llm.ready_timeout_s", "must be positive")
    _check(llm.load_format in _LOAD_FORMATS, "llm.load_format", f"must be one of {', '.join(_LOAD_FORMATS)}")
    _check(llm.input_mode in _INPUT_MODES, "llm.input_mode", f"must be one of {', '.join(_INPUT_MODES)}")
    _check(0 <= llm.limit_images_per_prompt <= 64, "llm.limit_images_per_prompt", "must be between 0 and 64")
    _check(1 <= llm.limit_audios_per_prompt <= 8, "llm.limit_audios_per_prompt", "must be between 1 and 8")
    _check(llm.url is None or llm.url.startswith(("http://", "https://")), "--llm_url",
           f"must be an http:// or https:// URL ending in /v1, got {llm.url!r}")
    _check(s.message_queue is None or s.message_queue.startswith(("redis://", "rediss://", "unix://")),
           "--message_queue", f"must be a redis:// URL, got {s.message_queue!r}")
    if s.web_root is not None:
        problem = page_problem(Path(s.web_root).expanduser())
        _check(problem is None, "--web_root", problem or "")
    model = config.llm_model_path()
    if llm.model_path:
        _check(model.is_dir(), "--model_path", f"no model folder at {model}")
    elif not llm.url:  # a remote engine needs no local weights
        option = "llm.model" if config.models_path().is_dir() else "--models_dir"
        _check(model.is_dir(), option, f"no bundled LLM at {model} ({config.chosen_llm()[1]}): run "
                                       f"scripts/setup.sh first (an optional model: VITA_LLMS={model.name} bash "
                                       "scripts/setup.sh)")
    _check(t.output_sample_rate == 24000, "tts.output_sample_rate",
           "must be 24000 (the rate the VITA page plays)")
    _check(20 <= t.chunk_ms <= 2000, "tts.chunk_ms", "must be between 20 and 2000")
    _check(0 <= llm.cpu_nice <= 19, "llm.cpu_nice", "must be between 0 and 19")
    _check(20 <= t.pace_chunk_ms <= 1000, "tts.pace_chunk_ms", "must be between 20 and 1000")
    _check(t.lead_ms == 0 or t.lead_ms >= 2 * t.pace_chunk_ms, "tts.lead_ms",
           "must be 0 (no pacing) or at least twice tts.pace_chunk_ms (else the client runs dry between messages)")
    _check(1 <= t.cpu_threads <= 64, "tts.cpu_threads", "must be between 1 and 64")
    _check(lim.max_audio_message_bytes >= 256, "limits.max_audio_message_bytes", "must be at least 256")
    _check(lim.max_frame_bytes >= 1024, "limits.max_frame_bytes", "must be at least 1024")
    _check(lim.max_text_chars >= 1, "limits.max_text_chars", "must be at least 1")
    _check(lim.max_events_per_s >= 10, "limits.max_events_per_s", "must be at least 10")
    _check(lim.max_refused_events == 0 or lim.max_refused_events >= 100, "limits.max_refused_events",
           "must be 0 (never close) or at least 100")
    _check(lim.max_socket_bytes_per_s == 0 or lim.max_socket_bytes_per_s >= 100_000, "limits.max_socket_bytes_per_s",
           "must be 0 (unpaced) or at least 100000")
    _check(lim.max_image_pixels >= 64 * 64, "limits.max_image_pixels", "must be at least 4096")
    _check(0 <= lim.max_attachments <= 64, "limits.max_attachments", "must be between 0 and 64")
    _check(lim.max_connections >= 16, "limits.max_connections", "must be at least 16")
    _check(1 <= lim.max_connections_per_ip <= lim.max_connections, "limits.max_connections_per_ip",
           "must be between 1 and limits.max_connections")
    _check(1 <= lim.handshake_timeout_s <= 120, "limits.handshake_timeout_s", "must be between 1 and 120")
    _check(lim.read_timeout_s >= 5, "limits.read_timeout_s", "must be at least 5")
    _check(2 <= lim.turn_stall_s <= 300, "limits.turn_stall_s", "must be between 2 and 300")
    return config


def _cores_error(configured: str) -> str | None:
    """Why a core list cannot be used on this machine (not a list; none of the cores this process may use)."""
    from vita.cpu import engine_cores, read_cpu

    try:
        engine_cores(configured, read_cpu())
    except ValueError as error:
        return str(error)
    return None
