"""A lean upstream for the benchmark scenarios: one process, one thread, ``selectors``, a fixed 64-byte answer.

The scenario upstream (``lab.upstream``) spends a thread per connection and writes a JSON line per request;
under a benchmark's load that, not Envoy, would saturate the client's core first. This one answers each
request head (bodies are not expected: the bench client sends GETs) with one write and logs nothing. It runs
as its own process (:class:`LeanUpstream`), so it shares no interpreter lock with the client, and stops when
told or after :data:`MAX_LIFE_S`.

``python -m envoy_dissector.lab.bench_upstream PORT_FILE`` listens on 127.0.0.1 (a kernel-chosen port) and
writes the port into PORT_FILE.
"""
from __future__ import annotations

import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Final

from envoy_dissector.lab.envoy import LabError

#: The process exits by itself after this long.
MAX_LIFE_S: Final = 600.0
_ANSWER: Final = (b"HTTP/1.1 200 OK\r\ncontent-length: 64\r\ncontent-type: application/octet-stream\r\n"
                  b"server: envoy-dissector-lab\r\n\r\n" + b"x" * 64)


def serve(port_file: Path) -> None:
    """Accept and answer on 127.0.0.1 until killed or :data:`MAX_LIFE_S` passed."""
    sel = selectors.DefaultSelector()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(512)
    listener.setblocking(False)
    sel.register(listener, selectors.EVENT_READ, None)
    port_file.write_text(str(listener.getsockname()[1]))
    buffers: dict[socket.socket, bytes] = {}
    end = time.monotonic() + MAX_LIFE_S
    while time.monotonic() < end:
        for key, _ in sel.select(timeout=1.0):
            if key.data is None:
                conn, _ = listener.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.setblocking(False)
                buffers[conn] = b""
                sel.register(conn, selectors.EVENT_READ, conn)
                continue
            conn = key.data
            try:
                chunk = conn.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                sel.unregister(conn)
                conn.close()
                buffers.pop(conn, None)
                continue
            buf = buffers[conn] + chunk
            heads = buf.count(b"\r\n\r\n")
            if heads:
                buf = buf[buf.rindex(b"\r\n\r\n") + 4:]
                try:
                    conn.sendall(_ANSWER * heads)
                except OSError:
                    pass
            buffers[conn] = buf


class LeanUpstream:
    """:func:`serve` in a child process (it inherits the calling thread's CPU affinity); a context manager."""

    def __init__(self, work_dir: Path) -> None:
        self.port_file = work_dir / "upstream.port"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def __enter__(self) -> LeanUpstream:
        self.port_file.unlink(missing_ok=True)
        self._proc = subprocess.Popen([sys.executable, "-m", "envoy_dissector.lab.bench_upstream",
                                       str(self.port_file)], stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise LabError(f"the bench upstream exited at start with code {self._proc.returncode}")
            if self.port_file.exists() and (text := self.port_file.read_text()):
                self.port = int(text)
                return self
            time.sleep(0.02)
        self.__exit__(None, None, None)
        raise LabError("the bench upstream did not start within 20 s")

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
            self._proc = None
        self.port_file.unlink(missing_ok=True)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
