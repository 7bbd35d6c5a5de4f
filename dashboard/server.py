"""Serve the dashboard with waitress, a production WSGI server (pure Python, no C build), instead of
Flask's development server.

Waitress buffers each request body (in memory up to 512 KiB, then in an anonymous temporary file)
before the app sees it, so a slow client never holds a worker thread; :mod:`~envoy_dissector.dashboard.guard`
judges each request as soon as its headers are in (access, the spool budget, connection bounds), so a
refused body is never read. ``max_request_body_size`` turns away a body larger than the upload cap before
it is buffered. It never sends a traceback to the client, and it is told not to trust proxy headers
(``X-Forwarded-*``), so the Host check sees what the client sent.
"""
from __future__ import annotations

from typing import Any

from dash import Dash

from envoy_dissector.dashboard import guard
from envoy_dissector.dashboard.access import AccessPolicy
from envoy_dissector.dashboard.content import too_large_message

#: request bodies beyond the upload cap are refused by waitress itself; this much more is allowed (gzip
#: framing of an incompressible file; the upload route's content meter applies the exact cap)
BODY_SLACK_BYTES = 2 * 1024 * 1024
THREADS = 8
CONNECTION_LIMIT = 100
#: bodies on their way in at once: this many of the largest allowed (callbacks' bodies are kilobytes)
SPOOLED_BODIES = 2


def server_options(max_body_bytes: int, threads: int = THREADS) -> dict[str, Any]:
    """waitress settings for the dashboard (see the module doc)."""
    return {
        "threads": threads,
        "connection_limit": CONNECTION_LIMIT,
        "channel_timeout": guard.IDLE_TIMEOUT_S,
        "cleanup_interval": guard.CLEANUP_INTERVAL_S,
        "max_request_body_size": max_body_bytes + BODY_SLACK_BYTES,
        "max_request_header_size": 64 * 1024,
        "clear_untrusted_proxy_headers": True,
        "expose_tracebacks": False,
        "ident": "envoy-dissector",
        "asyncore_use_poll": True,
    }


def serve(app: Dash, host: str, port: int, *, max_body_bytes: int, threads: int = THREADS,
          preauth_timeout_s: float = guard.PREAUTH_TIMEOUT_S) -> None:
    """Serve ``app`` on ``host:port`` until interrupted."""
    from waitress.server import create_server

    options = server_options(max_body_bytes, threads)
    policy = app.server.config.get("DISSECTOR_POLICY") or AccessPolicy.for_bind(host)
    server = create_server(app.server, host=host, port=port, **options)
    guard.install(server, guard.Guard(policy=policy, too_large=too_large_message(max_body_bytes),
                                      spool=guard.SpoolBudget(SPOOLED_BODIES * options["max_request_body_size"]),
                                      preauth_timeout_s=preauth_timeout_s))
    try:
        server.run()
    finally:
        server.close()


__all__ = ["serve", "server_options"]
