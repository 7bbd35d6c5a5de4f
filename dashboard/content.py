"""What an upload holds, judged by its bytes (never by its name), in bounded memory.

:class:`ContentMeter` is fed the upload's raw bytes as they arrive. It recognises gzip by its magic
number and decompresses it as a stream, ``max_length`` at a time, only to count and look: the
decompressed bytes are dropped at once, so a 2 MB file holding 2 GiB of zeros costs one chunk of
memory and is refused within its first chunk (binary) or as soon as the count passes the cap. Plain
text is counted as is. Refused: other compressions and archives (named), binary content, a line
longer than :data:`MAX_LINE_BYTES`, more than ``max_bytes`` of log text, corrupt or truncated gzip.

>>> m = ContentMeter(max_bytes=100)
>>> m.feed(b"2026-01-01T00:00:00Z\\tinfo\\tenvoy main\\thello\\n"); m.finish(); (m.kind, m.text_bytes)
('text', 43)
"""
from __future__ import annotations

import zlib
from collections.abc import Callable

GZIP_MAGIC = b"\x1f\x8b"
#: decompressed bytes produced per step (and the most held at once)
STEP_BYTES = 1024 * 1024
#: decompressed bytes looked at to decide text or binary
SNIFF_BYTES = 64 * 1024
#: no Envoy / istio-proxy log line comes near this; a longer one is not a log (or an attack)
MAX_LINE_BYTES = 16 * 1024 * 1024
#: share of control characters (besides TAB, LF, CR, FF, ESC) above which content is binary
MAX_CONTROL_SHARE = 0.01
OTHER_FORMATS: tuple[tuple[bytes, str], ...] = (
    (b"PK\x03\x04", "a zip archive"), (b"BZh", "bzip2-compressed"), (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"), (b"7z\xbc\xaf\x27\x1c", "a 7-zip archive"),
    (b"\x04\x22\x4d\x18", "lz4-compressed"), (b"Rar!", "a RAR archive"), (b"PAR1", "a parquet file"),
    (b"\x7fELF", "an executable"), (b"%PDF", "a PDF document"), (b"\x89PNG", "an image"),
)
_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 12, 13, 27)) + b"\x7f"


class ContentRefused(Exception):
    """The upload is not accepted; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _mb(n: int) -> str:
    """Bytes in the unit of ``--max-upload-mb`` (MiB, written MB as the option is)."""
    return f"{n / 2**20:,.4g} MB"


def too_large_message(max_bytes: int) -> str:
    return (f"more than this server's upload limit of {_mb(max_bytes)} of log text (decompressed) "
            f"(start it with --max-upload-mb to raise it, or analyse the file with `envoy-dissect analyze`)")


class ContentMeter:
    """Counts and checks an upload's log text as its raw bytes arrive (see the module doc)."""

    def __init__(self, max_bytes: int, max_line_bytes: int = MAX_LINE_BYTES,
                 sink: Callable[[bytes], object] | None = None) -> None:
        self.max_bytes = max_bytes
        #: gets the log text (decompressed) once checked
        self.sink = sink
        self.max_line_bytes = max_line_bytes
        self.kind: str | None = None  # "gzip" or "text" once the first bytes are seen
        self.raw_bytes = 0
        self.text_bytes = 0
        self.lines = 0
        self._head = b""
        self._sniffed = False
        self._sniff_buf = b""
        self._line_run = 0
        self._inflater: zlib._Decompress | None = None

    @property
    def judged(self) -> bool:
        """Whether enough has been seen to accept the content so far (its kind known, the text's head not
        binary); later bytes can still refuse it (size, a long line, a broken gzip stream)."""
        return self._sniffed

    # -- feeding ----------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Take the next raw bytes; raise :class:`ContentRefused` as soon as the upload is refused."""
        if not data:
            return
        self.raw_bytes += len(data)
        if self.kind is None:
            self._head += data
            if len(self._head) < 8 and not data.startswith(GZIP_MAGIC):
                return
            data, self._head = self._head, b""
            self.kind = self._detect(data)
        if self.kind == "gzip":
            self._inflate(data)
        else:
            self._text(data)

    def finish(self) -> None:
        """The upload is complete: refuse an empty or truncated one."""
        if self.kind is None and self._head:
            self.kind = self._detect(self._head)
            data, self._head = self._head, b""
            self._text(data) if self.kind == "text" else self._inflate(data)
        if self.kind == "gzip" and self._inflater is not None and not self._inflater.eof:
            raise ContentRefused(400, "the gzip stream ends early (a truncated file, or the upload was cut off)")
        if not self._sniffed and self.text_bytes:
            self._sniff(b"", final=True)
        if self.text_bytes == 0:
            raise ContentRefused(400, "the file is empty" if self.kind != "gzip" else "the gzip file holds no text")

    # -- internals --------------------------------------------------------------------------------
    @staticmethod
    def _detect(head: bytes) -> str:
        if head.startswith(GZIP_MAGIC):
            return "gzip"
        for magic, what in OTHER_FORMATS:
            if head.startswith(magic):
                raise ContentRefused(415, f"this is {what}, not an Envoy / istio-proxy log: extract the log "
                                          f"(plain text or gzip) and upload that")
        return "text"

    def _inflate(self, data: bytes) -> None:
        while data:
            if self._inflater is None:
                self._inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            try:
                out = self._inflater.decompress(data, STEP_BYTES)
            except zlib.error as exc:
                raise ContentRefused(400, f"not a valid gzip file ({exc}) near compressed byte "
                                          f"{self.raw_bytes:,}") from None
            self._text(out)
            if self._inflater.eof:  # a member ended: the rest (if any) is the next member
                data = self._inflater.unused_data
                if data:
                    self._inflater = None
                    if not data.startswith(GZIP_MAGIC[: len(data)]):
                        raise ContentRefused(400, "not a valid gzip file (data after the end of the gzip stream)")
            else:
                data = self._inflater.unconsumed_tail

    def _text(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.text_bytes += len(chunk)
        if self.text_bytes > self.max_bytes:
            raise ContentRefused(413, too_large_message(self.max_bytes))
        if not self._sniffed:
            self._sniff(chunk)
        first = chunk.find(b"\n")
        if first < 0:
            self._line_run += len(chunk)
        else:
            if self._line_run + first > self.max_line_bytes:
                self._long_line()
            if len(chunk) > self.max_line_bytes and max(map(len, chunk.split(b"\n")[1:-1]), default=0) \
                    > self.max_line_bytes:
                self._long_line()
            self.lines += chunk.count(b"\n")
            self._line_run = len(chunk) - chunk.rfind(b"\n") - 1
        if self._line_run > self.max_line_bytes:
            self._long_line()
        if self.sink is not None:
            self.sink(chunk)

    def _long_line(self) -> None:
        raise ContentRefused(415, f"line {self.lines + 1:,} is longer than {self.max_line_bytes // 2**20} MiB: "
                                  "not an Envoy / istio-proxy trace log")

    def _sniff(self, chunk: bytes, final: bool = False) -> None:
        self._sniff_buf += chunk
        if len(self._sniff_buf) < SNIFF_BYTES and not final:
            return
        head, self._sniff_buf, self._sniffed = self._sniff_buf[:SNIFF_BYTES], b"", True
        if b"\x00" in head[:4096]:
            raise ContentRefused(415, "binary content (NUL bytes), not an Envoy / istio-proxy log"
                                 + (" (inside the gzip file)" if self.kind == "gzip" else ""))
        control = len(head) - len(head.translate(None, _CONTROL))
        if head and control / len(head) > MAX_CONTROL_SHARE:
            raise ContentRefused(415, "binary content, not an Envoy / istio-proxy log"
                                 + (" (inside the gzip file)" if self.kind == "gzip" else ""))


__all__ = ["MAX_LINE_BYTES", "ContentMeter", "ContentRefused", "too_large_message"]
