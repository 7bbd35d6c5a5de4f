"""A small external-authorization server for the lab's ext_authz scenario (Envoy ``http_service``).

Stdlib only, 127.0.0.1, one thread per connection, HTTP/1.1 keep-alive. Every check is allowed (``200``)
after a configurable sleep (not CPU). Each check is recorded in a JSONL file (``authz.jsonl``)::

    {"x_request_id": "...", "recv_ts_us": 1700000000123456, "service_us": 2071, "path": "/", "connection": 0}

``recv_ts_us`` is the epoch µs at which the check request was fully read; ``service_us`` runs from then until
``sendall`` of the answer returned (the authorization server's own time for the check). Envoy forwards the
client's ``x-request-id`` (the scenario allows that header), so a check joins the access log.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, BinaryIO, Final

_MAX_HEADER_LINES: Final = 200
_MAX_BODY: Final = 1024 * 1024


def _read_headers(rfile: BinaryIO) -> dict[str, str] | None:
    """The header block after a request line (lower-case names); ``None`` when the peer closed."""
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADER_LINES):
        line = rfile.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            return headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return None


class AuthzServer:
    """Threaded HTTP/1.1 server on 127.0.0.1 that allows every check after ``delay_ms``."""

    def __init__(self, log_path: Path, *, delay_ms: float = 0.0, port: int = 0) -> None:
        self.log_path = log_path
        self.delay_ms = delay_ms
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._log: IO[str] | None = None
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self.checks = 0

    def start(self) -> AuthzServer:
        self._log = self.log_path.open("w", encoding="utf-8")
        thread = threading.Thread(target=self._accept_loop, name="lab-authz-accept", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=2.0)
        self._sock.close()
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None

    def __enter__(self) -> AuthzServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        index = 0
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(None)
            with self._lock:
                self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn, index), name="lab-authz-conn", daemon=True)
            index += 1
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket, index: int) -> None:
        rfile = conn.makefile("rb")
        try:
            while not self._stop.is_set():
                request_line = rfile.readline()
                if not request_line:
                    return
                headers = _read_headers(rfile)
                if headers is None:
                    return
                length = min(int(headers.get("content-length", "0") or 0), _MAX_BODY)
                if length:
                    rfile.read(length)
                recv_ts_us = time.time_ns() // 1000
                t0 = time.perf_counter_ns()
                if self.delay_ms > 0:
                    time.sleep(self.delay_ms / 1000.0)
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                service_us = (time.perf_counter_ns() - t0) // 1000
                parts = request_line.decode("latin-1").split(" ")
                self._record({"x_request_id": headers.get("x-request-id"), "recv_ts_us": recv_ts_us,
                              "service_us": service_us, "path": parts[1] if len(parts) > 1 else "",
                              "connection": index})
        except (OSError, ValueError):
            return
        finally:
            rfile.close()
            with self._lock:
                if conn in self._conns:
                    self._conns.remove(conn)
            conn.close()

    def _record(self, row: dict[str, object]) -> None:
        with self._lock:
            self.checks += 1
            if self._log is not None:
                self._log.write(json.dumps(row, separators=(",", ":")) + "\n")
                self._log.flush()
