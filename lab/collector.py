"""A small Zipkin collector for the lab's tracing scenario: ``POST /api/v2/spans`` answered 202.

Stdlib only, one thread per connection, HTTP/1.1 keep-alive, chunked or sized bodies. Each flush is
recorded in a JSONL file (``collector.jsonl``)::

    {"recv_ts_us": 1700000000123456, "path": "/api/v2/spans", "body_bytes": 3262, "spans": 5}
"""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import BinaryIO, Final

from envoy_dissector.lab.serving import ThreadedServer

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


class ZipkinCollector(ThreadedServer):
    """Threaded HTTP/1.1 server on 127.0.0.1 that accepts Zipkin v2 JSON span batches."""

    name = "lab-zipkin"

    def __init__(self, log_path: Path, *, port: int = 0) -> None:
        super().__init__(log_path, port=port)
        self.flushes = 0
        self.spans = 0

    def _serve(self, conn: socket.socket, index: int) -> None:
        conn.settimeout(None)
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

    def _record(self, path: str, body: bytes) -> None:
        try:
            spans = len(json.loads(body)) if body else 0
        except ValueError:
            spans = 0
        row = {"recv_ts_us": time.time_ns() // 1000, "path": path, "body_bytes": len(body), "spans": spans}
        with self._lock:
            self.flushes += 1
            self.spans += spans
            self._write_line(json.dumps(row) + "\n", flush=True)
