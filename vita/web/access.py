"""The optional access token: checked for the page, /metrics and every Socket.IO connection.

A token may come as `?token=` (the link an operator hands out; the page then keeps it in an HttpOnly cookie and
drops it from the address bar), as `Authorization: Bearer` (scrapers, scripts) or in Socket.IO's connect `auth`.
/health and /ready stay open for liveness probes (/health's detail — workers, paths, addresses, errors — only with
the token). Comparison is constant-time.
"""

from __future__ import annotations

import hmac
from typing import Any

COOKIE = "vita_token"
OPEN_PATHS = ("/health", "/ready")


class AccessGuard:
    def __init__(self, token: str | None):
        self._token = token.encode() if token else None

    @property
    def enabled(self) -> bool:
        return self._token is not None

    def check(self, offered: str | None) -> bool:
        if self._token is None:
            return True
        if not isinstance(offered, str):
            return False
        # surrogatepass: a token with a lone surrogate (valid JSON, not valid UTF-8) is just a wrong token.
        return hmac.compare_digest(offered.encode("utf-8", "surrogatepass"), self._token)

    @staticmethod
    def offered(request: Any, auth: Any = None) -> str | None:
        """The token a request carries, wherever it put it."""
        if isinstance(auth, dict) and isinstance(auth.get("token"), str):
            return auth["token"]
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            return header[7:].strip()
        return request.args.get("token") or request.cookies.get(COOKIE)

    def allows(self, request: Any, auth: Any = None) -> bool:
        return self.check(self.offered(request, auth))
