"""Sources: files, globs, gzip, stdin and in-memory text, read as blocks of whole lines.

Nothing after this module knows where bytes came from: every source yields
``Block(origin, data, bytes_read)`` with ``data`` holding whole lines.
"""
from __future__ import annotations

import glob
import gzip
import io
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from envoy_dissector.parser.errors import InputError

BLOCK_BYTES = 16 * 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Block:
    origin: str
    data: bytes  # whole lines, UTF-8 as read (invalid bytes are replaced when decoded)
    bytes_read: int  # cumulative bytes consumed from the (decompressed) source

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Source:
    """One input: a path, ``-`` for stdin, or literal text."""

    name: str
    path: Path | None = None
    text: str | None = None

    def size(self) -> int | None:
        if self.path is not None:
            try:
                return self.path.stat().st_size
            except OSError:
                return None
        if self.text is not None:
            return len(self.text)
        return None


def expand(inputs: str | Path | Sequence[str | Path]) -> list[Source]:
    """Expand paths and globs; ``-`` is stdin. Raises InputError for a missing path or empty glob."""
    items = [inputs] if isinstance(inputs, (str, Path)) else list(inputs)
    sources: list[Source] = []
    for item in items:
        name = str(item)
        if name == "-":
            sources.append(Source("<stdin>"))
            continue
        if any(ch in name for ch in "*?[") and not os.path.exists(name):
            matches = sorted(glob.glob(name))
            if not matches:
                raise InputError("no file matches this pattern", path=name)
            sources.extend(Source(m, path=Path(m)) for m in matches)
            continue
        path = Path(name)
        if not path.exists():
            raise InputError("no such file", path=name)
        if path.is_dir():
            raise InputError("is a directory; give the log files inside it (a glob works)", path=name)
        sources.append(Source(name, path=path))
    if not sources:
        raise InputError("no input given")
    return sources


def _open_binary(source: Source) -> BinaryIO:
    """The source's bytes, gunzipped when they start with the gzip magic (files and stdin alike)."""
    if source.path is None:
        fh: BinaryIO = sys.stdin.buffer
        if not hasattr(fh, "peek"):
            fh = io.BufferedReader(fh)  # type: ignore[type-var]
    else:
        try:
            fh = open(source.path, "rb")  # noqa: SIM115 (closed by the caller)
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror}", path=source.name) from exc
    head = fh.peek(2)[:2] if hasattr(fh, "peek") else b""
    if len(head) == 1:  # a pipe may deliver the first byte alone
        head = fh.peek(2)[:2]
    if head == GZIP_MAGIC:
        if source.path is not None:  # reopen by path so closing the gzip reader closes the file
            fh.close()
            return gzip.open(source.path, "rb")  # type: ignore[return-value]
        return gzip.open(fh, "rb")  # type: ignore[return-value]
    return fh


def read_blocks(source: Source, block_bytes: int = BLOCK_BYTES) -> Iterator[Block]:
    """Yield blocks of whole lines (the last may lack a final newline)."""
    if source.text is not None:
        if source.text:  # empty text has no lines, like an empty file
            yield Block(source.name, source.text.encode(), len(source.text))
        return
    fh = _open_binary(source)
    consumed = 0
    carry = b""
    try:
        while True:
            try:
                data = fh.read(block_bytes)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                raise InputError(f"read failed: {exc}", path=source.name) from exc
            consumed += len(data)
            if not data:
                if carry:
                    yield Block(source.name, carry, consumed)
                return
            if carry:
                data = carry + data
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            whole, carry = (data, b"") if cut == len(data) - 1 else (data[: cut + 1], data[cut + 1 :])
            yield Block(source.name, whole, consumed)
    finally:
        if source.path is not None:
            fh.close()


def text_source(text: str, name: str = "<text>") -> Source:
    return Source(name, text=text)
