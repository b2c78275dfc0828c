"""Who a session's user is, for memory, without their typing anything: a random id in a long-lived cookie for a page
(ours or VITA's), a caller's number on the phone where the operator allows it (memory.phone), an app's own id for
its user on a Realtime client key its backend minted. None of them is
stored as it came: the key is an HMAC of it under this server's own secret (``state_dir/memory.key``), so the memory
file names no cookie and no phone number, and one kind of id can never pass for another. No id, no memory.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

COOKIE = "vita_user"
COOKIE_MAX_AGE_S = 400 * 86400  # the longest a browser keeps a cookie
_ID = re.compile(r"^[0-9a-f]{32}$")


def new_user_id() -> str:
    return secrets.token_hex(16)


def valid_user_id(value: str | None) -> bool:
    """A cookie's value that this server could have given (anything else is no user: a fresh id is given)."""
    return bool(value) and _ID.match(value) is not None


class UserKeys:
    def __init__(self, secret_path: Path):
        self.secret = self._secret(secret_path)

    def key(self, kind: str, value: str) -> str:
        """The user's key: ``kind`` ("page", "phone", "realtime") and their id under the server's secret."""
        return hmac.new(self.secret, f"{kind}:{value}".encode(), hashlib.sha256).hexdigest()[:32]

    @staticmethod
    def _secret(path: Path) -> bytes:
        """The server's secret, made once (readable by its owner only) and kept: keys stay the same across runs."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = None
        if data is not None:
            if len(data) < 32:  # (never replaced: every user's memory would be lost with it)
                raise ValueError(f"{path} holds {len(data)} bytes, not a 32-byte secret: restore it, or remove it "
                                 "together with the memory file")
            return data
        path.parent.mkdir(parents=True, exist_ok=True)
        data = secrets.token_bytes(32)
        try:  # (made once: a front starting beside another reads the other's)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return UserKeys._secret(path)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return data
