"""A lean HTTP/1.1 load client for the benchmark scenarios: one thread, many keep-alive connections.

The scenario client (``lab.load``) spends a thread per connection; under the interpreter lock that client,
not Envoy, would be what saturates first. This one multiplexes its connections with ``selectors`` and does
the least per request (a fixed request, the response framed by ``content-length``), so on one core it
outruns a trace-logging Envoy on another.

* closed loop (:func:`closed_loop`): each connection sends its next request as soon as the last answer is in;
* open loop (:func:`open_loop`): requests leave at a fixed rate on whichever connection is idle (new
  connections are opened, up to a cap, when none is).

Both are bounded by a request count and a wall time, talk to 127.0.0.1 only, and return each request's
latency (µs, from the write of its first byte to the read of its last byte); a failed connection or request
ends the run with ``LabError`` (a benchmark with failures measures nothing).
"""
from __future__ import annotations

import selectors
import socket
import time
from dataclasses import dataclass, field
from typing import Final

from envoy_dissector.lab.envoy import LabError

#: Hard caps on one run, whatever the caller asks.
MAX_REQUESTS: Final = 50_000
MAX_WALL_S: Final = 30.0
MAX_CONNECTIONS: Final = 256


@dataclass(kw_only=True)
class BenchLoad:
    """What one run measured."""

    latencies_us: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    late: int = 0
    """Open loop only: requests sent more than 1 ms after their time (no idle connection, or the client lagged)."""

    @property
    def requests(self) -> int:
        return len(self.latencies_us)

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s if self.wall_s > 0 else 0.0


class _Conn:
    def __init__(self, port: int, request: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.request = request
        self.buf = b""
        self.sent_ns = 0
        self.busy = False

    def send(self) -> None:
        self.sent_ns = time.perf_counter_ns()
        self.busy = True
        self.sock.sendall(self.request)  # a few hundred bytes: the socket buffer takes them at once

    def receive(self) -> int | None:
        """Read what arrived; the latency (µs) when a whole response is in, else None."""
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by the server")
        self.buf += chunk
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return None
        at = self.buf.find(b"content-length:", 0, head_end)
        if at < 0:
            at = self.buf.lower().find(b"content-length:", 0, head_end)
        if at < 0:
            raise ConnectionError("response without content-length")
        length = int(self.buf[at + 15:self.buf.index(b"\r\n", at)])
        if len(self.buf) < head_end + 4 + length:
            return None
        self.buf = self.buf[head_end + 4 + length:]
        self.busy = False
        return (time.perf_counter_ns() - self.sent_ns) // 1000


def _request(port: int, path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nuser-agent: envoy-dissector-bench\r\n\r\n"
            ).encode("ascii")


def _bounded(requests: int, wall_s: float) -> tuple[int, float]:
    return max(1, min(requests, MAX_REQUESTS)), max(0.1, min(wall_s, MAX_WALL_S))


def closed_loop(port: int, *, connections: int, requests: int, wall_s: float, path: str = "/",
                think_us: int = 0) -> BenchLoad:
    """``connections`` keep-alive connections each send a request as soon as the last one was answered
    (after ``think_us``), until ``requests`` were answered or ``wall_s`` passed."""
    requests, wall_s = _bounded(requests, wall_s)
    wire = _request(port, path)
    sel = selectors.DefaultSelector()
    conns: list[_Conn] = []
    result = BenchLoad()
    t0 = time.monotonic()
    deadline = t0 + wall_s
    issued = 0
    waiting: list[tuple[float, _Conn]] = []  # (send at, connection) while thinking
    try:
        for _ in range(max(1, min(connections, MAX_CONNECTIONS))):
            try:
                conns.append(_Conn(port, wire))
            except OSError as exc:
                raise LabError(f"bench client: could not connect to 127.0.0.1:{port}: {exc}") from exc
        t0 = time.monotonic()  # (the clock starts with the first request, not with the connects)
        deadline = t0 + wall_s
        for conn in conns:
            sel.register(conn.sock, selectors.EVENT_READ, conn)
            if issued < requests:
                conn.send()
                issued += 1
        while result.requests < issued and (now := time.monotonic()) < deadline:
            for at, conn in [w for w in waiting if w[0] <= now]:
                waiting.remove((at, conn))
                conn.send()
            timeout = min([deadline - now, *(at - now for at, _ in waiting)])
            for key, _ in sel.select(timeout=max(0.0, timeout)):
                conn = key.data
                try:
                    latency = conn.receive()
                except (OSError, ValueError) as exc:
                    raise LabError(f"bench client: {exc}") from exc
                if latency is None:
                    continue
                result.latencies_us.append(latency)
                if issued < requests and time.monotonic() < deadline:
                    issued += 1
                    if think_us > 0:
                        waiting.append((time.monotonic() + think_us / 1e6, conn))
                    else:
                        conn.send()
    finally:
        result.wall_s = time.monotonic() - t0
        for conn in conns:
            conn.sock.close()
        sel.close()
    return result


def open_loop(port: int, *, rate: float, requests: int, wall_s: float, path: str = "/",
              connections: int = 8) -> BenchLoad:
    """``requests`` at ``rate`` per second, evenly spaced, each on an idle keep-alive connection (one more is
    opened when none is idle, up to :data:`MAX_CONNECTIONS`); stops at ``wall_s``."""
    requests, wall_s = _bounded(requests, wall_s)
    wire = _request(port, path)
    sel = selectors.DefaultSelector()
    conns: list[_Conn] = []

    def opened() -> _Conn:
        try:
            conn = _Conn(port, wire)
        except OSError as exc:
            raise LabError(f"bench client: could not connect to 127.0.0.1:{port}: {exc}") from exc
        sel.register(conn.sock, selectors.EVENT_READ, conn)
        conns.append(conn)
        return conn

    result = BenchLoad()
    interval = 1.0 / max(rate, 0.1)
    try:
        for _ in range(max(1, connections)):
            opened()
        t0 = time.monotonic()
        deadline = t0 + wall_s
        issued = 0
        while (issued < requests or any(c.busy for c in conns)) and (now := time.monotonic()) < deadline:
            due = t0 + issued * interval
            if issued < requests and now >= due:
                idle = next((c for c in conns if not c.busy), None)
                if idle is None and len(conns) < MAX_CONNECTIONS:
                    idle = opened()
                if idle is not None:
                    if now - due > 1e-3:
                        result.late += 1
                    idle.send()
                    issued += 1
                    continue
            wait = (due - now) if issued < requests else deadline - now
            for key, _ in sel.select(timeout=max(0.0, min(wait, deadline - now))):
                conn = key.data
                try:
                    latency = conn.receive()
                except (OSError, ValueError) as exc:
                    raise LabError(f"bench client: {exc}") from exc
                if latency is not None:
                    result.latencies_us.append(latency)
        result.wall_s = time.monotonic() - t0
    finally:
        for conn in conns:
            conn.sock.close()
        sel.close()
    return result
