"""Export the turn log as JSON: one session's turns (by the pseudonymous id the page shows), or every session;
or bundle one session for a bug report: its turns and their recordings (where it recorded them) in one .tar.gz.

Usage: .venv/bin/python scripts/export_turns.py [--db PATH] [--session ID [--bundle FILE.tar.gz] | --sessions]
Default --db: the configured turn log (state_dir/turns.sqlite3). Prints JSON to stdout (--bundle: the file's path).
"""

from __future__ import annotations

import argparse
import io
import json
import sqlite3
import sys
import tarfile
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
    parser.add_argument("--bundle", metavar="FILE", help="with --session: write its turns and recordings to this "
                                                         ".tar.gz for a bug report")
    args = parser.parse_args(argv)
    if args.bundle and not args.session:
        parser.error("--bundle needs --session")
    path = Path(args.db) if args.db else load_config(args.config).turn_log_path()
    if path is None or not path.is_file():
        print(f"export_turns: no turn log at {path}", file=sys.stderr)
        return 1
    try:
        turns = read_turns(path, args.session)
    except sqlite3.Error as exc:
        print(f"export_turns: cannot read {path}: {exc}", file=sys.stderr)
        return 1
    if args.bundle:
        if not turns:
            print(f"export_turns: no turns of session {args.session} in {path}", file=sys.stderr)
            return 1
        print(bundle(args.session, turns, Path(args.bundle)))
        return 0
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


def bundle(session: str, turns: list[dict], out: Path) -> Path:
    """<session>/turns.json, and each recorded turn's folder beside it (a recording that has since been pruned is
    simply not there)."""
    with tarfile.open(out, "w:gz") as tar:
        data = json.dumps({"session": session, "turns": turns}, indent=2, ensure_ascii=False).encode()
        info = tarfile.TarInfo(f"{session}/turns.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for turn in turns:
            folder = Path(turn.get("recording") or "")
            if turn.get("recording") and folder.is_dir():
                tar.add(folder, arcname=f"{session}/{folder.name}")
    return out


if __name__ == "__main__":
    sys.exit(main())
