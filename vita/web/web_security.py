"""What the front believes from proxies and what it asks browsers to enforce.

Forwarded headers: engine.io's same-origin check (and Flask's idea of the host and scheme) read X-Forwarded-Host
and X-Forwarded-Proto, so any client could name its own origin and pass the check. They are removed unless the
connection comes from a configured trusted proxy, whose headers are then applied (werkzeug's ProxyFix, one hop).

Response headers: no sniffing, no framing, no referrer, HSTS over TLS, and a content security policy. Our own page
loads nothing but its own files; an operator's page (``--web_root``, e.g. VITA's with inline scripts and CDN
links) keeps only the framing, plug-in and base-URI rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.middleware.proxy_fix import ProxyFix

_FORWARDED = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_HOST",
              "HTTP_X_FORWARDED_PORT", "HTTP_X_FORWARDED_PREFIX")

OWN_PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
                "media-src 'self' blob: mediastream:; connect-src 'self'; worker-src 'self'; object-src 'none'; "
                "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
OPERATOR_PAGE_CSP = "object-src 'none'; base-uri 'self'; frame-ancestors 'none'"


class ForwardedHeaders:
    """WSGI middleware: X-Forwarded-* only from trusted proxies (applied), from anyone else removed."""

    def __init__(self, app: Callable, trusted: Iterable[str]):
        self.app = app
        self.trusted = frozenset(trusted)
        self.proxied = ProxyFix(app, x_for=1, x_proto=1, x_host=1, x_port=1)

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        if environ.get("REMOTE_ADDR") in self.trusted:
            return self.proxied(environ, start_response)
        for key in _FORWARDED:
            environ.pop(key, None)
        return self.app(environ, start_response)


def security_headers(tls: bool, operator_page: bool) -> dict[str, str]:
    headers = {
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "Content-Security-Policy": OPERATOR_PAGE_CSP if operator_page else OWN_PAGE_CSP,
        "Cross-Origin-Opener-Policy": "same-origin",
    }
    if tls:
        headers["Strict-Transport-Security"] = "max-age=31536000"
    return headers
