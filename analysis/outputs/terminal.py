"""Text for a terminal: control characters from log content are shown escaped, never sent raw.

A log line can hold ANSI/OSC escape sequences (``ESC ]8;;URL`` hyperlinks, ``ESC ]0;`` window
titles, cursor moves, clear-screen) or bidirectional overrides; printed raw they would act on the
user's terminal. ``terminal_safe`` writes them as ``\\x1b``, ``\\u202e``... (newline and tab kept).
``SafeStdout`` applies it to everything printed on stdout by the command line.
"""
from __future__ import annotations

import errno
import io
import os
from typing import TextIO

#: The report's widest and narrowest layouts (docs/output.md): piped output is at most ``MAX_WIDTH`` wide.
MAX_WIDTH = 100
MIN_WIDTH = 60

_KEPT = {0x09, 0x0A}
_UNSAFE = [c for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)) if c not in _KEPT]
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
_TABLE = {c: f"\\x{c:02x}" for c in _UNSAFE} | {c: f"\\u{c:04x}" for c in _BIDI}


def report_width(stream: TextIO | None = None) -> int:
    """Columns the report may use: ``$COLUMNS`` when set, else the terminal's width when ``stream`` is one, else
    ``MAX_WIDTH``; never more than ``MAX_WIDTH`` (wider is no easier to read) nor less than ``MIN_WIDTH``."""
    columns = os.environ.get("COLUMNS", "").strip()
    width = int(columns) if columns.isdigit() and int(columns) > 0 else None
    if width is None and stream is not None:
        try:
            width = os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
        except (OSError, ValueError, io.UnsupportedOperation):
            width = None
    return max(MIN_WIDTH, min(MAX_WIDTH, width or MAX_WIDTH))


def terminal_safe(text: str) -> str:
    """``text`` with control characters (except newline and tab) and bidi overrides escaped."""
    return text.translate(_TABLE)


class StdoutError(OSError):
    """Writing to standard output failed (``/dev/full``, a closed descriptor)."""


class SafeStdout(io.TextIOBase):
    """A text stream writing ``terminal_safe`` text to ``inner``."""

    def __init__(self, inner: TextIO | None) -> None:
        self.inner = inner  # None when the process was started with stdout closed

    def write(self, text: str) -> int:
        if self.inner is None:
            raise StdoutError(errno.EBADF, "standard output is closed")
        try:
            self.inner.write(terminal_safe(text))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror) from exc
        return len(text)

    def flush(self) -> None:
        if self.inner is None:
            return
        try:
            self.inner.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror) from exc

    def fileno(self) -> int:
        if self.inner is None:
            raise OSError(errno.EBADF, "standard output is closed")
        return self.inner.fileno()

    def isatty(self) -> bool:
        return self.inner is not None and self.inner.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding if self.inner is not None else "utf-8"
