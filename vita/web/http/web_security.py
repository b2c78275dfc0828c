"""What the front believes from proxies and what it asks browsers to enforce.

Forwarded headers: engine.io's same-origin check (and Flask's idea of the host and scheme) read X-Forwarded-Host
and X-Forwarded-Proto, so any client could name its own origin and pass the check. They are removed unless the
connection comes from a configured trusted proxy, whose headers are then applied (werkzeug's ProxyFix, one hop).
A request that carries them from an untrusted loopback or private address is most likely a reverse proxy the
operator forgot to list: its own address stands for every client behind it, so the request is marked
(``client_address`` is then None: unknown, treated as remote, e.g. by the WebRTC candidate filter) and a warning
names the address once.

Response headers: no sniffing, no framing, no referrer, HSTS over TLS, and a content security policy. Our own page
loads nothing but its own files; an operator's page (``--web_root``, e.g. VITA's with inline scripts and CDN
links) keeps only the framing, plug-in and base-URI rules.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.middleware.proxy_fix import ProxyFix

log = logging.getLogger("vita.web.security")

_FORWARDED = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_HOST",
              "HTTP_X_FORWARDED_PORT", "HTTP_X_FORWARDED_PREFIX")

OWN_PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
                "media-src 'self' blob: mediastream:; connect-src 'self'; worker-src 'self'; object-src 'none'; "
                "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
OPERATOR_PAGE_CSP = "object-src 'none'; base-uri 'self'; frame-ancestors 'none'"
UNTRUSTED_PROXY = "vita.untrusted_proxy"  # environ key: the peer forwarded this request for a client unknown
MAX_WARNED = 16  # untrusted proxies named in a warning (a client may send the headers itself: not one per request)


def client_address(environ: dict) -> str | None:
    """The client's address as far as the front can tell: None (unknown) when an untrusted proxy forwarded the
    request, whose own address is not the client's."""
    return None if environ.get(UNTRUSTED_PROXY) else environ.get("REMOTE_ADDR")


def _not_global(address: str | None) -> bool:
    try:
        ip = ipaddress.ip_address(address) if address else None
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip is not None and (ip.is_loopback or not ip.is_global)


class ForwardedHeaders:
    """WSGI middleware: X-Forwarded-* only from trusted proxies (applied), from anyone else removed."""

    def __init__(self, app: Callable, trusted: Iterable[str]):
        self.app = app
        self.trusted = frozenset(trusted)
        self.proxied = ProxyFix(app, x_for=1, x_proto=1, x_host=1, x_port=1)
        self.warned: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        peer = environ.get("REMOTE_ADDR")
        if peer in self.trusted:
            return self.proxied(environ, start_response)
        forwarded = [key for key in _FORWARDED if environ.pop(key, None) is not None]
        if forwarded and _not_global(peer):
            environ[UNTRUSTED_PROXY] = True
            self._warn(peer, forwarded)
        return self.app(environ, start_response)

    def _warn(self, peer: str | None, forwarded: list[str]) -> None:
        with self._lock:
            if peer in self.warned or len(self.warned) >= MAX_WARNED:
                return
            self.warned.add(str(peer))
        headers = ", ".join(key[5:].replace("_", "-").title() for key in forwarded)
        log.warning("%s sent %s but is not in --trusted_proxies: the headers are ignored, and its clients' "
                    "addresses are unknown (WebRTC sends no checks to their loopback or private candidates). If it is "
                    "your reverse proxy, add --trusted_proxies %s", peer, headers, peer)


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
