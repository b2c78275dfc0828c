"""`python server.py`: parse flags over the YAML config, start the process graph, serve until signalled."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vita.config import Config, ConfigError, load_config
from vita.config_checks import validate
from vita.process_graph import WorkerSpec

log = logging.getLogger("vita.server")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block: the option and what is wrong with it
        self.exit(2, f"server.py: error: {message}\n")


def _users(text: str) -> int | str:
    """--max_users: a number, or "auto"."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of sessions or auto, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="server.py", description="Real-time multimodal voice-assistant server (VITA protocol).")
    p.add_argument("--config", help="YAML config (default: configs/default.yaml)")
    p.add_argument("--model_path", help="LLM folder for vLLM, or a bundled model's name "
                                         "(default: llm.model auto, the bundled model this CPU runs best: "
                                         "Qwen2.5-Coder-1.5B-Instruct in int8)")
    p.add_argument("--ip", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8081)")
    p.add_argument("--max_users", type=_users, help="concurrent sessions, or auto (the default): as many as this "
                                                     "machine answers within ~2 s, measured as it starts")
    p.add_argument("--timeout", type=float, help="idle seconds before a session is closed (default 600)")
    p.add_argument("--certfile", help="TLS certificate (PEM); default: self-signed, generated on first start")
    p.add_argument("--keyfile", help="TLS private key (PEM) for --certfile")
    p.add_argument("--no_tls", action="store_true", help="serve plain HTTP (only behind a TLS-terminating proxy)")
    p.add_argument("--models_dir", help="folder of the assembled embedded models (default: models/)")
    p.add_argument("--state_dir", help="writable folder for the generated certificate and the turn log")
    p.add_argument("--log_level", help="debug, info (default), warning or error")
    p.add_argument("--log_format", help="text (default) or json: one JSON object per line")
    p.add_argument("--turn_log", help="SQLite file for the turn log, or 'off' (default: state_dir/turns.sqlite3)")
    p.add_argument("--vision", choices=("on", "off"),
                   help="what a text-only model learns of the camera: the config's vision parts (on, the default), "
                        "or none (off: saves ~0.3 GB and a few seconds of start)")
    p.add_argument("--access_token", help="require this token for the page, /metrics and Socket.IO "
                                          "(or set VITA_ACCESS_TOKEN; prefer the variable: flags show in ps)")
    p.add_argument("--allowed_origins", help="comma-separated Socket.IO origins (default: the page's own only)")
    p.add_argument("--llm_url", help="OpenAI-compatible server to generate with, e.g. http://host:8000/v1 "
                                     "(vLLM's API server), instead of an in-process engine")
    p.add_argument("--message_queue", help="redis://host:6379/0: share Socket.IO emits between several "
                                           "front processes behind a sticky load balancer")
    p.add_argument("--web_root", help="serve your own page folder (e.g. VITA's vita_html/web): its index.html "
                                      "or demo.html at /, its files under /static/, ours where it has none")
    p.add_argument("--trusted_proxies", help="comma-separated reverse-proxy addresses whose X-Forwarded-* headers "
                                             "are believed (from anyone else they are removed)")
    return p


def config_from_args(argv: list[str] | None = None) -> Config:
    args = build_parser().parse_args(argv)
    config = load_config(args.config)
    s = config.server
    for flag, target, attr in (
        ("model_path", config.llm, "model_path"), ("ip", s, "ip"), ("port", s, "port"),
        ("max_users", s, "max_users"), ("timeout", s, "timeout"), ("certfile", s, "certfile"),
        ("keyfile", s, "keyfile"), ("state_dir", s, "state_dir"), ("models_dir", config, "models_dir"),
        ("log_level", s, "log_level"), ("log_format", s, "log_format"), ("access_token", s, "access_token"),
        ("allowed_origins", s, "allowed_origins"), ("llm_url", config.llm, "url"),
        ("message_queue", s, "message_queue"), ("web_root", s, "web_root"),
        ("trusted_proxies", s, "trusted_proxies"),
    ):
        value = getattr(args, flag)
        if value is not None:
            setattr(target, attr, None if flag == "max_users" and value == "auto" else value)
    if args.no_tls:
        s.tls = False
    if args.turn_log is not None:
        config.turn_log.enabled = args.turn_log != "off"
        config.turn_log.path = None if args.turn_log == "off" else args.turn_log
    if args.vision == "off":
        v = config.vision
        v.text = v.objects = v.people = v.hands = False
    return validate(config)


def _check_models(config: Config) -> None:
    from vita.machine.models import EMBEDDED_MODELS, LLM_NAMES, missing_models

    # Every non-LLM model, plus the bundled LLM in use (none with an operator's own folder or server).
    needed = tuple(m.name for m in EMBEDDED_MODELS if m.name not in LLM_NAMES)
    if config.bundled_llm():
        needed += (config.bundled_llm(),)
    missing = missing_models(config.models_path(), needed)
    if missing:
        raise ConfigError("--models_dir", f"models not assembled in {config.models_path()}: {', '.join(missing)} "
                          "(run scripts/setup.sh)")


def _family(ip: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def main(workers: Sequence[WorkerSpec], argv: list[str] | None = None) -> int:
    """Run the server with these worker processes (server.py names them: vita/ never imports workers/)."""
    try:
        config = config_from_args(argv)
        _check_models(config)
    except ConfigError as exc:
        print(f"server.py: error: {exc}", file=sys.stderr)
        return 2

    from vita.ops.logs import setup_logging

    setup_logging("front", config.server.log_level, config.server.log_format)
    from vita.cpu import keep_large_buffers_off_the_heap, name_os_thread, set_nice

    keep_large_buffers_off_the_heap()  # the front reads clients' large messages all day
    name_os_thread("vita-front")  # its socket threads inherit the name (the CPU budget tells them from the rest)
    log.info("CPU priority: %s", set_nice(config.server.nice))  # first: every thread and worker inherits it

    from vita.process_graph import ProcessGraph
    from vita.web.app import FrontApp
    from vita.web.http.server import FrontServer

    s = config.server
    ssl_context = _tls_context(config)
    try:  # bind before starting workers: a busy port is an operator error, not a crash a minute later
        graph = ProcessGraph(config, list(workers))
        front = FrontApp(config, graph)
        listener = socket.create_server((s.ip, s.port), family=_family(s.ip), reuse_port=False)
        server = FrontServer(s.ip, s.port, front.flask, ssl_context, fd=listener.fileno(),
                             limits=config.limits, uncapped=config.trusted_proxies())
        front.connections = server.connections
        front.socket_guard.bind(server.connections, front.guard)  # polling handshakes: token and caps
    except OSError as exc:
        print(f"server.py: error: --port: cannot listen on {s.ip}:{s.port} ({exc.strerror})", file=sys.stderr)
        return 2
    _stop_on_signals(front, server)
    _serve(config, graph, front, server, "https" if ssl_context else "http")
    return 0


def _tls_context(config: Config) -> Any:
    from vita.web.http.tls import ensure_self_signed, server_context

    s = config.server
    if not s.tls:
        return None
    if s.certfile:
        cert, key = Path(s.certfile), Path(s.keyfile)
    else:
        cert, key = ensure_self_signed(config.state_path() / "tls", s.ip)
        log.info("using self-signed certificate %s", cert)
    return server_context(cert, key)


def _stop_on_signals(front: Any, server: Any) -> None:
    """SIGTERM / Ctrl-C: tell every user, then stop serving (the workers stop after the server loop ends)."""
    stopping = threading.Event()

    def request_stop(signum, _frame):
        if not stopping.is_set():
            stopping.set()
            log.info("%s received: shutting down", signal.Signals(signum).name)

            def shut_down() -> None:
                # Open websockets stay up while the workers stop (seconds), so the notice reaches every user.
                front.notify_shutdown()
                server.shutdown()

            threading.Thread(target=shut_down, name="http-shutdown", daemon=True).start()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    faulthandler.register(signal.SIGUSR2, all_threads=True)  # kill -USR2: every thread's stack to the log


def _serve(config: Config, graph: Any, front: Any, server: Any, scheme: str) -> None:
    from vita.turns.dispatcher import OutputDispatcher

    graph.start()
    front.turn_log.start()
    dispatcher = OutputDispatcher(graph.queues["outputs"], front.sessions, front.turns)
    dispatcher.start()
    log.info("serving on %s://%s:%d (workers loading; GET /health shows progress)", scheme, config.server.ip,
             config.server.port)
    log.info("LLM: %s", front.llm_choice["summary"])
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        started = time.monotonic()
        server.server_close()
        graph.stop(timeout=10)
        dispatcher.stop()
        front.turns.close()
        if front.rtc is not None:
            front.rtc.stop()
        front.socket_guard.stop()
        front.turn_log.stop()
        front.tracing.shutdown()  # the spans still waiting go out
        log.info("stopped in %.1f s", time.monotonic() - started)
