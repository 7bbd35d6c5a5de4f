"""A small external-authorization server for the lab's ext_authz scenario (Envoy ``http_service``).

Stdlib only, 127.0.0.1, one thread per connection, HTTP/1.1 keep-alive. Every check is allowed (``200``)
after a configurable sleep (not CPU). Each check is recorded in a JSONL file (``authz.jsonl``)::

    {"x_request_id": "...", "arrival_ts_us": 1700000000123301, "recv_ts_us": 1700000000123456,
     "service_us": 2071, "sent_ts_us": 1700000000125530, "path": "/", "connection": 0}

``arrival_ts_us`` is when the kernel received the check's first bytes (``SO_TIMESTAMPNS``; null where the
kernel gives no stamp): on a loaded machine the server thread may wake up much later. ``recv_ts_us`` is the
epoch µs at which the check request was fully read; ``service_us`` runs from then until ``sendall`` of the
answer returned (the server's own time for the check), ``sent_ts_us`` is that moment. Envoy forwards the
client's ``x-request-id`` (the scenario allows that header), so a check joins the access log.
"""
from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path
from typing import Final

from envoy_dissector.lab.serving import ThreadedServer, parse_head

_MAX_HEADER_BYTES: Final = 64 * 1024
_MAX_BODY: Final = 1024 * 1024
#: Linux ``SO_TIMESTAMPNS`` (= ``SCM_TIMESTAMPNS``, asm-generic/socket.h); Python's socket module does not name it.
_SO_TIMESTAMPNS: Final = 35
_TIMESPEC = struct.Struct("@qq")


def _kernel_stamp_us(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The kernel's receive time (epoch µs) from ``recvmsg`` ancillary data, if it holds one."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanos = _TIMESPEC.unpack(data[:_TIMESPEC.size])
            return seconds * 1_000_000 + nanos // 1000
    return None


class AuthzServer(ThreadedServer):
    """Threaded HTTP/1.1 server on 127.0.0.1 that allows every check after ``delay_ms``."""

    name = "lab-authz"

    def __init__(self, log_path: Path, *, delay_ms: float = 0.0, port: int = 0) -> None:
        super().__init__(log_path, port=port)
        self.delay_ms = delay_ms
        try:  # accepted sockets inherit it, so even a check sent with the connection is stamped
            self._sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            pass
        self.checks = 0

    def _serve(self, conn: socket.socket, index: int) -> None:
        conn.settimeout(None)
        try:
            conn.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            pass  # no kernel stamps: arrival_ts_us stays null
        buf = b""
        arrival: int | None = None
        try:
            while not self._stop.is_set():
                head_end = buf.find(b"\r\n\r\n")
                if head_end < 0:
                    if len(buf) > _MAX_HEADER_BYTES:
                        return
                    data, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(_TIMESPEC.size))
                    if not data:
                        return
                    if not buf:  # the first bytes of a new check
                        arrival = _kernel_stamp_us(ancillary)
                    buf += data
                    continue
                request_line, headers = parse_head(buf[:head_end])
                end = head_end + 4 + min(int(headers.get("content-length", "0") or 0), _MAX_BODY)
                while len(buf) < end:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                buf = buf[end:]
                recv_ts_us = time.time_ns() // 1000
                t0 = time.perf_counter_ns()
                if self.delay_ms > 0:
                    time.sleep(self.delay_ms / 1000.0)
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                service_us = (time.perf_counter_ns() - t0) // 1000
                parts = request_line.split(" ")
                self._record({"x_request_id": headers.get("x-request-id"), "arrival_ts_us": arrival,
                              "recv_ts_us": recv_ts_us, "service_us": service_us,
                              "sent_ts_us": recv_ts_us + service_us,
                              "path": parts[1] if len(parts) > 1 else "", "connection": index})
                arrival = None
        except (OSError, ValueError):
            return

    def _record(self, row: dict[str, object]) -> None:
        with self._lock:
            self.checks += 1
            self._write_line(json.dumps(row, separators=(",", ":")) + "\n", flush=True)
