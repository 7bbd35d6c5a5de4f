"""Bounds on hostile input: the longest physical line, and how far gzip may inflate.

A line longer than ``max_line_bytes()`` is not kept: the reader drops its bytes as they arrive
(memory stays bounded whatever the line's length) and puts a short marker line in its place, so
the line is still counted (as malformed) and its number stays right. A gzip stream that inflates
more than ``max_gzip_ratio()`` times once past ``GZIP_RATIO_FLOOR`` bytes is refused: trace logs
compress 10-30 times, a decompression bomb (zeros) about 1000 times.

A source that goes on without a line break past ``max_bytes_without_line()`` (``/dev/zero``) is judged
endless: a file or device is refused, a pipe or FIFO the user chose is read on with a warning on stderr.

All are set by environment variables (0 turns a bound off): ``ENVOY_DISSECTOR_MAX_LINE_BYTES``
(default 8 MiB), ``ENVOY_DISSECTOR_MAX_GZIP_RATIO`` (default 200), ``ENVOY_DISSECTOR_MAX_BYTES_WITHOUT_LINE``
(default 64 MiB).
"""
from __future__ import annotations

import io
import os
from typing import BinaryIO

from envoy_dissector.parser.errors import InputError

DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_GZIP_RATIO = 200
DEFAULT_MAX_BYTES_WITHOUT_LINE = 64 * 1024 * 1024
#: the ratio is judged only after this many inflated bytes (small files may compress better)
GZIP_RATIO_FLOOR = 64 * 1024 * 1024
OVERSIZE_MARK = "[envoy-dissector: line skipped"


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return max(0, int(text))
    except ValueError:
        return default


def max_line_bytes() -> int:
    """The longest physical line kept (0: no bound)."""
    return _env_int("ENVOY_DISSECTOR_MAX_LINE_BYTES", DEFAULT_MAX_LINE_BYTES)


def max_gzip_ratio() -> int:
    """Inflated / compressed bytes allowed past GZIP_RATIO_FLOOR (0: no bound)."""
    return _env_int("ENVOY_DISSECTOR_MAX_GZIP_RATIO", DEFAULT_MAX_GZIP_RATIO)


def max_bytes_without_line() -> int:
    """Bytes read without one line break before a source is judged endless (0: no bound; see
    ``sources._stream_blocks``: a file or device is then refused, a pipe is read on with a warning)."""
    return _env_int("ENVOY_DISSECTOR_MAX_BYTES_WITHOUT_LINE", DEFAULT_MAX_BYTES_WITHOUT_LINE)


def oversize_marker(size: int, limit: int) -> bytes:
    """What stands for a skipped line: no byte of its content, only its size."""
    return (f"{OVERSIZE_MARK}: {size} bytes, longer than the {limit}-byte limit "
            "(ENVOY_DISSECTOR_MAX_LINE_BYTES)]").encode()


class CountingReader(io.RawIOBase):
    """A read-only view of ``inner`` that counts the bytes read (the compressed side of a gzip stream)."""

    def __init__(self, inner: BinaryIO) -> None:
        self.inner = inner
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.inner.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.count += n
        return n


def check_inflation(name: str, inflated: int, compressed: int, ratio: int) -> None:
    """Refuse a gzip stream inflating beyond ``ratio`` times (once past GZIP_RATIO_FLOOR bytes)."""
    if ratio and inflated > GZIP_RATIO_FLOOR and inflated > ratio * max(compressed, 1):
        raise InputError(f"refused: gzip data inflates more than {ratio} times ({inflated} bytes from "
                         f"{compressed}); a decompression bomb? Set ENVOY_DISSECTOR_MAX_GZIP_RATIO to allow more",
                         path=name)
