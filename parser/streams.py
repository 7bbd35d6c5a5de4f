"""Reading pipes, FIFOs and terminals so that Ctrl-C works and a live stream flows.

Blocking in ``read()`` on a pipe whose writer stays open ignores Ctrl-C once polars is imported:
the signal may be delivered to one of its worker threads, and the main thread's ``read()`` is never
interrupted. Here the main thread waits with ``select`` in short slices, so Python sees the pending
signal within ``POLL_S``. A read also returns what has arrived once the stream has been quiet for
``IDLE_S`` (then ``idle`` is true), or at the latest ``LATENCY_S`` after its first byte:
``kubectl logs -f | envoy-dissect analyze - --until ...`` progresses (and can stop) without waiting for
a full block, and follow mode hands on what a quiet log wrote last (``iter_parse(flush_idle=True)``).
"""
from __future__ import annotations

import os
import select
import stat
import time

POLL_S = 0.2
LATENCY_S = 1.0
#: Seconds without a new byte after which a read returns what it has (the writer has paused).
IDLE_S = 0.2
_PIECE = 1 << 20


def is_stream(fd: int) -> bool:
    """A pipe, FIFO, socket or terminal (anything but a regular file or block device)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISBLK(mode))


class StreamReader:
    """``read(n)``/``peek(n)``/``close()`` over a file descriptor, interruptible and with bounded latency."""

    def __init__(self, fd: int, *, owned: bool = False) -> None:
        self.fd, self.owned = fd, owned
        self._buffer = bytearray()
        self._eof = False
        self.closed = False
        #: the last ``read`` returned because nothing more came for ``IDLE_S``
        self.idle = False

    def _wait(self, deadline: float | None) -> bool:
        """True when the descriptor is readable; False at ``deadline``. Returns to Python every POLL_S."""
        while True:
            timeout = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if ready:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _fill(self, want: int, deadline_after_first: float | None) -> None:
        deadline = None
        self.idle = False
        while len(self._buffer) < want and not self._eof:
            if self._buffer and deadline is None and deadline_after_first is not None:
                deadline = time.monotonic() + deadline_after_first
            quiet = None if deadline is None else min(deadline, time.monotonic() + IDLE_S)
            if not self._wait(quiet):
                self.idle = quiet is not None and quiet < deadline  # type: ignore[operator]
                return
            piece = os.read(self.fd, min(_PIECE, max(want - len(self._buffer), 1)))
            if not piece:
                self._eof = True
            self._buffer += piece

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all until EOF when negative): fewer once the stream was quiet for IDLE_S or
        LATENCY_S passed since the first byte arrived; ``b""`` only at EOF."""
        want = n if n >= 0 else 1 << 62
        self._fill(want, LATENCY_S if n >= 0 else None)
        out = bytes(self._buffer[:want])
        del self._buffer[:want]
        return out

    def peek(self, n: int = 1) -> bytes:
        """At least ``n`` bytes when that many arrive before EOF (not consumed)."""
        self._fill(n, None)
        return bytes(self._buffer)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed and self.owned:
            os.close(self.fd)
        self.closed = True
