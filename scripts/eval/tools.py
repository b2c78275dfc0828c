"""Tool evaluation: questions that need a tool and questions that must not call one, typed, against a
server with the built-ins and an MCP server (tests/data/inventory_mcp_server.py).

Reports, for the questions that need a tool: right call (the expected tool, with arguments that give the right
result), wrong arguments, no call, and right answers; for those that do not (the answer evaluation's report set,
follow-ups and camera questions left out): false calls and right answers; and the first audio of tool turns
against the others (the latency a call adds). One session per set, as a user would ask them.

Spoken (--voice hibari): the same questions said as a page's microphone sends them; what Whisper heard is shown,
and first audio is voice-to-voice (from the end of the user's speech).

Usage: .venv/bin/python -m scripts.eval.tools [--url URL] [--voice hibari] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import yaml

from scripts.bench.measure import answered_turn, open_mic, send_speech
from scripts.eval.questions import plain_questions
from scripts.eval.scoring import is_right, share
from scripts.eval.voices import synthesize
from tests.harness.client import RecordingClient
from tests.harness.server import ROOT, start_server, stop_server, wait_ready

ZONE = "Europe/Paris"


def tool_questions(now: dt.datetime) -> list[dict]:
    """Each: q, tool (expected), accept (the reply is right if it holds any; '|' joins words that must all)."""
    day, month = now.strftime("%A").lower(), now.strftime("%B").lower()
    hour12 = str(now.hour % 12 or 12)
    arithmetic = [("What is 347 times 29?", 347 * 29), ("What is 1234 plus 5678?", 1234 + 5678),
                  ("What is 9876 minus 4321?", 9876 - 4321), ("What is 144 divided by 12?", 144 // 12),
                  ("What is 58 times 73?", 58 * 73), ("How much is 4567 plus 2389?", 4567 + 2389),
                  ("What is 2048 divided by 32?", 2048 // 32), ("What is 15 percent of 260?", 39),
                  ("What is the square root of 1764?", 42), ("Multiply 125 by 48.", 125 * 48),
                  ("Add 3456 and 789.", 3456 + 789), ("What is 806 times 7?", 806 * 7)]
    return [
        {"q": "What time is it?", "tool": "get_current_time", "accept": [hour12]},
        {"q": "Can you tell me the time?", "tool": "get_current_time", "accept": [hour12]},
        {"q": "What is today's date?", "tool": "get_current_time", "accept": [f"{month}|{now.day}"]},
        {"q": "What day of the week is it?", "tool": "get_current_time", "accept": [day]},
        {"q": "What day is it today?", "tool": "get_current_time", "accept": [day]},
        {"q": "What year is it?", "tool": "get_current_time", "accept": [str(now.year)]},
        *({"q": q, "tool": "calculate", "accept": [str(value)]} for q, value in arithmetic),
        {"q": "How many widgets are in stock?", "tool": "stock_count", "accept": ["42"]},
        {"q": "How many gadgets do you have in stock?", "tool": "stock_count", "accept": ["7", "seven"]},
        {"q": "Do you have any sprockets in stock?", "tool": "stock_count", "accept": ["no", "0", "zero", "out"]},
        {"q": "Is the shop open on Sunday?", "tool": "opening_hours", "accept": ["closed", "no", "not"]},
        {"q": "What are the shop's opening hours on Monday?", "tool": "opening_hours", "accept": ["9", "nine"]},
    ]


def ask(client: RecordingClient, turn: int, question: str) -> dict:
    sent = time.monotonic()
    client.sio.emit("text_input", {"text": question})
    client.wait_for(lambda evs: any(n == "state" and isinstance(d, dict) and d.get("state") == "listening"
                                    and d.get("turn_id") == turn for _, n, d in evs), 120)
    return {**what_came(client, turn, question, "first_audio_s"), "took_s": time.monotonic() - sent}


def ask_aloud(client: RecordingClient, voice: str, question: str) -> dict:
    """The question spoken (the evaluation voices) as a page's microphone sends it; its first audio is the
    voice-to-voice time, from the end of the user's speech."""

    sent = time.monotonic()
    voiced_at = send_speech(client, synthesize(voice, question), lead_s=0.3, tail_s=0.2)
    with open_mic(client):  # as a page's: the silence after the question reaches the server
        turn = answered_turn(client, voiced_at - 1)
    client.wait_for(lambda evs: any(n == "timings" and d.get("turn_id") == turn and d.get("stage") == "front"
                                    for _, n, d in evs), 5)
    heard = [d["text"] for d in client.named("transcript") if isinstance(d, dict) and d.get("turn_id") == turn]
    return {**what_came(client, turn, question, "voice_to_voice_s"), "heard": heard[-1] if heard else "",
            "took_s": time.monotonic() - sent}


def what_came(client: RecordingClient, turn: int, question: str, first_audio: str) -> dict:
    def of_turn(event: str) -> list[dict]:
        return [d for d in client.named(event) if isinstance(d, dict) and d.get("turn_id") == turn]

    front = [d for d in of_turn("timings") if d.get("stage") == "front"]
    replies = of_turn("response_text")
    return {"q": question, "turn": turn, "reply": replies[-1]["text"] if replies else "",
            "calls": [{k: c[k] for k in ("name", "arguments", "result", "ok", "outcome")}
                      for c in of_turn("tool_call")],
            "first_audio_s": front[0].get(first_audio) if front else None}


def run_set(url: str, questions: list[dict], voice: str | None = None) -> list[dict]:
    client = RecordingClient(url).connect()
    try:
        client.sio.emit("client_settings", {"timezone": ZONE})
        client.wait_event("client_settings", 10)
        rows = []
        for turn, question in enumerate(questions, 1):
            row = ask_aloud(client, voice, question["q"]) if voice else ask(client, turn, question["q"])
            row["right"] = is_right(question, row["reply"])
            row["tool"] = question.get("tool")
            rows.append(row)
            heard = f" (heard {row['heard']!r})" if voice else ""
            print(f"  {'ok ' if row['right'] else 'BAD'} {question['q']!r}{heard} -> "
                  f"{[c['name'] for c in row['calls']]} {row['reply'][:90]!r}", flush=True)
        return rows
    finally:
        client.close()


def report(needing: list[dict], plain: list[dict]) -> dict:
    def called(row: dict) -> bool:
        return any(c["name"] == row["tool"] for c in row["calls"])

    def right_call(row: dict) -> bool:
        return any(c["name"] == row["tool"] and c["ok"] for c in row["calls"])

    def first_audio(rows: list[dict]) -> float | None:
        values = [r["first_audio_s"] for r in rows if r["first_audio_s"] is not None]
        return round(statistics.median(values), 3) if values else None

    summary = {
        "needing_tool": len(needing),
        "right_call_pct": share(needing, right_call),
        "wrong_arguments_pct": share(needing, lambda r: called(r) and not right_call(r)),
        "no_call_pct": share(needing, lambda r: not called(r)),
        "right_answer_pct": share(needing, lambda r: r["right"]),
        "not_needing": len(plain),
        "false_call_pct": share(plain, lambda r: bool(r["calls"])),
        "right_answer_without_tools_pct": share(plain, lambda r: r["right"]),
        "first_audio_p50_tool_s": first_audio(needing),
        "first_audio_p50_plain_s": first_audio(plain),
    }
    print(json.dumps(summary, indent=2))
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server configured with the inventory MCP server")
    parser.add_argument("--json", help="write every row and the summary here")
    parser.add_argument("--voice", help="speak the questions in this voice (scripts/eval/voices.py: hibari, piper, "
                                        "espeak:en-us) instead of typing them; first audio is then voice-to-voice")
    args = parser.parse_args()
    server, url = None, args.url
    if url is None:
        tmp = Path(tempfile.mkdtemp())
        config = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
        config["tools"]["mcp_servers"] = [{"name": "inventory", "command": sys.executable,
                                           "args": [str(ROOT / "tests" / "data" / "inventory_mcp_server.py")]}]
        (tmp / "tools.yaml").write_text(yaml.safe_dump(config))
        server = start_server(tmp, "--config", str(tmp / "tools.yaml"), "--timeout", "3600")
        wait_ready(server)
        url = server.url
    try:
        now = dt.datetime.now(dt.UTC).astimezone(ZoneInfo(ZONE))
        print("questions that need a tool:")
        needing = run_set(url, tool_questions(now), args.voice)
        print("questions that do not (the answer evaluation's report set):")
        plain_rows = run_set(url, plain_questions(), args.voice)
        summary = report(needing, plain_rows)
        if args.json:
            Path(args.json).write_text(json.dumps({"summary": summary, "needing": needing, "plain": plain_rows},
                                                  indent=1))
    finally:
        if server is not None:
            stop_server(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
