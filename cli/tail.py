"""Live inputs for follow mode: a growing file (rotation handled), stdin, or any byte stream, each pumped by a
thread of its own into a pipe that the parser reads as a stream (``LivePipe``).

The pipe is what lets Ctrl-C end a follow cleanly: the pumps stop, the pipe's writing end is closed, and the
parser sees the end of its input, so every line read so far is parsed and analysed before the final report.
"""
from __future__ import annotations

import os
import select
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.sources import Source

#: How often a followed file is checked for new bytes, rotation and truncation.
POLL_S = 0.1
READ_BYTES = 1 << 20


class LivePipe:
    """A pipe the pumps write whole lines into (under a lock, so lines of several pumps never interleave) and the
    parser reads as one stream named ``name`` (the origin of its lines)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._read_fd, self._write_fd = os.pipe()
        self._lock = threading.Lock()
        self._closed = False
        self.bytes_written = 0

    @property
    def source(self) -> Source:
        # (the parser opens /proc/self/fd/N like any FIFO: a stream it reads with select, Ctrl-C-safe)
        return Source(self.name, path=Path(f"/proc/self/fd/{self._read_fd}"))

    def write(self, data: bytes) -> None:
        """Write ``data`` whole (blocks while the parser is behind); nothing once closed."""
        with self._lock:
            if self._closed:
                return
            view = memoryview(data)
            while view:
                try:
                    written = os.write(self._write_fd, view)
                except BrokenPipeError:  # the reader is gone (the run failed): drop the rest
                    self._closed = True
                    return
                view = view[written:]
                self.bytes_written += written

    def close_writer(self) -> None:
        """The end of the input: the parser reads what is in the pipe, then sees EOF."""
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._write_fd)

    def close(self) -> None:
        self.close_writer()
        try:
            os.close(self._read_fd)
        except OSError:
            pass


class LineCarry:
    """Whole lines out of arbitrary byte pieces (a partial last line waits for its end)."""

    def __init__(self) -> None:
        self._carry = b""

    def lines(self, data: bytes) -> bytes:
        data = self._carry + data if self._carry else data
        cut = data.rfind(b"\n")
        if cut < 0:
            self._carry = data
            return b""
        self._carry = data[cut + 1:]
        return data[: cut + 1]

    def rest(self) -> bytes:
        rest, self._carry = self._carry, b""
        return rest + b"\n" if rest else b""


class Pump(threading.Thread):
    """Runs ``feed(stop)`` on a thread; its error is kept for the caller (``error``).

    ``stop`` sets the event ``feed`` watches; a feed blocked in a read it cannot leave by itself (a network
    stream) is given ``drain_s`` to read what is on its way, then ``interrupt`` (closing the stream) ends it.
    """

    def __init__(self, name: str, feed: Callable[[threading.Event], None], *,
                 interrupt: Callable[[], None] | None = None, drain_s: float = 0.0) -> None:
        super().__init__(name=name, daemon=True)
        self._feed = feed
        self._interrupt = interrupt
        self._drain_s = drain_s
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._feed(self.stop_event)
        except BaseException as exc:
            self.error = exc

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        if self._interrupt is not None:
            self.join(self._drain_s)
            if self.is_alive():
                self._interrupt()
        self.join(timeout)


class FileFollower:
    """Bytes appended to ``path`` from the start (or its end, ``from_end``) on, for as long as asked.

    Rotation: when the name points at another file (a new inode: `logrotate`'s rename and create, Envoy reopening
    its log on SIGUSR1), the old file is read to its end, then the new one from its start. Truncation in place
    (`copytruncate`, `> file`): reading starts again from the start. A file that does not exist yet (or between a
    rename and the new file's creation) is waited for.
    """

    def __init__(self, path: Path, *, from_end: bool = False, poll_s: float = POLL_S) -> None:
        self.path = path
        self.from_end = from_end
        self.poll_s = poll_s
        self.rotations = 0
        self.truncations = 0

    def chunks(self, stop: threading.Event) -> Iterator[bytes]:
        """The file's new bytes as they come, until ``stop`` is set (then what is there is read to its end)."""
        fh = self._open()
        try:
            if fh is not None and self.from_end:
                fh.seek(0, os.SEEK_END)
            while True:
                stopping = stop.is_set()
                if fh is None:
                    fh = self._open()
                    if fh is None:
                        if stopping:
                            return
                        time.sleep(self.poll_s)
                        continue
                data = fh.read(READ_BYTES)
                if data:
                    yield data
                    continue
                replaced = self._replaced(fh)
                if replaced:
                    # what the old file got between the read above and the rename is still to be read
                    while rest := fh.read(READ_BYTES):
                        yield rest
                    fh.close()
                    fh = self._open()
                    self.rotations += 1
                    continue
                if os.fstat(fh.fileno()).st_size < fh.tell():
                    fh.seek(0)
                    self.truncations += 1
                    continue
                if stopping:
                    return
                time.sleep(self.poll_s)
        finally:
            if fh is not None:
                fh.close()

    def _open(self) -> BinaryIO | None:
        try:
            return self.path.open("rb")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror}", path=str(self.path)) from None

    def _replaced(self, fh: BinaryIO) -> bool:
        """The name now points at another file (read the old one to its end first: done by the caller)."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return False  # renamed away, the new one not created yet: keep reading the old one meanwhile
        mine = os.fstat(fh.fileno())
        return (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev)


def follow_file(follower: FileFollower, pipe: LivePipe) -> Callable[[threading.Event], None]:
    """A pump's work: the followed file's lines into ``pipe`` (a partial last line is sent at the end)."""

    def feed(stop: threading.Event) -> None:
        carry = LineCarry()
        for data in follower.chunks(stop):
            pipe.write(carry.lines(data))
        pipe.write(carry.rest())
        pipe.close_writer()

    return feed


def follow_stdin(pipe: LivePipe, poll_s: float = 0.2) -> Callable[[threading.Event], None]:
    """A pump's work: standard input (``kubectl logs -f … |``) into ``pipe`` until it ends or ``stop`` is set."""

    def feed(stop: threading.Event) -> None:
        fd = sys.stdin.fileno()
        carry = LineCarry()
        try:
            while not stop.is_set():
                ready, _, _ = select.select([fd], [], [], poll_s)
                if not ready:
                    continue
                data = os.read(fd, READ_BYTES)
                if not data:
                    break
                pipe.write(carry.lines(data))
            if stop.is_set():  # what has already arrived belongs to the report
                while select.select([fd], [], [], 0)[0]:
                    data = os.read(fd, READ_BYTES)
                    if not data:
                        break
                    pipe.write(carry.lines(data))
            pipe.write(carry.rest())
        finally:
            pipe.close_writer()

    return feed
