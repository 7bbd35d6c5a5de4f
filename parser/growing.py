"""A file that is still being written, read as it grows: the dashboard analyses an upload while its bytes arrive.

The writer (the upload route) appends to the file and says how many bytes it has flushed (``wrote``), then that
it has ended (``end``) or failed (``fail``). The reader (``sources.read_blocks``) asks for a size before each
read (``wait_for``): it is held until that many bytes are there or the writer is done, so it only ever reads
bytes that are written, and sees the file's end only once the writer has ended.
"""
from __future__ import annotations

import threading
import time
from typing import BinaryIO

from envoy_dissector.parser.errors import InputError

#: A reader gives up when the writer has added nothing for this long (an upload whose client stopped sending).
STALL_S = 600.0


class GrowingFile:
    """How far a file being written has got, shared by its writer and its reader (thread-safe)."""

    def __init__(self, stall_s: float = STALL_S) -> None:
        self.stall_s = stall_s
        self._written = 0
        self._ended = False
        self._failure: str | None = None
        self._changed = threading.Condition()

    @property
    def written(self) -> int:
        return self._written

    def wrote(self, count: int) -> None:
        """``count`` more bytes are in the file (flushed: a reader opening it sees them)."""
        with self._changed:
            self._written += count
            self._changed.notify_all()

    def end(self) -> None:
        """The file is complete."""
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def fail(self, reason: str) -> None:
        """The file will not be completed; a reader waiting or coming later gets ``InputError(reason)``."""
        with self._changed:
            self._failure, self._ended = reason, True
            self._changed.notify_all()

    def wait_for(self, size: int, name: str) -> None:
        """Return once the file holds ``size`` bytes or the writer has ended; raise ``InputError`` (naming the
        file ``name``) when the writer failed, or has added nothing for ``stall_s``."""
        with self._changed:
            last, since = self._written, time.monotonic()
            while self._written < size and not self._ended:
                self._changed.wait(timeout=min(self.stall_s, 1.0))
                if self._written != last:
                    last, since = self._written, time.monotonic()
                elif time.monotonic() - since >= self.stall_s:
                    raise InputError(f"the file stopped growing for {self.stall_s:.0f} s before it was complete",
                                     path=name)
            if self._failure is not None:
                raise InputError(self._failure, path=name)


class GrowingReader:
    """A file object's ``read`` that waits for the bytes it asks for to be written (``GrowingFile.wait_for``)."""

    def __init__(self, raw: BinaryIO, growing: GrowingFile, name: str) -> None:
        self.raw, self.growing, self.name = raw, growing, name

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            self.growing.wait_for(1 << 62, self.name)  # (until the end)
        else:
            self.growing.wait_for(self.raw.tell() + size, self.name)
        return self.raw.read(size)
