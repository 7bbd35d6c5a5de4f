"""A deadline for each API read, which a server sending one byte a second cannot stretch.

urllib3's read timeout bounds each ``recv``: a server that sends a byte before it runs out resets it, so
``--request-timeout 3s`` once took a minute. :func:`within` runs one read (a whole API call, or one chunk
of a log stream) in a daemon thread and gives up when the deadline passes: the caller gets
:class:`ApiTooSlow` and the connection is dropped, never handed back to the pool.
"""
from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from envoy_dissector.kube.errors import KubeError

T = TypeVar("T")


def _drop_connection(thread: threading.Thread) -> None:
    """Shut down the socket ``thread`` is blocked reading: http.client reads through a ``socket.SocketIO``
    (plain and TLS alike), websocket-client's handshake through a function given the socket (``sock``),
    found in the thread's frames; the read then fails and the thread returns."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        sock = getattr(frame.f_locals.get("self"), "_sock", None)
        if not isinstance(sock, socket.socket):
            sock = frame.f_locals.get("sock")
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            return
        frame = frame.f_back


class ApiTooSlow(KubeError):
    """The API server did not deliver a response (or a chunk of one) within the request timeout."""


def within(seconds: float, what: str, read: Callable[[], T]) -> T:
    """``read()``'s result, or :class:`ApiTooSlow` once ``seconds`` have passed; its exception is re-raised.

    The socket of a read given up on is shut down, so its thread ends too (a daemon thread still blocked on
    a socket when the interpreter exits can abort the process).
    """
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(read())
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=run, name="kube-read", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        _drop_connection(worker)
        worker.join(1.0)
        raise ApiTooSlow(f"{what}: the API server did not answer within {seconds:g} s (--request-timeout; "
                         "a server that sends too slowly counts as not answering)")
    if failure:
        raise failure[0]
    return outcome[0]
