"""Memory evaluation: scripted conversations over several sessions, spoken, as users have them with the page — tell
something, leave, come back and ask; correct a fact; ask to forget it; talk off the record; ask as another user.
The first ten scenarios were run while the recall rules were mended (a job, a city, a dog's name were not found);
the last six were added after, to check the rules on facts they were not mended on.

Each user is a browser of their own (the page's cookie); each session a new connection with an open microphone
(VITA's JSON audio), questions spoken by a natural voice. Each check is a question in a later session whose reply
must name what was told (or must not name what was forgotten, said off the record, or told by someone else).
Reports right / total, the voice-to-voice and prompt tokens of the checked questions, and whether what was
forgotten is gone from the memory file.

Usage: .venv/bin/python -m scripts.eval.memory [--url URL --state_dir DIR] [--voice hibari|piper] [--json out.json]
       [-- server flags]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from scripts.bench.common import cpu_description
from scripts.bench.measure import ask
from tests.harness.client import RecordingClient
from tests.harness.speech import Microphone
from vita.memory.user_keys import COOKIE, new_user_id


@dataclass
class Check:
    question: str
    expect: tuple[str, ...] = ()  # right when the reply names any of these...
    forbid: tuple[str, ...] = ()  # ...and none of these


@dataclass
class Session:
    said: tuple[str, ...] = ()
    check: Check | None = None
    off_record: bool = False


@dataclass
class Scenario:
    name: str
    sessions: list[Session]
    user: str = ""  # scenarios that name the same user share one (another user's name: a user of their own)
    gone: tuple[str, ...] = ()  # words the memory file must no longer hold afterwards
    results: list[dict] = field(default_factory=list)


SCENARIOS = [
    Scenario("name, next session", [Session(("Hi, my name is Daniel.",)),
                                    Session(check=Check("What is my name?", ("daniel",)))], user="daniel"),
    Scenario("someone else's name", [Session(check=Check("What is my name?", forbid=("daniel",)))], user="stranger"),
    Scenario("asked to remember", [Session(("Please remember that I'm allergic to peanuts.",)),
                                   Session(check=Check("Am I allergic to anything?", ("peanut",)))]),
    Scenario("a correction", [Session(("I live in London.",)), Session(("Actually, I moved to Madrid.",)),
                              Session(check=Check("Which city do I live in?", ("madrid",), ("london",)))]),
    Scenario("asked to forget", [Session(("Remember that my sister is called Emily.",)),
                                 Session(("Forget about my sister.",)),
                                 Session(check=Check("What is my sister's name?", forbid=("emily",)))],
             gone=("Emily",)),
    Scenario("what it knows", [Session(("My favourite colour is green.", "I work as a nurse.")),
                               Session(check=Check("What do you know about me?", ("green", "nurse")))]),
    Scenario("a pet's name", [Session(("My dog is called Max.",)),
                              Session(check=Check("What is my dog's name?", ("max",)))]),
    Scenario("a job", [Session(("I work as a teacher.",)), Session(check=Check("What is my job?", ("teach",)))]),
    Scenario("off the record", [Session(("My name is Oliver.",), off_record=True),
                                Session(check=Check("Do you know my name?", forbid=("oliver",)))], gone=("Oliver",)),
    Scenario("where from", [Session(("I'm from Canada, by the way.",)),
                            Session(check=Check("Where am I from?", ("canada",)))]),
    Scenario("a name corrected", [Session(("My name is Robert.",)), Session(("Actually, please call me Bob.",)),
                                  Session(check=Check("What should you call me?", ("bob",)))]),
    Scenario("a favourite", [Session(("My favourite food is pizza.",)),
                             Session(check=Check("What is my favourite food?", ("pizza",)))]),
    Scenario("a partner", [Session(("My wife's name is Sophia.",)),
                           Session(check=Check("What is my wife called?", ("sophia",)))]),
    Scenario("a diet", [Session(("Remember that I'm vegetarian.",)),
                        Session(check=Check("Am I a vegetarian?", ("yes", "vegetarian"), ("not", "know")))]),
    Scenario("a later question, same session", [Session(("My name is Daniel.", "What is the capital of Italy?"),
                                                         check=Check("And what is my name?", ("daniel",)))],
             user="daniel"),
    Scenario("delete all", [Session(("Remember that I play the violin.",)),
                            Session(("Forget everything you know about me.",)),
                            Session(check=Check("What do you know about me?", forbid=("violin",)))],
             gone=("violin",)),
]


def right(reply: str, check: Check) -> bool:
    """Names one of the expected words (at a word's start: "teach" is "teacher") and none of the forbidden."""
    def says(word: str) -> bool:
        return re.search(rf"\b{re.escape(word)}", reply.lower()) is not None

    return (not check.expect or any(says(w) for w in check.expect)) and not any(says(w) for w in check.forbid)


def run_session(url: str, user: str, voice: str, session: Session) -> dict | None:
    client = RecordingClient(url).connect(headers={"Cookie": f"{COOKIE}={user}"})
    mic = Microphone(client, binary=False, name="memory-mic")
    try:
        client.wait_for(lambda evs: any(n == "server_status" and d.get("ready") for _, n, d in evs), 30)
        if session.off_record:
            client.sio.emit("client_settings", {"off_record": True})
            client.wait_for(lambda evs: any(n == "client_settings" and d.get("off_record") for _, n, d in evs), 10)
        for text in session.said:
            row = ask(client, mic, voice, text)
            print(f"    said {text!r} -> {row['reply'] if row else '(no reply)'!r}", flush=True)
        if session.check is None:
            return None
        row = ask(client, mic, voice, session.check.question)
        return row or {"question": session.check.question, "reply": "", "client_v2v_s": None}
    finally:
        mic.close()
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one)")
    parser.add_argument("--state_dir", help="with --url: its state folder (where memory.sqlite3 is)")
    parser.add_argument("--voice", default="hibari", choices=("hibari", "piper"))
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("server_args", nargs="*", help="after --: flags for the server it starts")
    args = parser.parse_args()
    server, url, state = None, args.url, Path(args.state_dir) if args.state_dir else None
    if url is None:
        from tests.harness.server import start_server, wait_ready

        server = start_server(Path(tempfile.mkdtemp()), "--timeout", "3600", *args.server_args)
        wait_ready(server)
        url, state = server.url, server.state_dir
    users: dict[str, str] = {}
    try:
        for scenario in SCENARIOS:
            user = users.setdefault(scenario.user or scenario.name, new_user_id())
            print(f"{scenario.name}:", flush=True)
            for session in scenario.sessions:
                row = run_session(url, user, args.voice, session)
                if row is not None:
                    row["right"] = right(row.get("reply", ""), session.check)
                    scenario.results.append(row)
                    print(f"  {'RIGHT' if row['right'] else 'WRONG'} {session.check.question!r} -> "
                          f"{row.get('reply')!r}", flush=True)
    finally:
        if server is not None:
            from tests.harness.server import stop_server

            stop_server(server)
    rows = [r for s in SCENARIOS for r in s.results]
    memory_file = state / "memory.sqlite3" if state else None
    leaks = [w for s in SCENARIOS for w in s.gone
             if memory_file is not None and memory_file.exists() and w.encode() in memory_file.read_bytes()]
    v2v = [r["client_v2v_s"] for r in rows if r.get("client_v2v_s") is not None]
    tokens = [r["prompt_tokens"] for r in rows if r.get("prompt_tokens") is not None]
    machine = cpu_description()
    print(f"\nCPU: {machine['model']} (family {machine['family']}, model {machine['model_number']}), {machine['isa']}")
    print(f"voice {args.voice}: {sum(r['right'] for r in rows)} right of {len(rows)} "
          f"({100 * sum(r['right'] for r in rows) / max(1, len(rows)):.0f} %)")
    if v2v:
        print(f"checked questions: v2v p50 {statistics.median(v2v):.3f} s, max {max(v2v):.3f} s; prompt tokens p50 "
              f"{statistics.median(tokens) if tokens else 0:.0f}")
    print("forgotten words still in the memory file: " + (", ".join(leaks) if leaks else "none")
          if memory_file is not None else "memory file not checked (give --state_dir with --url)")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu_model": machine, "voice": args.voice, "rows": rows,
                                               "leaks": leaks}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
