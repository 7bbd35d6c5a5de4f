"""Who may talk to the dashboard: the Host allow-list and the access token, checked on every request.

- **Host** (DNS rebinding): a page on ``evil.example`` whose name later resolves to 127.0.0.1 runs in
  the browser with the dashboard as its "same origin"; its requests still say ``Host: evil.example``.
  Only the names the server is reached by are accepted (``--allowed-host`` adds more).
- **Token**: required when the server listens on anything but loopback (generated when not given),
  optional on loopback. Accepted as ``?token=`` on a page load (the answer sets an HttpOnly
  ``SameSite=Strict`` cookie and redirects to the same URL without it, so the token leaves the
  address bar and the history), as that cookie, or as ``Authorization: Bearer``. Every route is
  covered: the page, Dash's callbacks and assets, and the upload route.

>>> hostname("Example.COM:8050"), hostname("[::1]:8050"), hostname("127.0.0.1")
('example.com', '::1', '127.0.0.1')
>>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
(True, True, False)
"""
from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlencode

from flask import Flask, Response, redirect, request
from werkzeug.wrappers import Response as BaseResponse

COOKIE = "dissector_access"
QUERY_PARAM = "token"
ANY_HOST = "*"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def new_token() -> str:
    """A random access token (192 bits, URL-safe)."""
    return secrets.token_urlsafe(24)


def hostname(host_header: str | None) -> str:
    """The host name of a ``Host`` header: lower case, without the port or IPv6 brackets."""
    h = (host_header or "").strip().lower()
    if h.startswith("["):
        return h[1:].split("]", 1)[0]
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server to this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_allowed_hosts(bind_host: str) -> set[str]:
    """Names a browser may use to reach a server bound to ``bind_host``: the loopback names, the bind
    address, and for a non-loopback bind this machine's name and addresses."""
    names = set(LOOPBACK_NAMES)
    if bind_host not in WILDCARDS:
        names.add(hostname(bind_host))
    if not is_loopback(bind_host):
        fqdn, short = socket.getfqdn(), socket.gethostname()
        names |= {fqdn.lower(), short.lower()}
        if bind_host in WILDCARDS:
            try:
                names |= {str(info[4][0]).lower() for info in socket.getaddrinfo(short, None)}
            except OSError:
                pass
    return {n for n in names if n}


@dataclass(frozen=True)
class AccessPolicy:
    """``token``: required on every request when set. ``allowed_hosts``: accepted ``Host`` names
    (lower case, no port); ``"*"`` accepts any."""

    token: str | None
    allowed_hosts: frozenset[str]

    @classmethod
    def for_bind(cls, bind_host: str, token: str | None = None, extra_hosts: Iterable[str] = ()) -> AccessPolicy:
        hosts = default_allowed_hosts(bind_host) | {hostname(h) if h != ANY_HOST else ANY_HOST for h in extra_hosts}
        return cls(token=token, allowed_hosts=frozenset(hosts))

    def host_allowed(self, host_header: str | None) -> bool:
        return ANY_HOST in self.allowed_hosts or hostname(host_header) in self.allowed_hosts

    def token_matches(self, supplied: str | None) -> bool:
        if self.token is None:
            return True
        return bool(supplied) and hmac.compare_digest(str(supplied).encode(), self.token.encode())


def _refuse(status: int, text: str) -> Response:
    return Response(text + "\n", status=status, mimetype="text/plain")


def _bearer() -> str | None:
    auth = request.headers.get("Authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


def install(server: Flask, policy: AccessPolicy) -> None:
    """Check ``policy`` before every request of ``server`` and add the security headers to every answer."""

    @server.before_request
    def check_access() -> BaseResponse | None:
        if not policy.host_allowed(request.host):
            return _refuse(403, f"Host {hostname(request.host)!r} is not one this dashboard answers to "
                                "(start it with --allowed-host NAME to add it)")
        if policy.token is None:
            return None
        supplied = request.args.get(QUERY_PARAM)
        if supplied is not None and policy.token_matches(supplied):
            if request.method in ("GET", "HEAD"):
                rest = [(k, v) for k, v in request.args.items(multi=True) if k != QUERY_PARAM]
                response = redirect(request.path + (f"?{urlencode(rest)}" if rest else ""), code=303)
                response.set_cookie(COOKIE, policy.token, httponly=True, samesite="Strict", path="/")
                return response
            return None
        if policy.token_matches(request.cookies.get(COOKIE)) or policy.token_matches(_bearer()):
            return None
        return _refuse(401, "This dashboard needs its access token: open the address the server printed "
                            "(http://HOST:PORT/?token=...), or ask whoever started it.")

    @server.after_request
    def security_headers(response: Response) -> Response:
        for key, value in SECURITY_HEADERS.items():
            response.headers.setdefault(key, value)
        if response.mimetype == "application/json":
            response.headers.setdefault("Cache-Control", "no-store")
        return response


__all__ = ["AccessPolicy", "default_allowed_hosts", "hostname", "install", "is_loopback", "new_token"]
