"""Sources: files, globs, gzip, stdin and in-memory text, read as blocks of whole lines.

Nothing after this module knows where bytes came from: every source yields
``Block(origin, data, bytes_read)`` with ``data`` holding whole lines.
"""
from __future__ import annotations

import errno
import glob
import gzip
import io
import os
import stat
import sys
import zlib
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

from envoy_dissector.parser import limits
from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.growing import GrowingFile, GrowingReader
from envoy_dissector.parser.limits import CountingReader
from envoy_dissector.parser.streams import StreamReader, is_stream

BLOCK_BYTES = 16 * 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Block:
    origin: str
    data: bytes  # whole lines, UTF-8 as read (invalid bytes are replaced when decoded)
    bytes_read: int  # cumulative bytes consumed from the (decompressed) source
    oversize: int = 0  # lines longer than limits.max_line_bytes() replaced by a marker (see limits.py)
    idle: bool = False  # a live stream went quiet after this block (``streams.StreamReader.idle``)

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Source:
    """One input: a path, ``-`` for stdin, or literal text. ``growing``: the path is a file still being written
    (an upload), read as it grows (``growing.py``)."""

    name: str
    path: Path | None = None
    text: str | None = None
    growing: GrowingFile | None = field(default=None, compare=False, repr=False)

    @property
    def argument(self) -> str:
        """What to give :func:`expand` to get this source again: the name, or the path when the name shows
        bytes of it escaped (``shown_name``)."""
        return self.name if self.path is None or Path(self.name) == self.path else os.fspath(self.path)

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
        try:
            sources.extend(_expand_one(str(item)))
        except PermissionError as exc:
            raise InputError(f"cannot open: {exc.strerror}", path=str(item)) from None
    if not sources:
        raise InputError("no input given")
    return sources


def shown_name(name: str) -> str:
    """A file name as valid text: bytes of it that are not UTF-8 (``os.fsdecode``'s surrogates) as ``\\xNN``.

    The name is the source's origin in every frame and output; the file is opened by its path.
    """
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate not made by fsdecode
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _expand_one(name: str) -> list[Source]:
    if name == "-":
        return [Source("<stdin>")]
    shown = shown_name(name)
    if any(ch in name for ch in "*?[") and not os.path.exists(name):
        matches = sorted(glob.glob(name))
        if not matches:
            raise InputError("no file matches this pattern", path=shown)
        return [Source(shown_name(m), path=Path(m)) for m in matches]
    path = Path(name)
    try:
        mode = path.stat().st_mode
    except OSError as exc:  # ELOOP, ENAMETOOLONG, EACCES on a folder...: the reason, not "no such file"
        reason = "no such file" if exc.errno == errno.ENOENT else (exc.strerror or str(exc)).lower()
        if exc.errno == errno.ELOOP:
            reason = f"a symbolic link loop ({reason})"
        raise InputError(reason, path=shown) from None
    if stat.S_ISDIR(mode):
        raise InputError("is a directory; give the log files inside it (a glob works)", path=shown)
    return [Source(shown, path=path)]


def _stdin_fd() -> int | None:
    try:
        return sys.stdin.buffer.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def open_binary(source: Source) -> tuple[BinaryIO, CountingReader | None]:
    """The source's bytes, gunzipped when they start with the gzip magic (files and stdin alike);
    with the counter of compressed bytes read for a gzip stream (``limits.check_inflation`` reads it)."""
    fh: BinaryIO
    if source.path is None:
        fh = sys.stdin.buffer
        stdin_fd = _stdin_fd()
        if stdin_fd is not None and is_stream(stdin_fd):
            fh = StreamReader(stdin_fd)  # type: ignore[assignment]  # Ctrl-C works (streams.py)
        elif not hasattr(fh, "peek"):
            fh = io.BufferedReader(fh)  # type: ignore[type-var]
    else:
        try:
            fh = open(source.path, "rb")  # noqa: SIM115 (closed by the caller)
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror}", path=source.name) from exc
        if is_stream(fh.fileno()):  # a FIFO or device: Ctrl-C and live streams (streams.py)
            fd = os.dup(fh.fileno())
            fh.close()
            fh = StreamReader(fd, owned=True)  # type: ignore[assignment]
    peek = getattr(fh, "peek", None)
    try:
        head = peek(2)[:2] if peek is not None else b""
        if len(head) == 1 and peek is not None:  # a pipe may deliver the first byte alone
            head = peek(2)[:2]
    except OSError as exc:  # EIO (/proc/self/mem), EISDIR...: the file opens but cannot be read
        if source.path is not None:
            fh.close()
        raise InputError(f"read failed: {exc.strerror or exc}", path=source.name) from None
    if head == GZIP_MAGIC:
        counter = CountingReader(fh)  # closing the gzip reader does not close it: read_blocks does
        return cast(BinaryIO, gzip.GzipFile(fileobj=counter, mode="rb")), counter  # type: ignore[arg-type]
    return fh, None


def read_blocks(source: Source, block_bytes: int = BLOCK_BYTES) -> Iterator[Block]:
    """Yield blocks of whole lines (the last may lack a final newline)."""
    if source.text is not None:
        if source.text:  # empty text has no lines, like an empty file
            yield Block(source.name, source.text.encode(), len(source.text))
        return
    fh, counter = open_binary(source)
    try:
        consumed = 0
        if counter is None and source.path is not None and _is_regular(fh):
            resume = yield from _file_blocks(fh.fileno(), source.name, block_bytes, source.growing)
            if resume is None:
                return
            fh.seek(resume)
            consumed = resume
        stream = fh if source.growing is None else cast(BinaryIO, GrowingReader(fh, source.growing, source.name))
        yield from _stream_blocks(stream, counter, source.name, block_bytes, consumed, pipe=_is_pipe(source))
    finally:
        if source.path is not None or counter is not None:
            fh.close()  # a gzip reader does not close the file under it, nor stdin
        if source.path is not None and counter is not None:
            counter.inner.close()


def _is_pipe(source: Source) -> bool:
    """Stdin or a path that is a pipe, FIFO or socket: a stream the user chose, which may rightly go on."""
    try:
        if source.path is not None:
            mode = os.stat(source.path).st_mode
        else:
            fd = _stdin_fd()
            if fd is None:
                return False
            mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _is_regular(fh: BinaryIO) -> bool:
    try:
        return stat.S_ISREG(os.fstat(fh.fileno()).st_mode)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


#: Where a regular file's block looks for its last newline; a line crossing a block's end without a newline in
#: this many bytes before it goes to ``_stream_blocks``.
TAIL_BYTES = 1 << 16


def _file_blocks(fd: int, name: str, block_bytes: int,
                 growing: GrowingFile | None = None) -> Generator[Block, None, int | None]:
    """Blocks of a regular file, each read straight into the bytes handed on.

    The block's last newline is found in its tail first (a small read), then exactly the whole lines are read
    with ``os.pread``, which copies outside the GIL; the stream reader instead joins the previous block's partial
    line to the next block and slices off the new partial line, two copies of every block while holding the GIL
    (the parser's other threads wait for it). Returns the offset to go on from with ``_stream_blocks`` when a
    line crosses a block's end with no newline in the tail, or the file changes under the reader; None at its end.
    A ``growing`` file is read a block once that block is written (or the writer has ended).
    """
    offset = 0
    tail_bytes = min(TAIL_BYTES, block_bytes)
    while True:
        if growing is not None:
            growing.wait_for(offset + block_bytes, name)
        tail = _pread(fd, name, tail_bytes, offset + block_bytes - tail_bytes)
        if len(tail) < tail_bytes:  # the file ends within this block
            data = _pread(fd, name, block_bytes, offset)
            if not data:
                return None
            if not data.endswith(b"\n") and _pread(fd, name, 1, offset + len(data)):
                return offset  # the file grew while read: its new end may continue the last line
            offset += len(data)
            yield Block(name, data, offset)
            continue
        cut = tail.rfind(b"\n")
        if cut < 0:
            return offset
        size = block_bytes - tail_bytes + cut + 1
        data = _pread(fd, name, size, offset)
        if len(data) < size or not data.endswith(b"\n"):
            return offset
        offset += size
        yield Block(name, data, offset)


def _pread(fd: int, name: str, size: int, offset: int) -> bytes:
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:  # as the stream reader reports a failed read
        raise InputError(f"read failed: {exc}", path=name) from exc


def _stream_blocks(fh: BinaryIO, counter: CountingReader | None, name: str, block_bytes: int,
                   consumed: int, *, pipe: bool = False) -> Iterator[Block]:
    """Blocks of any stream (gzip, stdin, FIFOs): each read's partial last line is carried into the next.

    Past ``limits.max_bytes_without_line()`` without a line break the source is judged endless
    (``/dev/zero``): a file or device is refused; a ``pipe`` is read on, said once on stderr.
    """
    max_line, ratio = limits.max_line_bytes(), limits.max_gzip_ratio()
    endless = limits.max_bytes_without_line()
    carry = b""
    skipping = -1  # bytes dropped so far of a line longer than max_line (-1: not skipping)
    warned = False
    while True:
        try:
            data = fh.read(block_bytes)
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise InputError(f"read failed: {exc}", path=name) from exc
        consumed += len(data)
        if counter is not None:
            limits.check_inflation(name, consumed, counter.count, ratio)
        oversize = 0
        if skipping >= 0:  # drop the long line's bytes up to its newline, keep a marker line
            end = data.find(b"\n")
            skipping += len(data) if end < 0 else end
            if endless and skipping > endless and not warned:
                _endless(name, skipping, pipe)
                warned = True
            if end < 0 and data:
                continue
            data = limits.oversize_marker(skipping, max_line) + (data[end:] if end >= 0 else b"\n")
            skipping, oversize = -1, 1
        if not data:
            if carry:
                yield Block(name, carry, consumed)
            return
        if carry:
            data = carry + data
        cut = data.rfind(b"\n")
        whole, carry = (b"", data) if cut < 0 else (
            (data, b"") if cut == len(data) - 1 else (data[: cut + 1], data[cut + 1 :]))
        if max_line and len(carry) > max_line:
            skipping, carry = len(carry), b""
        if whole:
            yield Block(name, whole, consumed, oversize, idle=not carry and getattr(fh, "idle", False) is True)


def _endless(name: str, size: int, pipe: bool) -> None:
    """A source past the bound without a line break: refused, or (a pipe) read on with a warning."""
    what = f"{size // (1024 * 1024)} MiB without a line break"
    if not pipe:
        raise InputError(f"{what}: not a text log (an endless device such as /dev/zero?); reading stopped "
                         "(ENVOY_DISSECTOR_MAX_BYTES_WITHOUT_LINE)", path=name)
    print(f"envoy-dissect: warning: {name}: {what}; still reading the pipe, its bytes dropped until the next "
          "line break (Ctrl-C stops)", file=sys.stderr, flush=True)


def text_source(text: str, name: str = "<text>") -> Source:
    return Source(name, text=text)
