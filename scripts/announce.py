"""Send a notice to every user on every front process (or to one Socket.IO session) through the Redis queue.

    .venv/bin/python scripts/announce.py --message_queue redis://127.0.0.1:6379/0 "Restarting in 5 minutes."

The page shows it as a banner. Only deployments started with --message_queue can be reached this way.
"""

from __future__ import annotations

import argparse
import sys

from vita.web.message_queue import announce, redacted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--message_queue", required=True, help="the redis:// URL the front processes use")
    parser.add_argument("--to", help="one Socket.IO session id instead of everyone (write --to=SID: an id may begin "
                                     "with '-')")
    parser.add_argument("message")
    args = parser.parse_args(argv)
    if not args.message.strip():
        parser.error("the message is empty")
    import redis

    try:
        redis.Redis.from_url(args.message_queue, socket_connect_timeout=2).ping()
    except (redis.RedisError, ValueError) as exc:
        print(f"announce: error: cannot reach {redacted(args.message_queue)} ({exc})", file=sys.stderr)
        return 1
    announce(args.message_queue, args.message.strip(), args.to)
    print(f"announce: sent to {args.to or 'everyone'} via {redacted(args.message_queue)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
