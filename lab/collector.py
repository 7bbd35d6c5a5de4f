"""A small Zipkin collector for the lab's tracing scenario: ``POST /api/v2/spans`` answered 202.

Stdlib only, one thread per connection, HTTP/1.1 keep-alive, chunked or sized bodies. Each flush is
recorded in a JSONL file (``collector.jsonl``)::

    {"recv_ts_us": 1700000000123456, "path": "/api/v2/spans", "body_bytes": 3262, "spans": 5}
"""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, BinaryIO, Final

SPANS_PATH: Final = "/api/v2/spans"
_MAX_BODY: Final = 16 * 1024 * 1024


def _read_body(rfile: BinaryIO, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while True:
            size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                rfile.readline()
                return bytes(body)
            body += rfile.read(size)
            rfile.readline()
            if len(body) > _MAX_BODY:
                raise ValueError("span batch too large")
    return rfile.read(min(int(headers.get("content-length", "0")), _MAX_BODY))


class ZipkinCollector:
    """Threaded HTTP/1.1 server on 127.0.0.1 that accepts Zipkin v2 JSON span batches."""

    def __init__(self, log_path: Path, *, port: int = 0) -> None:
        self.log_path = log_path
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
        self.flushes = 0
        self.spans = 0

    def start(self) -> ZipkinCollector:
        self._log = self.log_path.open("w", encoding="utf-8")
        thread = threading.Thread(target=self._accept_loop, name="lab-zipkin-accept", daemon=True)
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
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ZipkinCollector:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _accept_loop(self) -> None:
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
            thread = threading.Thread(target=self._serve, args=(conn,), name="lab-zipkin-conn", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        rfile = conn.makefile("rb")
        try:
            while not self._stop.is_set():
                request_line = rfile.readline()
                if not request_line:
                    return
                headers: dict[str, str] = {}
                while (line := rfile.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = _read_body(rfile, headers)
                path = request_line.split(b" ")[1].decode("latin-1") if b" " in request_line else ""
                self._record(path, body)
                status = b"202 Accepted" if path == SPANS_PATH else b"404 Not Found"
                conn.sendall(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\n\r\n")
        except (OSError, ValueError):
            return
        finally:
            rfile.close()
            conn.close()

    def _record(self, path: str, body: bytes) -> None:
        try:
            spans = len(json.loads(body)) if body else 0
        except ValueError:
            spans = 0
        row = {"recv_ts_us": time.time_ns() // 1000, "path": path, "body_bytes": len(body), "spans": spans}
        with self._lock:
            self.flushes += 1
            self.spans += spans
            if self._log is not None:
                self._log.write(json.dumps(row) + "\n")
                self._log.flush()
