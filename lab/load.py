"""Bounded loopback load: C connections (one thread each) × R requests, with per-request client timing.

HTTP/1.1 keep-alive over raw sockets (``TCP_NODELAY``), or HTTP/2 cleartext
with prior knowledge (PyPI ``h2``) with up to ``streams`` requests in flight per
connection. Every request carries its own ``x-request-id`` (uuid4) so the
client log joins Envoy's access log and the upstream's log. Results go to
``client.jsonl``, one object per request::

    {"x_request_id": "...", "start_ts_us": 1700000000123456, "latency_us": 812, "status": 200,
     "connection": 0, "stream": 1, "local_port": 40112, "body_bytes": 64, "error": null,
     "trace_id": null, "parent_span_id": null}

``start_ts_us`` is the epoch µs just before the request was written;
``latency_us`` runs from then until the last response byte was read.
Hard caps: at most :data:`MAX_TOTAL_REQUESTS` requests and ``max_wall_s`` seconds.
"""
from __future__ import annotations

import json
import secrets
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from envoy_dissector.lab.envoy import LabError

#: Absolute cap on requests per load run, whatever the settings say.
MAX_TOTAL_REQUESTS: Final = 20_000
#: Absolute cap on one load run's wall time (seconds).
MAX_WALL_S: Final = 300.0


@dataclass(frozen=True, kw_only=True)
class LoadSettings:
    """Shape of the load."""

    connections: int = 1
    """Client connections, one thread each."""
    requests_per_connection: int = 50
    """Requests sent on each connection (keep-alive)."""
    http2: bool = False
    """Speak HTTP/2 cleartext with prior knowledge instead of HTTP/1.1."""
    streams: int = 1
    """HTTP/2 only: requests kept in flight at once on a connection."""
    method: str = "GET"
    path: str = "/"
    request_body_bytes: int = 0
    """Request body size (sent with ``content-length``)."""
    extra_headers: tuple[tuple[str, str], ...] = ()
    """Added to every request, e.g. ``(("x-lab-delay-ms", "5"),)``."""
    think_ms: float = 0.0
    """Pause between two requests on one connection."""
    max_wall_s: float = 60.0
    """Stop issuing requests after this many seconds."""
    trace_headers: str = ""
    """A trace context on each request, as an instrumented app sends one: ``w3c`` (``traceparent``), ``b3``
    (``x-b3-traceid``/``x-b3-spanid``/``x-b3-sampled``), ``mixed`` (w3c, b3 and none in turn on a connection),
    or ``""`` (none). Each request's trace id and span id go to ``client.jsonl``."""

    @property
    def total_requests(self) -> int:
        return self.connections * self.requests_per_connection


@dataclass(kw_only=True)
class ClientRecord:
    """One request as the client saw it."""

    x_request_id: str
    start_ts_us: int
    latency_us: int | None
    status: int | None
    connection: int
    stream: int | None = None
    local_port: int | None = None
    body_bytes: int = 0
    error: str | None = None
    #: the trace context the request carried (``LoadSettings.trace_headers``): its trace id and the sender's span id
    trace_id: str | None = None
    parent_span_id: str | None = None


@dataclass(kw_only=True)
class LoadResult:
    """Summary of one load run."""

    records: list[ClientRecord] = field(default_factory=list)
    wall_s: float = 0.0
    hit_wall_limit: bool = False

    @property
    def requests(self) -> int:
        return len(self.records)

    @property
    def errors(self) -> int:
        return sum(1 for r in self.records if r.error is not None)

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s if self.wall_s > 0 else 0.0


def _now_us() -> int:
    return time.time_ns() // 1000


TRACE_HEADER_MODES: Final = ("", "w3c", "b3", "mixed")


def trace_context(mode: str, n: int) -> tuple[list[tuple[str, str]], str | None, str | None]:
    """The trace headers of a connection's ``n``-th request under ``mode``, its trace id and span id (random).

    >>> headers, trace_id, span_id = trace_context("mixed", 1)
    >>> [k for k, _ in headers], len(trace_id), len(span_id)
    (['x-b3-traceid', 'x-b3-spanid', 'x-b3-sampled'], 32, 16)
    >>> trace_context("mixed", 2)
    ([], None, None)
    """
    if mode not in TRACE_HEADER_MODES:
        raise LabError(f"trace headers {mode!r}: use one of {', '.join(repr(m) for m in TRACE_HEADER_MODES)}")
    kind = ("w3c", "b3", "")[n % 3] if mode == "mixed" else mode
    if not kind:
        return [], None, None
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    if kind == "w3c":
        return [("traceparent", f"00-{trace_id}-{span_id}-01")], trace_id, span_id
    return [("x-b3-traceid", trace_id), ("x-b3-spanid", span_id), ("x-b3-sampled", "1")], trace_id, span_id


class _Http1Client:
    def __init__(self, port: int, settings: LoadSettings, index: int, deadline: float) -> None:
        self.port, self.settings, self.index, self.deadline = port, settings, index, deadline
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local_port = int(self.sock.getsockname()[1])
        self.buf = b""
        self.sent = 0

    def _recv(self) -> bytes:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("load wall-time limit reached")
        self.sock.settimeout(min(remaining, 30.0))
        chunk = self.sock.recv(262144)
        if not chunk:
            raise ConnectionError("connection closed by Envoy")
        return chunk

    def request(self, body: bytes) -> ClientRecord:
        s = self.settings
        xid = str(uuid.uuid4())
        lines = [f"{s.method} {s.path} HTTP/1.1", f"host: 127.0.0.1:{self.port}", f"x-request-id: {xid}",
                 "user-agent: envoy-dissector-lab"]
        lines += [f"{k}: {v}" for k, v in s.extra_headers]
        traced, trace_id, span_id = trace_context(s.trace_headers, self.sent)
        self.sent += 1
        lines += [f"{k}: {v}" for k, v in traced]
        if body or s.method in ("POST", "PUT"):
            lines.append(f"content-length: {len(body)}")
        wire = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        start_ts_us = _now_us()
        t0 = time.perf_counter_ns()
        record = ClientRecord(x_request_id=xid, start_ts_us=start_ts_us, latency_us=None, status=None,
                              connection=self.index, local_port=self.local_port, trace_id=trace_id,
                              parent_span_id=span_id)
        try:
            self.sock.sendall(wire)
            while (end := self.buf.find(b"\r\n\r\n")) < 0:
                self.buf += self._recv()
            head = self.buf[:end].decode("latin-1").split("\r\n")
            record.status = int(head[0].split(" ", 2)[1])
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
            if "content-length" not in headers:
                raise ConnectionError("response without content-length (not supported by the lab client)")
            length = int(headers["content-length"])
            while len(self.buf) < end + 4 + length:
                self.buf += self._recv()
            record.latency_us = (time.perf_counter_ns() - t0) // 1000
            record.body_bytes = length
            self.buf = self.buf[end + 4 + length:]
        except (OSError, ValueError, IndexError) as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        return record

    def close(self) -> None:
        self.sock.close()


def _run_http1(port: int, settings: LoadSettings, index: int, count: int, deadline: float,
               out: list[ClientRecord], start: threading.Barrier) -> None:
    body = b"b" * settings.request_body_bytes
    try:
        client = _Http1Client(port, settings, index, deadline)
    except OSError as exc:
        start.abort()
        out.append(ClientRecord(x_request_id="", start_ts_us=_now_us(), latency_us=None, status=None,
                                connection=index, error=f"connect: {exc}"))
        return
    try:
        start.wait(timeout=30)
        for i in range(count):
            if time.monotonic() >= deadline:
                break
            record = client.request(body)
            out.append(record)
            if record.error is not None:
                break
            if settings.think_ms > 0 and i + 1 < count:
                time.sleep(settings.think_ms / 1000.0)
    except threading.BrokenBarrierError:
        pass
    finally:
        client.close()


def _run_http2(port: int, settings: LoadSettings, index: int, count: int, deadline: float,
               out: list[ClientRecord], start: threading.Barrier) -> None:
    try:
        import h2.config
        import h2.connection
        import h2.events
    except ImportError as exc:  # pragma: no cover - depends on the environment
        start.abort()
        raise LabError("HTTP/2 load needs the PyPI package h2: "
                       "pip install -e \".[lab]\" in the project's clone") from exc
    body = b"b" * settings.request_body_bytes
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError as exc:
        start.abort()
        out.append(ClientRecord(x_request_id="", start_ts_us=_now_us(), latency_us=None, status=None,
                                connection=index, error=f"connect: {exc}"))
        return
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    local_port = int(sock.getsockname()[1])
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    pending: dict[int, tuple[ClientRecord, int]] = {}
    issued = 0
    try:
        start.wait(timeout=30)
        sock.sendall(conn.data_to_send())
        while (issued < count or pending) and time.monotonic() < deadline:
            new: list[tuple[int, ClientRecord]] = []
            while issued < count and len(pending) + len(new) < max(1, settings.streams):
                sid = conn.get_next_available_stream_id()
                xid = str(uuid.uuid4())
                traced, trace_id, span_id = trace_context(settings.trace_headers, issued)
                headers = [(":method", settings.method), (":scheme", "http"), (":path", settings.path),
                           (":authority", f"127.0.0.1:{port}"), ("x-request-id", xid),
                           ("user-agent", "envoy-dissector-lab"), *settings.extra_headers, *traced]
                if body:
                    headers.append(("content-length", str(len(body))))
                conn.send_headers(sid, headers, end_stream=not body)
                if body:
                    conn.send_data(sid, body, end_stream=True)
                rec = ClientRecord(x_request_id=xid, start_ts_us=0, latency_us=None, status=None,
                                   connection=index, stream=sid, local_port=local_port, trace_id=trace_id,
                                   parent_span_id=span_id)
                new.append((sid, rec))
                issued += 1
            if new:
                ts_us, t0 = _now_us(), time.perf_counter_ns()
                for sid, rec in new:
                    rec.start_ts_us = ts_us
                    pending[sid] = (rec, t0)
            data = conn.data_to_send()
            if data:
                sock.sendall(data)
            if not pending:
                continue
            sock.settimeout(max(0.001, min(deadline - time.monotonic(), 30.0)))
            chunk = sock.recv(262144)
            if not chunk:
                raise ConnectionError("connection closed by Envoy")
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived):
                    rec = pending[event.stream_id][0]
                    for key, value in event.headers:
                        if key in (":status", b":status"):
                            rec.status = int(value)
                elif isinstance(event, h2.events.DataReceived):
                    pending[event.stream_id][0].body_bytes += len(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    rec, t0 = pending.pop(event.stream_id)
                    rec.latency_us = (time.perf_counter_ns() - t0) // 1000
                    out.append(rec)
                elif isinstance(event, h2.events.StreamReset):
                    rec, _ = pending.pop(event.stream_id)
                    rec.error = f"stream reset, code {event.error_code}"
                    out.append(rec)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise ConnectionError(f"GOAWAY {event.error_code}")
            data = conn.data_to_send()
            if data:
                sock.sendall(data)
        conn.close_connection()
        sock.sendall(conn.data_to_send())
    except threading.BrokenBarrierError:
        pass
    except (OSError, ValueError, KeyError) as exc:
        for rec, _ in pending.values():
            rec.error = f"{type(exc).__name__}: {exc}"
            out.append(rec)
        pending.clear()
    finally:
        for rec, _ in pending.values():
            rec.error = "not answered before the wall-time limit"
            out.append(rec)
        sock.close()


def split_requests(total: int, connections: int) -> list[int]:
    """Spread ``total`` requests over ``connections`` as evenly as possible.

    >>> split_requests(10, 3)
    [4, 3, 3]
    """
    base, extra = divmod(total, connections)
    return [base + (1 if i < extra else 0) for i in range(connections)]


def run_load(port: int, settings: LoadSettings, out_path: Path, *, total_requests: int | None = None) -> LoadResult:
    """Drive ``settings`` against 127.0.0.1:``port`` and write ``client.jsonl`` to ``out_path``.

    Args:
        port: Envoy's listener port on 127.0.0.1.
        settings: load shape.
        out_path: the JSONL file to write.
        total_requests: overrides ``connections * requests_per_connection`` (spread evenly).

    Returns:
        the records and wall time.

    Raises:
        LabError: more than :data:`MAX_TOTAL_REQUESTS` asked for, or no connection could be made.
    """
    total = settings.total_requests if total_requests is None else total_requests
    if total < 1 or total > MAX_TOTAL_REQUESTS:
        raise LabError(f"request count {total} outside 1..{MAX_TOTAL_REQUESTS}")
    connections = max(1, min(settings.connections, total))
    counts = split_requests(total, connections)
    wall = min(settings.max_wall_s, MAX_WALL_S)
    per_thread: list[list[ClientRecord]] = [[] for _ in counts]
    barrier = threading.Barrier(len(counts))
    target = _run_http2 if settings.http2 else _run_http1
    t_start = time.monotonic()
    deadline = t_start + wall
    threads = [threading.Thread(target=target, name=f"lab-load-{i}",
                                args=(port, settings, i, n, deadline, per_thread[i], barrier), daemon=True)
               for i, n in enumerate(counts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()) + 15)
    result = LoadResult(wall_s=time.monotonic() - t_start)
    result.hit_wall_limit = time.monotonic() >= deadline
    result.records = sorted((r for rows in per_thread for r in rows), key=lambda r: (r.start_ts_us, r.connection))
    if result.records and all(r.error is not None and r.error.startswith("connect:") for r in result.records):
        raise LabError(f"could not connect to 127.0.0.1:{port}: {result.records[0].error}")
    with out_path.open("w", encoding="utf-8") as fh:
        for rec in result.records:
            fh.write(json.dumps(rec.__dict__, separators=(",", ":")) + "\n")
    return result
