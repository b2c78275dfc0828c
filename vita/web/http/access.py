"""The optional access token: checked for the page, /metrics and every Socket.IO connection.

A token may come as `?token=` (the link an operator hands out; the page drops it from the address bar and the
browser keeps a pass in an HttpOnly cookie instead), as `Authorization: Bearer` (scrapers, scripts) or in
Socket.IO's connect `auth`.
/health and /ready stay open for liveness probes (/health's detail — workers, paths, addresses, errors — only with
the token). Comparison is constant-time.

Guessing is throttled per client address (an IPv6 client by its /64, which one host usually holds whole): after
MAX_FAILURES wrong tokens within FAILURE_WINDOW_S, everything from there but a token-less probe of /health or
/ready is answered 429 with Retry-After for LOCKOUT_S (``TokenThrottle``). A success resets nothing: a user behind
the same NAT as a guesser must not wipe the guesser's count.

Behind that NAT, the users already let in must not be locked out with the guesser. So the page's cookie holds a
*pass*, not the token: an HMAC of the token that only a holder of the token is handed. A pass cannot be guessed
(256 bits), so a request carrying the right one goes through a lockout; a guesser gains nothing from trying passes.

Nor must a script's or app's own key stop working there. A locked-out address still has a token checked when it
begins as the real one does (its first NEAR_CHARS characters, at most half of it): a guesser would need those
first (8 characters: ~2^47 tries of a random token), and wrong tokens that begin so are counted on their own
(address, prefix) count, which locks out those too. A client key the Realtime door holds unused goes through as
well (TokenThrottle's `live_key`: 192 random bits, used once). So only someone who knows how the token begins can
lock its holders out of their address.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import ipaddress
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from werkzeug.wrappers import Request

log = logging.getLogger("vita.web.http.access")

COOKIE = "vita_token"
PASS_LABEL = b"vita page pass"  # what the token signs to make the page's pass
OPEN_PATHS = ("/health", "/ready")
MAX_FAILURES = 10  # wrong tokens from one address...
FAILURE_WINDOW_S = 60.0  # ...within this long...
LOCKOUT_S = 60.0  # ...and it is refused (429) this long
MAX_TRACKED = 4096  # addresses with recent failures kept (the oldest forgotten first): bounded memory
NEAR_CHARS = 8  # a token that begins as the real one for this many characters (at most half) is checked in a lockout


def client_key(address: str | None) -> str | None:
    """What failures are counted against: the address, or an IPv6 address's /64."""
    try:
        ip = ipaddress.ip_address(address) if address else None
    except ValueError:
        return address or None
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip) if ip else None


class FailureThrottle:
    """Wrong-token counts per client key in a sliding window, and the lockouts they earn."""

    def __init__(self, max_failures: int = MAX_FAILURES, window_s: float = FAILURE_WINDOW_S,
                 lockout_s: float = LOCKOUT_S, clock: Callable[[], float] = time.monotonic):
        self.max_failures, self.window_s, self.lockout_s, self.clock = max_failures, window_s, lockout_s, clock
        self._failures: collections.OrderedDict[str, collections.deque[float]] = collections.OrderedDict()
        self._locked: dict[str, float] = {}  # key -> until
        self._lock = threading.Lock()

    def failed(self, address: str | None, near: bool = False) -> None:
        """A wrong token from `address`; `near`: it began as the right one, and counts on that count as well."""
        key = client_key(address)
        if key is None:
            return
        if near:
            self._failed(f"{key} near")
        self._failed(key)

    def _failed(self, key: str) -> None:
        now = self.clock()
        with self._lock:
            times = self._failures.pop(key, None) or collections.deque(maxlen=self.max_failures)
            times.append(now)
            if len(times) == self.max_failures and now - times[0] <= self.window_s:
                self._locked[key] = now + self.lockout_s
                log.warning("%d wrong access tokens from %s within %.0f s: refused (429) for %.0f s",
                            self.max_failures, key, self.window_s, self.lockout_s)
                return  # its count starts again after the lockout
            self._failures[key] = times
            while len(self._failures) > MAX_TRACKED:
                self._failures.popitem(last=False)
            if len(self._locked) > MAX_TRACKED:  # lockouts end by themselves: the ended ones go
                self._locked = {k: until for k, until in self._locked.items() if until > now}

    def retry_after(self, address: str | None, near: bool = False) -> float | None:
        """Seconds left of the address's lockout (`near`: of the lockout of its tokens that begin as the right one),
        or None when it is not locked out."""
        key = client_key(address)
        if key is None:
            return None
        if near:
            key = f"{key} near"
        with self._lock:
            until = self._locked.get(key)
            if until is None:
                return None
            left = until - self.clock()
            if left <= 0:
                del self._locked[key]
                return None
            return left


class AccessGuard:
    def __init__(self, token: str | None, throttle: FailureThrottle | None = None):
        self._token = token.encode() if token else None
        # Derived from the token alone, so every front of a scale-out (and a restart) hands out the same pass.
        self.page_pass = hmac.new(self._token, PASS_LABEL, hashlib.sha256).hexdigest() if self._token else None
        self._pass = self.page_pass.encode() if self.page_pass else None
        self.throttle = throttle or FailureThrottle()

    @property
    def enabled(self) -> bool:
        return self._token is not None

    def check(self, offered: str | None, client: str | None = None) -> bool:
        """Whether `offered` is the token (or the page's pass); a wrong one (not a missing one: a page's first visit
        without its link is no guess) counts against `client`, the address it came from."""
        if self._token is None:
            return True
        if self._equal(offered, self._token) or self._equal(offered, self._pass):
            return True
        if isinstance(offered, str) and offered:
            self.throttle.failed(client, near=self.near(offered))
        return False

    def operator(self, request: Any) -> bool:
        """The operator's own token as a Bearer header (never the page's pass: a user's browser holds that). False
        when the server has no token: then nobody is the operator."""
        offered = self._bearer(request)
        if self._equal(offered, self._token):
            return True
        if offered:
            self.throttle.failed(request.remote_addr, near=self.near(offered))
        return False

    def near(self, offered: object) -> bool:
        """Whether `offered` begins as the token does (NEAR_CHARS characters, at most half of it; constant-time)."""
        if self._token is None or not isinstance(offered, str):
            return False
        length = min(NEAR_CHARS, len(self._token) // 2)
        return hmac.compare_digest(offered.encode("utf-8", "surrogatepass")[:length], self._token[:length])

    @staticmethod
    def _equal(offered: object, secret: bytes | None) -> bool:
        """Constant-time. surrogatepass: a token with a lone surrogate (valid JSON, not valid UTF-8) is just wrong."""
        return (secret is not None and isinstance(offered, str)
                and hmac.compare_digest(offered.encode("utf-8", "surrogatepass"), secret))

    def holds_pass(self, request: Any) -> bool:
        """Whether the request offers the page's pass and nothing else: a browser that was let in already (a
        request that also brings a token of its own is checked on that token, and a guess stays a guess)."""
        cookie = request.cookies.get(COOKIE)
        return self.offered(request) == cookie and self._equal(cookie, self._pass)

    def holds_old_cookie(self, request: Any) -> bool:
        """A cookie from before the page's pass: the token itself (it still opens the page; it is replaced)."""
        return self._equal(request.cookies.get(COOKIE), self._token)

    @staticmethod
    def offered(request: Any, auth: Any = None) -> str | None:
        """The token a request carries, wherever it put it."""
        if isinstance(auth, dict) and isinstance(auth.get("token"), str):
            return auth["token"]
        bearer = AccessGuard._bearer(request)
        if bearer is not None:
            return bearer
        return request.args.get("token") or request.cookies.get(COOKIE)

    @staticmethod
    def _bearer(request: Any) -> str | None:
        """The token of an ``Authorization: Bearer`` header, if the request has one."""
        header = request.headers.get("Authorization", "")
        return header[7:].strip() if header.startswith("Bearer ") else None

    def allows(self, request: Any, auth: Any = None) -> bool:
        return self.check(self.offered(request, auth), request.remote_addr)


class TokenThrottle:
    """WSGI middleware (inside ForwardedHeaders, so a trusted proxy's client is the one counted): a locked-out
    address gets 429 and Retry-After for everything, Socket.IO and /v1/realtime included, except token-less
    liveness probes (a probe that offers a token could still learn whether it is right from /health), browsers
    that hold the page's pass (the guesser's neighbours behind one NAT, let in before), tokens that begin as the
    right one (unless those from there are locked out too) and client keys `live_key` holds unused. `token_of`
    reads the token wherever a request may put it (the Realtime door's WebSocket subprotocol included)."""

    def __init__(self, app: Callable, guard: AccessGuard, token_of: Callable[[dict], str | None] | None = None,
                 live_key: Callable[[str], bool] | None = None):
        self.app, self.guard = app, guard
        self.token_of = token_of or (lambda environ: AccessGuard.offered(Request(environ)))
        self.live_key = live_key

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        address = environ.get("REMOTE_ADDR")
        left = self.guard.throttle.retry_after(address) if self.guard.enabled else None
        if left is None:
            return self.app(environ, start_response)
        request = Request(environ)
        if environ.get("PATH_INFO") in OPEN_PATHS and not AccessGuard.offered(request):
            return self.app(environ, start_response)
        if self.guard.holds_pass(request):
            return self.app(environ, start_response)
        offered = self.token_of(environ)
        if offered and self.live_key is not None and self.live_key(offered):
            return self.app(environ, start_response)
        if self.guard.near(offered):
            near_left = self.guard.throttle.retry_after(address, near=True)
            if near_left is None:
                return self.app(environ, start_response)  # checked there; a wrong one counts
            left = near_left
        seconds = max(1, math.ceil(left))
        start_response("429 Too Many Requests", [("Content-Type", "text/plain; charset=utf-8"),
                                                 ("Retry-After", str(seconds))])
        return [f"Too many wrong access tokens from this address; try again in {seconds} s.\n".encode()]
