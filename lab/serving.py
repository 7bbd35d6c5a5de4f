"""What the lab's small servers share: a threaded TCP server on 127.0.0.1 that logs one JSON line per exchange.

Stdlib only. One thread accepts (polling every 0.2 s so ``stop`` is quick), one thread serves each
connection (``TCP_NODELAY`` on every accepted socket, so Nagle/delayed-ACK never add ~40 ms); ``stop``
shuts every open connection down, joins the threads and closes the log. A subclass writes ``_serve``.
"""
from __future__ import annotations

import socket
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Self


def parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    """The request line and the headers (lower-case names) of an HTTP/1.1 request head (without its blank line)."""
    request_line, *lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return request_line, headers


class ThreadedServer:
    """Listens on 127.0.0.1 (port 0: the kernel picks) as soon as it is made; ``start`` begins accepting."""

    #: thread names: ``NAME-accept`` and ``NAME-<connection index>``
    name = "lab-server"

    def __init__(self, log_path: Path, *, port: int = 0, backlog: int = 64) -> None:
        self.log_path = log_path
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self._sock.listen(backlog)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._log: IO[str] | None = None
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._accept_thread: threading.Thread | None = None
        self._conn_counter = 0

    def start(self) -> Self:
        """Open the log and accept connections in a background thread."""
        self._log = self.log_path.open("w", encoding="utf-8")
        self._accept_thread = threading.Thread(target=self._accept_loop, name=f"{self.name}-accept", daemon=True)
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, shut every connection down, join the threads, close the log."""
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

    def __enter__(self) -> Self:
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
            with self._lock:
                index = self._conn_counter
                self._conn_counter += 1
                self._conns.append(conn)
            thread = threading.Thread(target=self._serve_and_close, args=(conn, index),
                                      name=f"{self.name}-{index}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve_and_close(self, conn: socket.socket, index: int) -> None:
        try:
            self._serve(conn, index)
        finally:
            with self._lock:
                if conn in self._conns:
                    self._conns.remove(conn)
            conn.close()

    def _serve(self, conn: socket.socket, index: int) -> None:
        """Serve one connection until it ends or ``self._stop`` is set (the socket is closed afterwards)."""
        raise NotImplementedError

    def _write_line(self, line: str, *, flush: bool) -> None:
        """Append one line to the log (call with ``self._lock`` held); ``flush`` makes it visible at once."""
        if self._log is not None:
            self._log.write(line)
            if flush:
                self._log.flush()
