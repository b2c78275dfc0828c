"""Export the turn log as JSON: one session's turns (by the pseudonymous id the page shows), or every session.

Usage: .venv/bin/python scripts/export_turns.py [--db PATH] [--session ID | --sessions]
Default --db: the configured turn log (state_dir/turns.sqlite3). Prints JSON to stdout.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

from vita.config import load_config
from vita.ops.turn_log import read_turns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="turn log SQLite file (default: from --config)")
    parser.add_argument("--config", help="YAML config the server ran with (default: configs/default.yaml)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--session", help="pseudonymous session id")
    which.add_argument("--sessions", action="store_true", help="list sessions with their turn counts instead")
    args = parser.parse_args(argv)
    path = Path(args.db) if args.db else load_config(args.config).turn_log_path()
    if path is None or not path.is_file():
        print(f"export_turns: no turn log at {path}", file=sys.stderr)
        return 1
    try:
        turns = read_turns(path, args.session)
    except sqlite3.Error as exc:
        print(f"export_turns: cannot read {path}: {exc}", file=sys.stderr)
        return 1
    if args.sessions:
        counts: dict[str, dict] = {}
        for t in turns:
            entry = counts.setdefault(t["session"], {"session": t["session"], "turns": 0,
                                                     "first_at": t["started_at"]})
            entry["turns"] += 1
            entry["last_at"] = t["ended_at"]
        json.dump(list(counts.values()), sys.stdout, indent=2)
    else:
        json.dump({"session": args.session, "turns": turns}, sys.stdout, indent=2, ensure_ascii=False)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
