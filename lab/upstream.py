"""A small HTTP/1.1 keep-alive upstream for the lab (stdlib only, threads).

Listens on 127.0.0.1 (port 0 = the kernel picks), one thread per connection,
``TCP_NODELAY`` on every accepted socket, and each response (headers + body)
sent with one ``sendall`` so Nagle/delayed-ACK never add ~40 ms. A response
can be delayed with ``time.sleep`` (not CPU) — fixed, or per request via the
``x-lab-delay-ms`` request header. Each served request is recorded in a JSONL
file (``upstream.jsonl``)::

    {"x_request_id": "...", "recv_ts_us": 1700000000123456, "service_us": 5123,
     "method": "GET", "path": "/", "body_bytes": 64, "connection": 0}

``recv_ts_us`` is the epoch µs at which the request (headers and body) was fully
read; ``service_us`` runs from then until ``sendall`` of the response returned.
"""
from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from envoy_dissector.lab.serving import ThreadedServer, parse_head

#: Request header that overrides the configured delay for one request (milliseconds).
DELAY_HEADER: Final = "x-lab-delay-ms"
_MAX_HEADER_BYTES: Final = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class UpstreamSettings:
    """How the upstream answers."""

    delay_ms: float = 0.0
    """Sleep this long before answering (``time.sleep``)."""
    body_bytes: int = 64
    """Size of the response body."""
    honour_delay_header: bool = True
    """Let a request's ``x-lab-delay-ms`` header override :attr:`delay_ms`."""


class UpstreamServer(ThreadedServer):
    """Threaded HTTP/1.1 keep-alive server on 127.0.0.1.

    Use as a context manager::

        with UpstreamServer(UpstreamSettings(), Path("upstream.jsonl")) as up:
            print(up.port)
    """

    name = "lab-upstream"

    def __init__(self, settings: UpstreamSettings, log_path: Path, *, port: int = 0) -> None:
        super().__init__(log_path, port=port, backlog=256)
        self.settings = settings
        self.requests_served = 0
        self._body = b"x" * settings.body_bytes

    # -- serving -------------------------------------------------------------------
    def _serve(self, conn: socket.socket, index: int) -> None:
        buf = b""
        conn.settimeout(0.5)
        try:
            while not self._stop.is_set():
                head_end = buf.find(b"\r\n\r\n")
                if head_end < 0:
                    if len(buf) > _MAX_HEADER_BYTES:
                        return
                    try:
                        chunk = conn.recv(65536)
                    except TimeoutError:
                        continue
                    if not chunk:
                        return
                    buf += chunk
                    continue
                request_line, headers = parse_head(buf[:head_end])
                length = int(headers.get("content-length", "0") or 0)
                while len(buf) < head_end + 4 + length:
                    try:
                        chunk = conn.recv(65536)
                    except TimeoutError:
                        if self._stop.is_set():
                            return
                        continue
                    if not chunk:
                        return
                    buf += chunk
                buf = buf[head_end + 4 + length:]
                recv_ts_us = time.time_ns() // 1000
                t0 = time.perf_counter_ns()
                self._answer(conn, request_line, headers)
                service_us = (time.perf_counter_ns() - t0) // 1000
                method, _, rest = request_line.partition(" ")
                path = rest.rpartition(" ")[0]
                self._record({"x_request_id": headers.get("x-request-id"), "recv_ts_us": recv_ts_us,
                              "service_us": service_us, "method": method, "path": path,
                              "body_bytes": len(self._body), "connection": index})
                if headers.get("connection", "").lower() == "close":
                    return
        except OSError:
            return

    def _answer(self, conn: socket.socket, request_line: str, headers: dict[str, str]) -> None:
        delay_ms = self.settings.delay_ms
        if self.settings.honour_delay_header and DELAY_HEADER in headers:
            try:
                delay_ms = float(headers[DELAY_HEADER])
            except ValueError:
                pass
        if delay_ms > 0:
            time.sleep(delay_ms / 1000.0)
        head = ("HTTP/1.1 200 OK\r\n"
                f"content-length: {len(self._body)}\r\n"
                "content-type: application/octet-stream\r\n"
                "server: envoy-dissector-lab\r\n"
                "\r\n").encode("ascii")
        conn.sendall(head + self._body)  # one write: headers and body together

    def _record(self, row: dict[str, object]) -> None:
        line = json.dumps(row, separators=(",", ":")) + "\n"
        with self._lock:
            self.requests_served += 1
            self._write_line(line, flush=False)
