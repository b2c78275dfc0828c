"""Logging for every process: text or JSON lines, with the session and turn a record is about.

Pass them as ``extra=turn_ids(sid, turn_id)``; text lines then read ``[session/turn]`` and JSON lines carry
``session`` and ``turn_id`` fields, so one user's conversation can be followed across the three processes.
"""

from __future__ import annotations

import json
import logging
import re
import time

NOISY = ("werkzeug", "engineio", "socketio", "urllib3")


def turn_ids(sid: str | None, turn_id: int | None = None) -> dict[str, object]:
    return {"session": (sid or "")[:8], "turn_id": turn_id}


class TextFormatter(logging.Formatter):
    def __init__(self, process: str):
        super().__init__(f"%(asctime)s {process:>5} %(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        session = getattr(record, "session", None)
        if session:
            turn = getattr(record, "turn_id", None)
            tag = f"[{session}{'' if turn is None else f'/{turn}'}] "
            head, sep, rest = line.partition(f"{record.levelname} ")
            line = f"{head}{sep}{tag}{rest}"
        return line


class JsonFormatter(logging.Formatter):
    def __init__(self, process: str):
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": round(record.created, 3),
                 "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created)),
                 "level": record.levelname.lower(), "process": self.process, "logger": record.name,
                 "message": record.getMessage()}
        for key in ("session", "turn_id"):
            value = getattr(record, key, None)
            if value not in (None, ""):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class RedactSecrets(logging.Filter):
    """Access tokens never reach a log line (werkzeug logs request lines with their query, and engine.io the
    Socket.IO CONNECT packet with its auth, at debug level)."""

    PATTERN = re.compile(r"(token=|Bearer\s+|[\"']token[\"']\s*:\s*[\"'])[^&\s\"']+")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "token" in message or "Bearer" in message:
            record.msg, record.args = self.PATTERN.sub(r"\1[redacted]", message), ()
        return True


def setup_logging(process: str, level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler()
    handler.addFilter(RedactSecrets())
    handler.setFormatter(JsonFormatter(process) if fmt == "json" else TextFormatter(process))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    if level != "debug":
        for name in NOISY:
            logging.getLogger(name).setLevel(logging.WARNING)
