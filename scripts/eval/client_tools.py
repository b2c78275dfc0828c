"""A Realtime client's own functions: does the model call them when a question needs one, and leave them alone
when it does not? Typed questions over the OpenAI Realtime door, text replies, one session per set (as an app
asks them), the functions declared with `session.update` as an app declares them.

Reports, for the questions that need a function: right call (the expected function), no call, wrong function, and
right answers once the client's result is given back; for those that do not (the answer evaluation's report set):
false calls and right answers; and the prompt tokens the engine prefilled per response (`timings`, in the server's
turn log: not sent to clients), which is what a session's functions cost each turn.

Usage: .venv/bin/python -m scripts.eval.client_tools [--url URL] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from scripts.eval.questions import plain_questions
from scripts.eval.scoring import is_right, share
from tests.harness.realtime_client import RealtimeClient
from tests.harness.server import start_server, stop_server, wait_ready

REPLY_S = 120

FUNCTIONS = [
    {"type": "function", "name": "stock_count",
     "description": "How many of an item the shop has in stock (widgets, gadgets, sprockets, gizmos).",
     "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}},
    {"type": "function", "name": "opening_hours", "description": "The shop's opening hours on a day of the week.",
     "parameters": {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}},
    {"type": "function", "name": "get_weather", "description": "Today's weather in a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"type": "function", "name": "get_order_status", "description": "Where a customer's order is, by its number.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},
]
INSTRUCTIONS = ("You are the voice assistant of a small shop that sells widgets, gadgets, sprockets and gizmos. "
                "Answer in one or two short sentences.")
RESULTS = {"stock_count": "42 in stock.", "opening_hours": "9 am to 6 pm.", "get_weather": "Sunny, 24 degrees.",
           "get_order_status": "Shipped; it arrives on Friday."}

# Right only with what the function said (its numbers), not with what the model makes up ("sunny", "open").
NEEDING = [
    {"q": "How many widgets are in stock?", "tool": "stock_count", "accept": ["42"]},
    {"q": "Do you have any gizmos left?", "tool": "stock_count", "accept": ["42"]},
    {"q": "Is the shop open on Saturday?", "tool": "opening_hours", "accept": ["9", "nine"]},
    {"q": "When do you open on Monday?", "tool": "opening_hours", "accept": ["9", "nine"]},
    {"q": "What's the weather like in Paris today?", "tool": "get_weather", "accept": ["24"]},
    {"q": "Is it sunny in Berlin right now?", "tool": "get_weather", "accept": ["24"]},
    {"q": "Where is my order 4512?", "tool": "get_order_status", "accept": ["friday", "shipped"]},
    {"q": "When will order number 889 arrive?", "tool": "get_order_status", "accept": ["friday"]},
    {"q": "How many sprockets do you have?", "tool": "stock_count", "accept": ["42"]},
    {"q": "Are there any gadgets in stock?", "tool": "stock_count", "accept": ["42"]},
    {"q": "What time does the shop open on Sunday?", "tool": "opening_hours", "accept": ["9", "nine"]},
    {"q": "Are you open on Friday evening?", "tool": "opening_hours", "accept": ["6", "six"]},
    {"q": "Will it rain in London today?", "tool": "get_weather", "accept": ["24", "sunny"]},
    {"q": "How warm is it in Madrid?", "tool": "get_weather", "accept": ["24"]},
    {"q": "Has my order 7731 shipped yet?", "tool": "get_order_status", "accept": ["shipped", "friday"]},
    {"q": "Can you check the status of order 1200?", "tool": "get_order_status", "accept": ["shipped", "friday"]},
]


def respond(rt: RealtimeClient, done_before: int) -> dict:
    """A response, asked again after a while if the session's text budget refused it (as an app would)."""
    while True:
        errors_before = len(rt.of("error"))
        rt.send({"type": "response.create"})
        rt.wait_for(lambda evs, seen=errors_before: sum(e.get("type") == "response.done" for e in evs) > done_before
                    or sum(e.get("type") == "error" for e in evs) > seen, REPLY_S)
        refused = [e["error"] for e in rt.of("error")[errors_before:]]
        if not refused:
            return rt.wait_type("response.done", done_before + 1, timeout=1)[done_before]["response"]
        assert all(e["code"] == "rate_limited" for e in refused), refused
        time.sleep(2.0)


def ask(rt: RealtimeClient, question: str) -> dict:
    """One question; a call of a function is answered with its result, as the app would, for the reply."""
    rt.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                          "content": [{"type": "input_text", "text": question}]}})
    sent = time.monotonic()
    response = respond(rt, len(rt.of("response.done")))
    calls = [o for o in response["output"] if o.get("type") == "function_call"]
    for call in calls:
        rt.send({"type": "conversation.item.create", "item": {"type": "function_call_output",
                                                              "call_id": call["call_id"],
                                                              "output": RESULTS.get(call["name"], "Unknown.")}})
    if calls:
        response = respond(rt, len(rt.of("response.done")))
    said = [e["text"] for e in rt.of("response.output_text.done") if e.get("response_id") == response["id"]]
    return {"q": question, "calls": [c["name"] for c in calls], "reply": " ".join(said).strip(),
            "took_s": round(time.monotonic() - sent, 3), "output": response["output"]}


def run_set(url: str, questions: list[dict]) -> list[dict]:
    rt = RealtimeClient(url, model="gpt-realtime")
    try:
        rt.wait_type("session.created")
        rt.send({"type": "session.update", "session": {"type": "realtime", "instructions": INSTRUCTIONS,
                                                       "tools": FUNCTIONS, "output_modalities": ["text"]}})
        rt.wait_type("session.updated")
        rows = []
        for question in questions:
            row = ask(rt, question["q"])
            row["tool"], row["right"] = question.get("tool"), is_right(question, row["reply"])
            rows.append(row)
            print(f"  {'ok ' if row['right'] else 'BAD'} {question['q']!r} -> {row['calls']} {row['reply'][:90]!r}",
                  flush=True)
        return rows
    finally:
        rt.close()


def report(needing: list[dict], plain: list[dict]) -> dict:
    summary = {
        "needing_function": len(needing),
        "right_call_pct": share(needing, lambda r: r["tool"] in r["calls"]),
        "wrong_call_pct": share(needing, lambda r: r["calls"] and r["tool"] not in r["calls"]),
        "no_call_pct": share(needing, lambda r: not r["calls"]),
        "right_answer_pct": share(needing, lambda r: r["right"]),
        "not_needing": len(plain),
        "false_call_pct": share(plain, lambda r: bool(r["calls"])),
        "right_answer_without_functions_pct": share(plain, lambda r: r["right"]),
        "took_p50_s": round(statistics.median(r["took_s"] for r in needing + plain), 3),
    }
    print(json.dumps(summary, indent=2))
    return summary


def prefilled(state: Path) -> dict:
    """Prompt tokens the engine computed per response (not found in its prefix cache), from the turn log."""
    import sqlite3

    with sqlite3.connect(state / "turns.sqlite3") as db:
        rows = [json.loads(t) for (t,) in db.execute("SELECT timings FROM turns")]
    computed = [t["prompt_tokens"] - t.get("cached_tokens", 0) for t in rows if "prompt_tokens" in t]
    return {"responses": len(computed), "prefilled_tokens_p50": statistics.median(computed) if computed else None,
            "prefilled_tokens_max": max(computed, default=None)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one)")
    parser.add_argument("--json", help="write every row and the summary here")
    args = parser.parse_args()
    server, url = None, args.url
    if url is None:
        import tempfile

        server = start_server(Path(tempfile.mkdtemp()), "--timeout", "3600")
        wait_ready(server)
        url = server.url
    try:
        print("questions that need one of the client's functions:")
        needing = run_set(url, NEEDING)
        print("questions that do not (the answer evaluation's report set):")
        plain = run_set(url, plain_questions())
        summary = report(needing, plain)
        if args.json:
            Path(args.json).write_text(json.dumps({"summary": summary, "needing": needing, "plain": plain}, indent=1))
        if server is not None:
            time.sleep(1.0)  # (the turn log writes on a thread of its own)
            summary["prefill"] = prefilled(server.state_dir)
            print(json.dumps(summary["prefill"]))
    finally:
        if server is not None:
            stop_server(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
