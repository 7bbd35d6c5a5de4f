"""The dashboard's guard in waitress itself, before a request body is read or a worker thread is taken.

waitress reads each request's whole body (in memory up to 512 KiB, then in an anonymous temporary file)
before the app sees it, so the Flask-level checks of :mod:`~envoy_dissector.dashboard.access` come after
the bytes are in. Here, as soon as a request's headers are complete:

- **access**: the Host allow-list and, when the dashboard has a token, the token (cookie,
  ``Authorization: Bearer`` or ``?token=``); a request without them is answered 403/401 and its
  connection closed, its body never read;
- **spool budget**: the bodies being received at once may announce at most ``spool_bytes`` together
  (a body without a length counts as the largest allowed); past it, 503 before any byte is read;
- **errors as JSON**: waitress's own refusals (413 over the upload cap, 400 malformed, 431 headers too
  large) get the ``{"error": TEXT}`` body the upload protocol documents, not plain text.

Connections are bounded too: one that has not completed an admitted request's headers within
``Guard.preauth_timeout_s`` of opening (default ``PREAUTH_TIMEOUT_S``; ``dashboard --preauth-timeout``) is
closed (idle sockets, a header sent a byte at a time), a client address holds at most ``MAX_PENDING_PER_CLIENT``
such connections (a new one closes its oldest), and an admitted connection idle for ``IDLE_TIMEOUT_S`` is closed
(waitress's ``channel_timeout``).

>>> budget = SpoolBudget(100)
>>> budget.reserve(60), budget.reserve(60), budget.release(60), budget.reserve(60)
(True, False, None, True)
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import BaseWSGIServer
from waitress.utilities import Error, RequestEntityTooLarge

from envoy_dissector.dashboard.access import COOKIE, QUERY_PARAM, SECURITY_HEADERS, AccessPolicy, hostname
from envoy_dissector.dashboard.upload import safe_name

PREAUTH_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 60
MAX_PENDING_PER_CLIENT = 8
#: how often waitress looks for idle connections (its default, 30 s, would let them pile up meanwhile)
CLEANUP_INTERVAL_S = 1


class JsonError(Error):
    """A refusal answered with ``{"error": TEXT}`` (and the dashboard's security headers)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason = code, reason

    # (waitress's stubs say the body is str; ErrorTask writes what it gets, and waitress's own Error gives bytes)
    def to_response(self, ident: str | None = None) -> tuple[str, list[tuple[str, str]], bytes]:  # type: ignore[override]
        body = json.dumps({"error": self.body}).encode()
        headers = [("Content-Type", "application/json"), ("Cache-Control", "no-store"), *SECURITY_HEADERS.items()]
        return f"{self.code} {self.reason}", headers, body


class SpoolBudget:
    """Bytes of request bodies that may be on their way in at once (thread-safe)."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self.reserved = 0
        self._lock = threading.Lock()

    def reserve(self, n: int) -> bool:
        with self._lock:
            if self.reserved + n > self.total_bytes:
                return False
            self.reserved += n
            return True

    def release(self, n: int) -> None:
        with self._lock:
            self.reserved = max(0, self.reserved - n)


@dataclass
class Guard:
    """What the server's connections check (see the module doc); one per server."""

    policy: AccessPolicy
    #: the refusal text of an over-cap body (the upload route's own message)
    too_large: str
    spool: SpoolBudget
    #: seconds a connection may take to complete an admitted request's headers
    preauth_timeout_s: float = PREAUTH_TIMEOUT_S
    #: connections not yet admitted, by client address (touched only by waitress's socket thread)
    pending: dict[str, list[GuardedChannel]] = field(default_factory=dict)

    def refusal(self, headers: Mapping[str, str], query: str) -> JsonError | None:
        """Why a request with these headers (waitress's upper-case names) may not go on, or None."""
        if not self.policy.host_allowed(headers.get("HOST")):
            return JsonError(403, "Forbidden", f"Host {hostname(headers.get('HOST'))!r} is not one this dashboard "
                                               "answers to (start it with --allowed-host NAME to add it)")
        if self.policy.token is None or any(self.policy.token_matches(t) for t in _tokens(headers, query)):
            return None
        return JsonError(401, "Unauthorized", "This dashboard needs its access token: open the address the server "
                                              "printed (http://HOST:PORT/?token=...), or ask whoever started it.")


def _tokens(headers: Mapping[str, str], query: str) -> list[str]:
    """The tokens a request offers: ``?token=``, the cookie, a bearer token."""
    out = parse_qs(query, max_num_fields=100).get(QUERY_PARAM, [])[:1]
    try:
        cookie = SimpleCookie(headers.get("COOKIE", ""))
    except CookieError:
        cookie = SimpleCookie()
    if COOKIE in cookie:
        out.append(cookie[COOKIE].value)
    auth = headers.get("AUTHORIZATION", "")
    if auth[:7].lower() == "bearer ":
        out.append(auth[7:].strip())
    return out


class GuardedParser(HTTPRequestParser):
    """waitress's request parser, judging a request when its headers are complete (see the module doc)."""

    def __init__(self, adj: Any, guard: Guard, channel: GuardedChannel) -> None:
        super().__init__(adj)
        self.guard, self.channel = guard, channel
        self.reserved = 0
        self.refused = False

    def received(self, data: bytes) -> int:
        before = self.headers_finished
        consumed = int(super().received(data))
        if self.headers_finished and not before:
            self._judge()
        if self.error is not None and not isinstance(self.error, JsonError):
            self.error = self._as_json(self.error)
            self.refused = True
        # a refused request's connection closes after the answer: the rest of what came is not a request
        return len(data) if self.refused else consumed

    def _judge(self) -> None:
        refusal = self.guard.refusal(self.headers, self._query())
        if refusal is None and self.error is None and (self.body_rcv is not None or self.chunked):
            size = self.adj.max_request_body_size if self.chunked else self.content_length
            if self.guard.spool.reserve(size):
                self.reserved = size
            else:
                refusal = JsonError(503, "Service Unavailable", "the server is receiving other uploads: try "
                                                                "again when they are in")
        if refusal is None:
            self.channel.admitted()
            return
        self.error, self.completed, self.refused = refusal, True, True
        self.expect_continue = False  # (no "100 Continue": the body is not wanted)
        if self.body_rcv is not None:
            self.body_rcv.getbuf().close()
            self.body_rcv = None

    def _as_json(self, error: Error) -> JsonError:
        if isinstance(error, RequestEntityTooLarge):  # worded as the upload route words it
            name = parse_qs(self._query(), max_num_fields=100).get("name", [None])[0]
            return JsonError(413, "Content Too Large", f"{safe_name(name)}: {self.guard.too_large}")
        return JsonError(int(error.code), str(error.reason), str(error.body))

    def _query(self) -> str:
        return str(getattr(self, "query", "") or "")  # (set by parse_header; not in waitress's stubs)

    def release(self) -> None:
        """Give the body's spool reservation back (idempotent)."""
        self.guard.spool.release(self.reserved)
        self.reserved = 0

    def close(self) -> None:
        self.release()
        super().close()


class GuardedChannel(HTTPChannel):
    """A waitress connection with the bounds of the module doc."""

    guard: Guard

    def __init__(self, server: Any, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:
        super().__init__(server, sock, addr, adj, map=map)
        self.guard = server.dissector_guard
        self.client = str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
        self.is_admitted = False
        pending = self.guard.pending.setdefault(self.client, [])
        pending.append(self)
        while len(pending) > MAX_PENDING_PER_CLIENT:
            oldest = pending.pop(0)
            oldest.will_close = True

    def parser_class(self, adj: Any) -> GuardedParser:  # type: ignore[override]  # waitress calls self.parser_class(adj)
        return GuardedParser(adj, self.guard, self)

    def admitted(self) -> None:
        if not self.is_admitted:
            self.is_admitted = True
            self._forget_pending()

    def _forget_pending(self) -> None:
        pending = self.guard.pending.get(self.client)
        if pending is not None and self in pending:
            pending.remove(self)
            if not pending:
                del self.guard.pending[self.client]

    def readable(self) -> bool:
        if not self.is_admitted and time.time() - self.creation_time > self.guard.preauth_timeout_s:
            self.will_close = True
        return bool(super().readable())

    def handle_close(self) -> None:
        self._forget_pending()
        with self.requests_lock:  # type: ignore[attr-defined]  # (not in waitress's stubs)
            for request in self.requests:  # (a worker thread may be reading its body: waitress closes it after)
                if isinstance(request, GuardedParser):
                    request.release()
            if self.request is not None:  # a request still coming in: nobody else will close it
                self.request.close()
        super().handle_close()


def install(server: Any, guard: Guard) -> None:
    """Make every listening socket of a waitress ``create_server`` result use :class:`GuardedChannel`."""
    listeners = [d for d in getattr(server, "map", {}).values() if isinstance(d, BaseWSGIServer)]
    for listener in listeners or [server]:
        setattr(listener, "dissector_guard", guard)  # noqa: B010  # (read by GuardedChannel)
        listener.channel_class = GuardedChannel


__all__ = ["CLEANUP_INTERVAL_S", "IDLE_TIMEOUT_S", "MAX_PENDING_PER_CLIENT", "PREAUTH_TIMEOUT_S", "Guard",
           "GuardedChannel", "JsonError", "SpoolBudget", "install"]
