"""Trace and span ids of the OpenTelemetry export: derived from what the log says, so the same capture gives the
same ids every run (docs/otel.md).

>>> trace_id_for_request_id("7f5e1c2a-0000-4000-8000-000000000001") == trace_id_for_request_id(
...     "7f5e1c2a-0000-4000-8000-000000000001")
True
>>> len(trace_id_for_request_id("x")), len(span_id("uid", "server"))
(32, 16)
"""
from __future__ import annotations

import hashlib


def _digest(*parts: str, size: int) -> str:
    h = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).digest()[:size]
    if not any(h):  # an all-zero id is invalid in OpenTelemetry (a chance of 2^-64)
        h = b"\x00" * (size - 1) + b"\x01"
    return h.hex()


def trace_id_for_request_id(x_request_id: str) -> str:
    """The trace id of a request that carried no trace context: a hash of its ``x-request-id`` (a call crossing two
    sidecars logs the same id in both, so both sides land in one trace)."""
    return _digest("x-request-id", x_request_id, size=16)


def trace_id_for_uid(request_uid: str) -> str:
    """The trace id of a request with neither a trace context nor an ``x-request-id``: a hash of its uid."""
    return _digest("request", request_uid, size=16)


def span_id(request_uid: str, role: str) -> str:
    """The id of one span of a request (``server``, ``phase/3``, ``outbound``...): request uids are unique in a
    capture, so are these."""
    return _digest(request_uid, role, size=8)
