"""The cookie that names a browser's user for memory (vita/memory/user_keys.py): given to a browser that has none
when it loads the page (ours, or VITA's served as the web root), and on a Socket.IO handshake that came without it
(a page loaded before it existed), for the connections that follow: the one that came without it has no user, so
that a client that keeps no cookies (a script) is never promised a memory it could not come back to. Long-lived,
HttpOnly, SameSite=Lax."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from http.cookies import CookieError, SimpleCookie
from typing import Any

from vita.memory.user_keys import COOKIE, COOKIE_MAX_AGE_S, new_user_id, valid_user_id


def user_id_of(environ: dict[str, Any]) -> str | None:
    """The request's user id, when it carries one this server could have given."""
    try:
        cookies = SimpleCookie(environ.get("HTTP_COOKIE", ""))
    except CookieError:
        return None
    morsel = cookies.get(COOKIE)
    return morsel.value if morsel is not None and valid_user_id(morsel.value) else None


class UserCookie:
    def __init__(self, app: Callable, enabled: bool):
        self.app = app
        self.enabled = enabled

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if not self.enabled or not (path == "/" or path.startswith("/socket.io")) or user_id_of(environ):
            return self.app(environ, start_response)
        user = new_user_id()
        secure = "; Secure" if environ.get("wsgi.url_scheme") == "https" else ""
        cookie = f"{COOKIE}={user}; Max-Age={COOKIE_MAX_AGE_S}; Path=/; HttpOnly; SameSite=Lax{secure}"

        def with_cookie(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if status[:1] in "123":  # (a refused request, a page behind the access token, plants nothing)
                headers = [*headers, ("Set-Cookie", cookie)]
            return start_response(status, headers, exc_info)

        return self.app(environ, with_cookie)
