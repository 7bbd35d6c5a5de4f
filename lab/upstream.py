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
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Final

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


class UpstreamServer:
    """Threaded HTTP/1.1 keep-alive server on 127.0.0.1.

    Use as a context manager::

        with UpstreamServer(UpstreamSettings(), Path("upstream.jsonl")) as up:
            print(up.port)
    """

    def __init__(self, settings: UpstreamSettings, log_path: Path, *, port: int = 0) -> None:
        self.settings = settings
        self.log_path = log_path
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self._sock.listen(256)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._log: IO[str] | None = None
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._accept_thread: threading.Thread | None = None
        self._conn_counter = 0
        self.requests_served = 0
        self._body = b"x" * settings.body_bytes

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> UpstreamServer:
        """Start accepting connections in a background thread."""
        self._log = self.log_path.open("w", encoding="utf-8")
        self._accept_thread = threading.Thread(target=self._accept_loop, name="lab-upstream-accept",
                                               daemon=True)
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, close every connection, join threads, close the log."""
        self._stop.set()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=5)
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=5)
        self._sock.close()
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None

    def __enter__(self) -> UpstreamServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- serving -------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                index = self._conn_counter
                self._conn_counter += 1
                self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn, index),
                                      name=f"lab-upstream-{index}", daemon=True)
            self._threads.append(thread)
            thread.start()

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
                head = buf[:head_end].decode("latin-1")
                request_line, *header_lines = head.split("\r\n")
                headers: dict[str, str] = {}
                for line in header_lines:
                    key, _, value = line.partition(":")
                    headers[key.strip().lower()] = value.strip()
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
        finally:
            with self._lock:
                if conn in self._conns:
                    self._conns.remove(conn)
            conn.close()

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
            if self._log is not None:
                self._log.write(line)
